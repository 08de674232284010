#!/usr/bin/env python3
"""RSS growth of the server over many `read`s of a 10 KB file over raw stdio (issue 34: growth
over 20 000 reads at most 1 MB). Prints VmRSS from /proc/PID/status after a warm-up and then
every `--every` reads, and the growth from the warm-up to the end.

usage: scripts/bench-rss.py [--bin target/release/codespace] [--reads 20000] [--warmup 2000]
                            [--every 5000] [--runs 1] [--env NAME=VALUE ...]
Run by hand (not in CI): no third-party Python packages needed.
"""
import argparse
import json
import os
import subprocess
import tempfile


def rss_kb(pid: int) -> int:
    return status_kb(pid)["VmRSS"]


def status_kb(pid: int) -> dict[str, int]:
    """VmRSS and its parts (RssAnon: heap and stacks; RssFile: the binary's pages touched)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[k] = int(v.split()[0])
    if "VmRSS" not in out:
        raise RuntimeError("no VmRSS")
    return out


def show(pid: int) -> str:
    s = status_kb(pid)
    return f"{s['VmRSS']} kB (anon {s.get('RssAnon', 0)}, file {s.get('RssFile', 0)})"


class Client:
    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.next_id = 0

    def send(self, msg: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def call(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("server closed stdout")
            msg = json.loads(line)
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]


def main() -> None:
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bin", default=os.path.join(here, "..", "target", "release", "codespace"))
    ap.add_argument("--reads", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("--every", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=1, help="fresh servers, one after the other")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server")
    args = ap.parse_args()
    env = dict(os.environ)
    for kv in args.env:
        k, _, v = kv.partition("=")
        env[k] = v
    growth = []
    for run in range(1, args.runs + 1):
        print(f"run {run} (load {os.getloadavg()[0]:.1f})")
        growth.append(one_run(args, env))
    if args.runs > 1:
        print("growth per run (kB): " + ", ".join(f"{g:+d}" for g in growth))


def one_run(args: argparse.Namespace, env: dict) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        ws = os.path.join(tmp, "ws")
        os.mkdir(ws)
        with open(os.path.join(ws, "ten.txt"), "w") as f:
            f.write(("0123456789abcdef" * 4 + "\n") * 157)  # ~10 KB of lines
        proc = subprocess.Popen(
            [args.bin, "serve", ws, "--store", os.path.join(tmp, "s.db")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        c = Client(proc)
        c.call(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench-rss", "version": "0"},
            },
        )
        c.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        read = {"name": "read", "arguments": {"workspace_id": "default", "path": "ten.txt"}}

        def reads(n: int) -> None:
            for _ in range(n):
                res = c.call("tools/call", read)
                if res.get("isError"):
                    raise RuntimeError(f"read failed: {res}")

        print(f"start (after initialize): {show(proc.pid)}")
        reads(args.warmup)
        base = rss_kb(proc.pid)
        print(f"after {args.warmup} warm-up reads: {show(proc.pid)}")
        done = 0
        while done < args.reads:
            n = min(args.every, args.reads - done)
            reads(n)
            done += n
            print(f"after {done} reads: {show(proc.pid)}")
        end = rss_kb(proc.pid)
        print(f"growth over {args.reads} reads: {end - base:+d} kB ({(end - base) / 1024:+.2f} MB)")
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
        return end - base


if __name__ == "__main__":
    main()
