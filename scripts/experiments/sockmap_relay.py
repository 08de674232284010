#!/usr/bin/env python3
"""Feasibility experiment: can a BPF sockmap relay a download kernel-side faster than splice(2)?

Measures, on loopback, `curl -o /dev/null` of --mib MiB from a local HTTP origin (its own
process) in three ways, interleaved, median of --runs each, in the same run:

  direct   curl -> origin
  splice   curl -> relay process -> origin, response moved origin -> pipe -> client by splice(2)
           through a 1 MiB pipe (what runner/netproxy/src/pump.rs does)
  sockmap  curl -> relay process -> origin; the relay writes the request head itself, then the
           response never reaches user space: a BPF_PROG_TYPE_SK_SKB verdict program attached to a
           SOCKHASH of origin sockets redirects every skb received on the origin socket to the
           egress of the client socket (bpf_sk_redirect_hash, flags 0) looked up in a second
           SOCKHASH keyed by the origin socket's cookie.

It also reports what the relay observes at the origin's FIN (poll bits, what recv returns), and
whether every redirected byte reached the client before the relay shut the client's write side:
mode `sockmap-eager` shuts down as soon as the origin's EOF is seen, mode `sockmap-passive` never
wakes during the transfer (waits for the client to close: pure kernel-side throughput), mode
`sockmap` first waits (5 ms timer) until the client socket holds every byte (tcpi_bytes_acked + SIOCOUTQ of the client socket ==
bytes counted by the program in a BPF array map == tcpi_bytes_received of the origin socket).

No BPF compiler is needed: the program is a hand-assembled table of instructions below.
Needs root (CAP_BPF + CAP_NET_ADMIN). Usage:
  scripts/experiments/sockmap_relay.py [--mib N] [--runs N] [--sndbuf BYTES] [--attach 38|5] [--slow]
--sndbuf sets SO_SNDBUFFORCE on the relays' client sockets; --attach picks BPF_SK_SKB_VERDICT (38)
or BPF_SK_SKB_STREAM_VERDICT without a parser (5); --slow adds one download per relay by a client
reading 2 MiB/s (shows whether the origin is held back). Relay logs: /tmp/sockmap-relay-<mode>.log.

Findings (2026-12-01, kernel 6.18, 2 cores shared with other work, 100 MiB, 11 runs each,
interleaved; median ms and ratio to direct in the same run):

  sndbuf   direct   splice         sockmap        sockmap-passive
  default  19.6     64.9 (3.31x)   55.6 (2.83x)   57.5 (2.93x)
  32 MiB   19.5     59.1 (3.04x)   45.6 (2.34x)   49.8 (2.56x)
  default  22.2     75.9 (3.41x)   66.3 (2.98x)   69.7 (3.13x)
  32 MiB   19.4     57.4 (2.96x)   52.9 (2.73x)   54.1 (2.79x)
  default  23.9     61.3 (2.56x)   50.1 (2.09x)   58.2 (2.43x)
  32 MiB   41.1     81.9 (1.99x)   63.9 (1.56x)   80.6 (1.96x)

So the kernel-side relay is 10-25 % faster than a user-space splice relay but stays around 2-3x
of the direct transfer: never <= 1.45x. The redirected skbs are queued to the client socket's
psock and sent by a kernel worker, which is a third actor on two cores just like a relay process.
With the default send buffer the worker also stalls when the client socket is full (runs of
150-270 ms); a 32 MiB SO_SNDBUFFORCE removes those stalls.

Other observations:
- EOF: at the origin's FIN, poll on the origin socket reports POLLIN|POLLRDHUP and recv returns
  b"" (EOF). POLLIN alone also fires while data flows (recv then says EAGAIN: the bytes went to
  the verdict program, none ever reached user space), so a relay must loop until recv == 0.
- Half-close: the redirect is asynchronous. At the origin's EOF the client socket had been handed
  anywhere from 0 to ~92 % of the bytes; shutting the client's write side right then
  (`sockmap-eager`) loses the rest: curl gets exactly the body bytes handed by then (7/7 runs
  short, 5-41 MB of 100 MiB; "empty reply" when nothing was handed yet). Waiting until
  tcpi_bytes_acked + SIOCOUTQ of the client socket (read in that order, so never over-counted)
  reaches the origin's tcpi_bytes_received - 1 (the FIN counts as one byte) before the shutdown
  delivered every byte in every run.
- Counting: the program's per-skb sum of skb->len (BPF array map) equalled the origin socket's
  tcpi_bytes_received - 1 exactly in every run; the client's acked + queued bytes reach it.
- No backpressure: with a client reading 2 MiB/s the origin finished sending all 100 MiB within
  ~45 ms; ~96 MiB sat in kernel memory queued for the client (more than the 32 MiB tcp_rmem
  maximum of the origin socket). A command that opens downloads and does not read would pin the
  server's kernel memory: a production relay would have to watch the bytes in flight itself.
- After the relay's shutdown the client socket later reports POLLERR / EPIPE on recv (the worker
  hits the shut-down socket), although the client had received every byte.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import os
import select
import socket
import statistics
import struct
import subprocess
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR_BPF = 321  # x86_64

BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM, BPF_MAP_DELETE_ELEM = 0, 1, 2, 3
BPF_PROG_LOAD, BPF_PROG_ATTACH = 5, 8
BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_SOCKHASH = 2, 18
BPF_PROG_TYPE_SK_SKB = 14
BPF_SK_SKB_STREAM_VERDICT, BPF_SK_SKB_VERDICT = 5, 38
BPF_ANY = 0
SO_COOKIE = 57
SIOCOUTQ = 0x5411
POLLRDHUP = 0x2000
SNDBUF = 0


def bpf(cmd: int, attr: bytes) -> int:
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(NR_BPF, cmd, buf, 128)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"bpf({cmd}): {os.strerror(e)}")
    return r


def map_create(mtype: int, key: int, value: int, entries: int) -> int:
    return bpf(BPF_MAP_CREATE, struct.pack("=IIIII", mtype, key, value, entries, 0))


def map_update(fd: int, key: bytes, value: bytes) -> None:
    k, v = ctypes.create_string_buffer(key), ctypes.create_string_buffer(value)
    bpf(BPF_MAP_UPDATE_ELEM, struct.pack("=IIQQQ", fd, 0, ctypes.addressof(k), ctypes.addressof(v), BPF_ANY))


def map_delete(fd: int, key: bytes) -> None:
    k = ctypes.create_string_buffer(key)
    bpf(BPF_MAP_DELETE_ELEM, struct.pack("=IIQ", fd, 0, ctypes.addressof(k)))


def map_lookup_u64(fd: int, key: bytes) -> int:
    k, v = ctypes.create_string_buffer(key), ctypes.create_string_buffer(8)
    bpf(BPF_MAP_LOOKUP_ELEM, struct.pack("=IIQQ", fd, 0, ctypes.addressof(k), ctypes.addressof(v)))
    return struct.unpack("=Q", v.raw[:8])[0]


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("=BBhi", code, (src << 4) | dst, off, imm)


def program(counter_fd: int, clients_fd: int) -> bytes:
    """The verdict program: count skb->len into counter[0], redirect to clients[cookie(origin)]."""
    BPF_PSEUDO_MAP_FD = 1
    return b"".join([
        insn(0xBF, 6, 1),                              # r6 = r1 (skb)
        insn(0x61, 7, 6, 0),                           # r7 = *(u32 *)(r6 + 0)   skb->len
        insn(0x62, 10, 0, -4, 0),                      # *(u32 *)(r10 - 4) = 0   key 0
        insn(0x18, 1, BPF_PSEUDO_MAP_FD, 0, counter_fd), insn(0),  # r1 = &counter (ld_imm64)
        insn(0xBF, 2, 10),                             # r2 = r10
        insn(0x07, 2, 0, 0, -4),                       # r2 += -4
        insn(0x85, 0, 0, 0, 1),                        # call map_lookup_elem
        insn(0x15, 0, 0, 1, 0),                        # if r0 == 0 goto +1
        insn(0xDB, 0, 7, 0, 0),                        # lock *(u64 *)(r0 + 0) += r7
        insn(0xBF, 1, 6),                              # r1 = r6
        insn(0x85, 0, 0, 0, 46),                       # call get_socket_cookie(skb)
        insn(0x7B, 10, 0, -16),                        # *(u64 *)(r10 - 16) = r0
        insn(0xBF, 1, 6),                              # r1 = r6
        insn(0x18, 2, BPF_PSEUDO_MAP_FD, 0, clients_fd), insn(0),  # r2 = &clients (ld_imm64)
        insn(0xBF, 3, 10),                             # r3 = r10
        insn(0x07, 3, 0, 0, -16),                      # r3 += -16  &cookie
        insn(0xB7, 4, 0, 0, 0),                        # r4 = 0     flags: egress
        insn(0x85, 0, 0, 0, 72),                       # call sk_redirect_hash
        insn(0x95),                                    # exit (r0 = SK_PASS / SK_DROP)
    ])


def prog_load(insns: bytes, attach: int) -> int:
    code = ctypes.create_string_buffer(insns)
    lic = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(65536)
    attr = struct.pack("=IIQQIIQII16sII", BPF_PROG_TYPE_SK_SKB, len(insns) // 8, ctypes.addressof(code),
                       ctypes.addressof(lic), 1, len(log), ctypes.addressof(log), 0, 0, b"relay", 0, attach)
    try:
        return bpf(BPF_PROG_LOAD, attr)
    except OSError:
        print(log.value.decode(errors="replace"), file=sys.stderr)
        raise


def tcp_info(s: socket.socket) -> tuple[int, int]:
    """(tcpi_bytes_acked, tcpi_bytes_received)."""
    b = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    return struct.unpack_from("=QQ", b, 120)


def outq(s: socket.socket) -> int:
    return struct.unpack("=i", fcntl.ioctl(s.fileno(), SIOCOUTQ, b"\0\0\0\0"))[0]


# ---------------------------------------------------------------------------------------- origin
def origin(port_w: int, size: int) -> None:
    ls = socket.create_server(("127.0.0.1", 0))
    os.write(port_w, b"%d\n" % ls.getsockname()[1])
    chunk = memoryview(b"a" * (1 << 20))
    while True:
        c, _ = ls.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            d = c.recv(4096)
            if not d:
                break
            data += d
        try:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
            left = size
            while left > 0:
                n = min(left, len(chunk))
                c.sendall(chunk[:n])
                left -= n
        except OSError:
            pass  # the client went away (the slow-client probe)
        c.close()


# ----------------------------------------------------------------------------------------- relay
def read_head(c: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        d = c.recv(4096)
        if not d:
            break
        data += d
    return data


def relay_splice(c: socket.socket, o: socket.socket) -> dict:
    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
    total = 0
    while True:
        n = os.splice(o.fileno(), w, 1 << 20)
        if n == 0:
            break
        while n:
            m = os.splice(r, c.fileno(), n)
            n -= m
            total += m
    c.shutdown(socket.SHUT_WR)
    os.close(r)
    os.close(w)
    return {"bytes": total}


class Sockmap:
    def __init__(self, attach: int) -> None:
        self.counter = map_create(BPF_MAP_TYPE_ARRAY, 4, 8, 1)
        self.origins = map_create(BPF_MAP_TYPE_SOCKHASH, 8, 8, 1024)
        self.clients = map_create(BPF_MAP_TYPE_SOCKHASH, 8, 8, 1024)
        self.prog = prog_load(program(self.counter, self.clients), attach)
        bpf(BPF_PROG_ATTACH, struct.pack("=IIII", self.origins, self.prog, attach, 0))

    def relay(self, c: socket.socket, o: socket.socket, head: bytes, eager: bool, passive: bool) -> dict:
        cookie = o.getsockopt(socket.SOL_SOCKET, SO_COOKIE, 8)  # the u64 key of both SOCKHASHes
        map_update(self.counter, b"\0\0\0\0", b"\0" * 8)
        base_c = tcp_info(c)[0] + outq(c)
        map_update(self.clients, cookie, struct.pack("=Q", c.fileno()))
        map_update(self.origins, cookie, struct.pack("=Q", o.fileno()))
        o.sendall(head)
        p = select.poll()
        p.register(o.fileno(), select.POLLIN | POLLRDHUP)
        t0 = time.perf_counter()
        events = set()
        seen = ""
        at_1s = None
        while True:  # POLLIN alone can be spurious (the data went to the verdict program)
            got = p.poll(1000 if at_1s is None else -1)
            if not got:
                # what is queued between the sockets after 1 s (a slow client shows it)
                at_1s = {"origin_rcvd": tcp_info(o)[1], "handed": tcp_info(c)[0] + outq(c) - base_c}
                print("slow client, after 1 s:", at_1s, file=sys.stderr, flush=True)
                continue
            ev = got[0][1]
            events.add(hex(ev))
            o.setblocking(False)
            try:
                rv = o.recv(1)
                seen = f"recv={rv!r}"
            except BlockingIOError:
                rv = None
            o.setblocking(True)
            if rv == b"":
                break
            if rv:
                seen = "DATA LEAKED TO USER SPACE"
                break
        t_eof = time.perf_counter()
        counted = map_lookup_u64(self.counter, b"\0\0\0\0")
        handed_at_eof = tcp_info(c)[0] + outq(c) - base_c
        if at_1s is not None or t_eof - t0 > 0.5 or eager:
            print(f"origin EOF after {(t_eof - t0) * 1e3:.0f} ms: origin socket received {tcp_info(o)[1] - 1}, "
                  f"client socket handed {handed_at_eof}", file=sys.stderr, flush=True)
        waits = 0
        passive_poll = None
        if passive:
            # the client closes once it has Content-Length bytes: no user-space activity at all
            # during the transfer (pure kernel-side relay throughput)
            pc = select.poll()
            pc.register(c.fileno(), POLLRDHUP)
            passive_poll = [hex(e) for _, e in pc.poll()]
        elif not eager:
            received = tcp_info(o)[1] - 1  # tcpi_bytes_received counts the FIN as one byte
            # every byte the origin socket received must be in the client socket first
            deadline = time.monotonic() + 10
            while tcp_info(c)[0] + outq(c) - base_c < received and time.monotonic() < deadline:
                waits += 1
                time.sleep(0.005)  # experiment only (the real relay would wait on a coarse timer)
        handed = tcp_info(c)[0] + outq(c) - base_c  # acked first, then queue: never over-counts
        c.shutdown(socket.SHUT_WR)
        map_delete(self.origins, cookie)
        map_delete(self.clients, cookie)
        return {"eof_poll": sorted(events), "eof": seen, "counted": counted, "origin_rcvd": tcp_info(o)[1],
                "handed_at_eof": handed_at_eof, "handed": handed, "waits": waits,
                "eof_after_ms": round((t_eof - t0) * 1e3, 1), "at_1s": at_1s, "passive_poll": passive_poll}


def relay(mode: str, port_w: int, origin_port: int, attach: int) -> None:
    sm = Sockmap(attach) if mode.startswith("sockmap") else None
    ls = socket.create_server(("127.0.0.1", 0))
    os.write(port_w, b"%d\n" % ls.getsockname()[1])
    log = open(f"/tmp/sockmap-relay-{mode}.log", "a")
    while True:
        c, _ = ls.accept()
        head = read_head(c)
        o = socket.create_connection(("127.0.0.1", origin_port))
        if SNDBUF:
            c.setsockopt(socket.SOL_SOCKET, 32, SNDBUF)  # SO_SNDBUFFORCE
        try:
            if sm is None:
                o.sendall(head)
                info = relay_splice(c, o)
            else:
                info = sm.relay(c, o, head, eager=mode == "sockmap-eager", passive=mode == "sockmap-passive")
        except OSError as e:
            info = {"error": repr(e)}
        # wait for the client to close before closing (keeps the client's bytes in flight)
        try:
            c.recv(1)
        except OSError as e:
            info["client_recv_after"] = repr(e)
        c.close()
        o.close()
        print(info, file=log, flush=True)


def spawn(args: list[str]) -> tuple[subprocess.Popen, int]:
    r, w = os.pipe()
    p = subprocess.Popen([sys.executable, __file__] + args + ["--fd", str(w)], pass_fds=[w])
    os.close(w)
    port = int(os.fdopen(r).readline())
    return p, port


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=100)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--attach", type=int, default=BPF_SK_SKB_VERDICT)
    ap.add_argument("--modes", default="direct,splice,sockmap,sockmap-passive,sockmap-eager")
    ap.add_argument("--sndbuf", type=int, default=0, help="client socket SO_SNDBUFFORCE in the relays")
    ap.add_argument("--slow", action="store_true",
                    help="also one download per relay by a client reading 2 MiB/s for 3 s (backpressure)")
    ap.add_argument("--role")
    ap.add_argument("--origin-port", type=int)
    ap.add_argument("--fd", type=int)
    a = ap.parse_args()
    size = a.mib << 20
    if a.role == "origin":
        origin(a.fd, size)
        return 0
    global SNDBUF
    SNDBUF = a.sndbuf
    if a.role:
        relay(a.role, a.fd, a.origin_port, a.attach)
        return 0
    procs = []
    op, oport = spawn(["--role", "origin", "--mib", str(a.mib)])
    procs.append(op)
    modes = a.modes.split(",")
    ports = {"direct": oport}
    for m in modes:
        if m != "direct":
            for f in (f"/tmp/sockmap-relay-{m}.log",):
                if os.path.exists(f):
                    os.unlink(f)
            p, ports[m] = spawn(["--role", m, "--origin-port", str(oport), "--attach", str(a.attach),
                                 "--sndbuf", str(a.sndbuf)])
            procs.append(p)
    times: dict[str, list[float]] = {m: [] for m in modes}
    short: dict[str, int] = {m: 0 for m in modes}
    try:
        for i in range(a.runs):
            for m in modes[i % len(modes):] + modes[:i % len(modes)]:
                out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{time_total} %{size_download}",
                                      f"http://127.0.0.1:{ports[m]}/big"], capture_output=True, text=True)
                t, got = out.stdout.split()
                if out.returncode != 0 or int(got) != size:
                    short[m] += 1
                    print(f"{m}: curl rc={out.returncode} got {got} of {size}", file=sys.stderr)
                times[m].append(float(t))
        if a.slow:
            for m in modes:
                if m != "direct":
                    subprocess.run(["curl", "-s", "-o", "/dev/null", "--limit-rate", "2M", "--max-time", "3",
                                    f"http://127.0.0.1:{ports[m]}/big"])
            time.sleep(11)  # lets the relays log the aborted transfer (experiment only)
    finally:
        for p in procs:
            p.kill()
    d = statistics.median(times["direct"]) if "direct" in times else None
    for m in modes:
        med = statistics.median(times[m])
        ratio = f"{med / d:.2f}x" if d else "-"
        print(f"{m:14s} median {med * 1e3:7.1f} ms  min {min(times[m]) * 1e3:7.1f}  max {max(times[m]) * 1e3:7.1f}"
              f"  ratio {ratio}  short transfers {short[m]}/{a.runs}")
    for m in modes:
        f = f"/tmp/sockmap-relay-{m}.log"
        if os.path.exists(f):
            lines = open(f).read().splitlines()
            print(f"{m} relay log (first 2 and last of {len(lines)}):", *lines[:2], lines[-1], sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
