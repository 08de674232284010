#!/usr/bin/env python3
"""Issue 29's environment figures, each against its same-run baseline, one row each:
  read 10 KB   `read` of a 10 KB file through a `worker` (Unix socket) vs the host (in-process
               runner), p50 ratio (target <= 1.3x)
  exec true    `exec_command ["true"]` (waited for) through the unix worker vs the host, p50
               ratio (target <= 1.2x)
  ssh          per-call overhead of a loopback `ssh` worker over the unix worker, `read` p50
               difference (target <= 1 ms, one ssh session)
  idle RSS     the unix worker's RSS (and anonymous part) fresh and after the run, against the
               15 MB target
One server serves the workspaces (`host`, `unix`, `ssh`); rounds interleave them so load drifts
hit all alike; all reads are measured before the first command.

usage: scripts/bench-environments.py [--bin PATH] [--reads 2000] [--execs 200] [--rounds 4]
                                     [--no-ssh]
--bin names the `codespace` binary (default target/debug/codespace; pass
target/release/codespace for the release figures). The ssh part starts its own sshd (Debian
openssh-server) on a free loopback port with its own host key, client key and known_hosts in a
temp dir (as tests/fixtures does); needs root or an account sshd lets in. No third-party Python
packages. Run by hand (not in CI).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time

SECRET = "0123456789abcdef0123456789abcdef"


class Client:
    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.next_id = 0

    def call(self, method: str, params: dict) -> dict:
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("server closed stdout")
            m = json.loads(line)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]

    def tool(self, name: str, args: dict) -> dict:
        r = self.call("tools/call", {"name": name, "arguments": args})
        if r.get("isError"):
            raise RuntimeError(f"{name}: {r['content'][0]['text']}")
        return r["structuredContent"]


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field}")


def start_sshd(tmp: str) -> dict:
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                        os.path.join(tmp, key)], check=True)
    with open(os.path.join(tmp, "client_key.pub")) as f, \
            open(os.path.join(tmp, "authorized_keys"), "w") as g:
        g.write(f.read())
    user = subprocess.run(["id", "-un"], capture_output=True, text=True, check=True).stdout.strip()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    conf = os.path.join(tmp, "sshd_config")
    with open(conf, "w") as f:
        f.write(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp}/host_key\n"
                f"AuthorizedKeysFile {tmp}/authorized_keys\nPidFile {tmp}/sshd.pid\n"
                "PubkeyAuthentication yes\nPasswordAuthentication no\nUsePAM no\nStrictModes no\n"
                f"PermitRootLogin prohibit-password\nAllowUsers {user}\nLogLevel ERROR\n")
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", conf],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    with open(os.path.join(tmp, "host_key.pub")) as f:
        alg, key = f.read().split()[:2]
    known = os.path.join(tmp, "known_hosts")
    with open(known, "w") as f:
        f.write(f"[127.0.0.1]:{port} {alg} {key}\n")
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline:
                raise RuntimeError("sshd did not listen")
            time.sleep(0.05)
    return {"proc": proc, "port": port, "user": user, "known_hosts": known,
            "identity_file": os.path.join(tmp, "client_key")}


def pct(xs: list, p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(here, "..", "target", "debug", "codespace"))
    ap.add_argument("--reads", type=int, default=2000, help="reads per workspace per round")
    ap.add_argument("--execs", type=int, default=200,
                    help="exec_command calls per workspace per round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--no-ssh", action="store_true")
    args = ap.parse_args()
    exe = os.path.abspath(args.bin)
    with tempfile.TemporaryDirectory(prefix="cs-bench-env-") as tmp:
        kinds = ["host", "unix"] + ([] if args.no_ssh else ["ssh"])
        workspaces = {}
        for k in kinds:
            root = os.path.join(tmp, k)
            os.mkdir(root)
            with open(os.path.join(root, "ten.txt"), "w") as f:
                f.write(("0123456789abcdef" * 4 + "\n") * 157)  # ~10 KB
            workspaces[k] = {"root": root, "environment": k, "sandbox": "off",
                             "secret_masking": "off"}
        secret_file = os.path.join(tmp, "w.secret")
        with open(secret_file, "w") as f:
            f.write(SECRET + "\n")
        os.chmod(secret_file, 0o600)
        sock = os.path.join(tmp, "wdir", "w.sock")
        worker = subprocess.Popen([exe, "worker", "--socket", sock], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        worker.stdin.write((SECRET + "\n").encode())
        worker.stdin.close()
        assert worker.stdout.readline().strip() == b"listening"
        time.sleep(0.5)
        fresh = (rss_kb(worker.pid), rss_kb(worker.pid, "RssAnon"))
        envs = {"host": {"kind": "host"},
                "unix": {"kind": "worker", "worker": {"socket": sock, "secret_file": secret_file}}}
        sshd = None
        if "ssh" in kinds:
            sshd = start_sshd(tmp)
            envs["ssh"] = {"kind": "ssh", "ssh": {
                "host": "127.0.0.1", "port": sshd["port"], "user": sshd["user"],
                "identity_file": sshd["identity_file"], "known_hosts": sshd["known_hosts"],
                "worker_path": exe}}
        cfg = os.path.join(tmp, "config.json")
        with open(cfg, "w") as f:
            json.dump({"environments": envs, "workspaces": workspaces}, f)
        server = subprocess.Popen([exe, "serve", "--config", cfg, "--store",
                                   os.path.join(tmp, "s.db")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL)
        c = Client(server)
        c.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                              "clientInfo": {"name": "bench-environments", "version": "0"}})
        c.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        c.proc.stdin.flush()
        def read(k: str) -> None:
            c.tool("read", {"workspace_id": k, "path": "ten.txt"})

        def exec_true(k: str) -> None:
            r = c.tool("exec_command", {"workspace_id": k, "command": ["true"],
                                        "yield_ms": 10000})
            if r.get("exit_code") != 0:
                raise RuntimeError(f"exec true in {k}: {r}")

        measures = {"read": (read, args.reads), "exec": (exec_true, args.execs)}
        times = {m: {k: [] for k in kinds} for m in measures}
        # One phase per measure (all reads before the first command, so nothing a command
        # leaves behind touches the reads); in each, a warm-up (connects the workers, fills
        # caches), then rounds interleaving the workspaces.
        for m, (fn, n) in measures.items():
            for k in kinds:
                for _ in range(200 if m == "read" else 10):
                    fn(k)
            for _ in range(args.rounds):
                for k in kinds:
                    for _ in range(n):
                        t0 = time.perf_counter()
                        fn(k)
                        times[m][k].append(time.perf_counter() - t0)
        time.sleep(1.0)
        idle_rss, idle_anon = rss_kb(worker.pid), rss_kb(worker.pid, "RssAnon")
        load = os.getloadavg()[0]
        print(f"binary: {exe}")
        print(f"per workspace: {args.reads * args.rounds} reads of a 10 KB file, "
              f"{args.execs * args.rounds} exec_command [\"true\"]; one client, serial; "
              f"load average {load:.2f}")
        for m in measures:
            for k in kinds:
                xs = times[m][k]
                print(f"  {m:4s} {k:5s} p50 {pct(xs, 0.5) * 1e6:8.1f} us  "
                      f"p90 {pct(xs, 0.9) * 1e6:8.1f} us  mean {statistics.mean(xs) * 1e6:8.1f} us")
        print(f"{'row':14s} {'baseline':>22s} {'measured':>22s} {'ratio':>8s}  target")
        for m, label, target in (("read", "read 10 KB", 1.3), ("exec", "exec true", 1.2)):
            h, u = pct(times[m]["host"], 0.5), pct(times[m]["unix"], 0.5)
            print(f"{label:14s} {'host p50 %.1f us' % (h * 1e6):>22s} "
                  f"{'unix p50 %.1f us' % (u * 1e6):>22s} {u / h:7.2f}x  <= {target}x "
                  f"{'met' if u / h <= target else 'NOT met'}")
        if "ssh" in kinds:
            u, sp = pct(times["read"]["unix"], 0.5), pct(times["read"]["ssh"], 0.5)
            over = (sp - u) * 1e3
            print(f"{'ssh overhead':14s} {'unix read p50 %.1f us' % (u * 1e6):>22s} "
                  f"{'ssh read p50 %.1f us' % (sp * 1e6):>22s} {over:6.3f}ms  <= 1 ms "
                  f"{'met' if over <= 1 else 'NOT met'}")
        mb = idle_rss / 1024
        print(f"{'worker RSS':14s} {'fresh %.1f MB (anon %.1f)' % (fresh[0] / 1024, fresh[1] / 1024):>22s} "
              f"{'idle %.1f MB (anon %.1f)' % (mb, idle_anon / 1024):>22s} "
              f"{mb / 15:7.2f}x  <= 15 MB {'met' if mb <= 15 else 'NOT met'} "
              f"(ratio: idle after the run / target)")
        server.stdin.close()
        server.wait(timeout=30)
        worker.kill()
        worker.wait()
        if sshd:
            sshd["proc"].kill()
            sshd["proc"].wait()


if __name__ == "__main__":
    main()
