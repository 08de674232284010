#!/usr/bin/env python3
"""Egress-proxy figures (run by hand, not in CI's pass/fail path), all on loopback.

A local HTTP origin (a thread of this script) serves --mib MiB. In the same run:
1. Throughput: `curl -o /dev/null` of the payload directly on the host (`--noproxy '*'`) against
   the same curl run by `exec_command` on a `network: "proxy"` workspace (sandboxed; curl uses the
   HTTP_PROXY the server sets), both as an absolute-form request and as a CONNECT tunnel
   (`--proxytunnel`). Median of --runs each, and the ratio proxied/direct.
2. Connection setup: --conns sequential connections from inside the sandbox, each timed from
   connect() to the proxy's `200 Connection established` (the decision and the relay hand-over
   included), against a plain TCP connect to the origin from the host. p50 of each and the
   difference.
3. The server's CPU time per proxied transfer (all its threads), the proxy's own cost.
4. The floor of any relay on this machine: the same curl on the host through a minimal relay
   process (no policy, no sandbox; the response moved by splice(2) through a 1 MiB pipe, as the
   proxy does), in the same rounds. On loopback the origin, curl and a relay share the cores, so
   this floor is itself well above the direct transfer; the proxy is compared to it too.

An operator policy (written into a temporary copy of the shipped policies) permits the origin's
loopback port. Usage: scripts/bench-egress-proxy.py [--mib N] [--runs N] [--conns N] [--binary B]
Honours CARGO_TARGET_DIR (default binary: its release/codespace, else debug/codespace).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
CHUNK = b"a" * (1 << 20)


class Origin(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, size: int) -> None:
        self.size = size
        super().__init__(("127.0.0.1", 0), Handler)


class Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            data += chunk
        size = self.server.size if b" /big" in data.split(b"\r\n", 1)[0] else 2
        self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % size)
        left = size
        view = memoryview(CHUNK)
        while left > 0:
            n = min(left, len(CHUNK))
            self.request.sendall(view[:n])
            left -= n


class Server:
    def __init__(self, binary: Path, config: Path) -> None:
        self.p = subprocess.Popen([str(binary), "serve", "--config", str(config)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.next = 1
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "bench-egress-proxy", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg: dict) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        i = self.next
        self.next += 1
        self.send({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
        assert self.p.stdout is not None
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("server closed stdout")
            msg = json.loads(line)
            if msg.get("id") == i:
                return msg["result"]

    def run(self, argv: list[str]) -> str:
        """exec_command to completion; returns the output (retrying while the lease is busy)."""
        while True:
            r = self.request("tools/call", {"name": "exec_command", "arguments": {
                "workspace_id": "w", "command": argv, "yield_ms": 30000}})
            if not r.get("isError"):
                break
            if "WORKSPACE_BUSY" not in r["content"][0]["text"]:
                raise RuntimeError(r["content"][0]["text"])
            time.sleep(0.01)
        s = r["structuredContent"]
        out, cursor = s.get("chunk", ""), s.get("cursor", 0)
        while not s.get("eof"):
            s = self.request("tools/call", {"name": "read_process", "arguments": {
                "process_id": s.get("process_id") or r["structuredContent"]["process_id"],
                "cursor": cursor, "wait_ms": 30000}})["structuredContent"]
            out += s["chunk"]
            cursor = s["cursor"]
        return out

    def close(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.close()
        self.p.wait(timeout=30)


SETUP = r"""
import socket, statistics, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
times = []
for _ in range(n):
    t = time.perf_counter()
    s = socket.create_connection(('127.0.0.1', 3128))
    s.sendall(b'CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n' % port)
    data = b''
    while b'\r\n\r\n' not in data:
        data += s.recv(4096)
    times.append(time.perf_counter() - t)
    assert data.startswith(b'HTTP/1.1 200'), data
    s.close()
print('p50', statistics.median(times) * 1e3, 'p90', sorted(times)[int(n * 0.9)] * 1e3)
"""


FLOOR_RELAY = r"""
import fcntl, os, socket, sys, threading
origin = int(sys.argv[1])
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(16)
print(ls.getsockname()[1], flush=True)

def upstream(c, o):
    while True:
        b = c.recv(65536)
        if not b:
            o.shutdown(socket.SHUT_WR)
            return
        o.sendall(b)

while True:
    c, _ = ls.accept()
    o = socket.create_connection(("127.0.0.1", origin))
    threading.Thread(target=upstream, args=(c, o), daemon=True).start()
    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
    while True:
        n = os.splice(o.fileno(), w, 1 << 20)
        if n == 0:
            break
        while n > 0:
            n -= os.splice(r, c.fileno(), n)
    os.close(r)
    os.close(w)
    c.shutdown(socket.SHUT_WR)
    c.close()
    o.close()
"""


def policies_with_permit(tmp: Path, port: int) -> Path:
    pol = tmp / "policies"
    for sub in ("base", "profiles"):
        shutil.copytree(REPO / "policies" / sub, pol / sub)
    (pol / "profiles" / "bench-origin.cedar").write_text(
        '@id("bench.permit.origin")\n'
        'permit (principal in CodeSpace::PermissionProfile::"workspace-write", '
        'action == CodeSpace::Action::"network_connect", resource)\n'
        f'when {{ resource has ip_class && resource.ip_class == "loopback" && resource has port && resource.port == {port} }};\n')
    (tmp / "schema").mkdir()
    shutil.copy(REPO / "schema" / "codespace.cedarschema", tmp / "schema" / "codespace.cedarschema")
    return pol


def server_cpu_ms(pid: int) -> float:
    """CPU time of every thread of `pid` so far, in ms (/proc/PID/task/*/schedstat, ns)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e6


def curl_time(argv: list[str]) -> float:
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    return float(out.strip())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=100)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--conns", type=int, default=200)
    ap.add_argument("--binary", type=Path)
    a = ap.parse_args()
    binary = a.binary or next((p for p in (TARGET / "release" / "codespace", TARGET / "debug" / "codespace")
                               if p.exists()), None)
    if binary is None:
        print("no codespace binary: build it (cargo build --release -p codespace-mcp)")
        return 1
    size = a.mib << 20
    origin = Origin(size)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    port = origin.server_address[1]
    url = f"http://127.0.0.1:{port}/big"
    curl = ["curl", "-s", "-o", "/dev/null", "-w", "%{time_total}"]
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        root = tmp / "ws"
        root.mkdir()
        cfg = tmp / "config.json"
        cfg.write_text(json.dumps({"workspaces": {"w": {"root": str(root), "network": "proxy"}},
                                   "policies": str(policies_with_permit(tmp, port)),
                                   "store": str(tmp / "store.db")}))
        s = Server(binary, cfg)
        relay = subprocess.Popen([sys.executable, "-c", FLOOR_RELAY, str(port)], stdout=subprocess.PIPE, text=True)
        assert relay.stdout is not None
        floor_url = f"http://127.0.0.1:{int(relay.stdout.readline())}/big"
        direct, proxied, tunnel, floor = [], [], [], []
        cpu_p, cpu_t = [], []
        for _ in range(a.runs):
            direct.append(curl_time(curl + ["--noproxy", "*", url]))
            floor.append(curl_time(curl + ["--noproxy", "*", floor_url]))
            c0 = server_cpu_ms(s.p.pid)
            proxied.append(float(s.run(curl + [url]).strip()))
            c1 = server_cpu_ms(s.p.pid)
            tunnel.append(float(s.run(curl + ["--proxytunnel", url]).strip()))
            cpu_p.append(c1 - c0)
            cpu_t.append(server_cpu_ms(s.p.pid) - c1)
        relay.kill()
        d, p, t = statistics.median(direct), statistics.median(proxied), statistics.median(tunnel)
        f = statistics.median(floor)
        mb = size / 1e6
        print(f"binary: {binary}")
        print(f"{a.mib} MiB over loopback, median of {a.runs}: direct curl {d*1e3:.0f} ms ({mb/d:.0f} MB/s); "
              f"through the proxy (absolute-form) {p*1e3:.0f} ms ({mb/p:.0f} MB/s), ratio {p/d:.2f}; "
              f"CONNECT tunnel {t*1e3:.0f} ms ({mb/t:.0f} MB/s), ratio {t/d:.2f}")
        print(f"floor (a minimal splice relay on the host, no policy, no sandbox) {f*1e3:.0f} ms "
              f"({mb/f:.0f} MB/s), ratio {f/d:.2f} to direct; the proxy to this floor: absolute-form "
              f"{p/f:.2f}, CONNECT {t/f:.2f}")
        # Each round runs direct, absolute-form and tunnel back to back, so a round's ratios share
        # the machine's load of the moment: on a busy machine their median is the steadier figure.
        pr = [x / y for x, y in zip(proxied, direct)]
        tr = [x / y for x, y in zip(tunnel, direct)]
        fr = [x / y for x, y in zip(floor, direct)]
        print(f"per-round ratios to direct (direct ms, floor, absolute-form, CONNECT): "
              + "; ".join(f"{y*1e3:.0f} {w:.2f} {x:.2f} {z:.2f}" for y, w, x, z in zip(direct, fr, pr, tr))
              + f"; median floor {statistics.median(fr):.2f}, absolute-form {statistics.median(pr):.2f}, "
              f"CONNECT {statistics.median(tr):.2f}")
        # The server's own CPU per transfer (all its threads: the relay, the decision, the
        # exec_command around it): what the proxy costs the host, which the wall-clock ratio
        # hides when the origin, the proxy and curl share two cores.
        print(f"server CPU per transfer, median: absolute-form {statistics.median(cpu_p):.1f} ms, "
              f"CONNECT {statistics.median(cpu_t):.1f} ms")
        setup = s.run(["python3", "-c", SETUP, str(port), str(a.conns)]).split()
        times = []
        for _ in range(a.conns):
            t0 = time.perf_counter()
            c = socket.create_connection(("127.0.0.1", port))
            times.append(time.perf_counter() - t0)
            c.close()
        base = statistics.median(times) * 1e3
        p50 = float(setup[1])
        print(f"connection setup over {a.conns}: through the proxy (connect, CONNECT, decision, relay "
              f"hand-over, 200) p50 {p50:.3f} ms, p90 {float(setup[3]):.3f} ms; direct TCP connect from "
              f"the host p50 {base:.3f} ms; overhead p50 {p50 - base:.3f} ms")
        s.close()
    origin.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
