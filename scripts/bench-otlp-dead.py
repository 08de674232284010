#!/usr/bin/env python3
"""Does a dead OTLP collector slow `read`? (Run by hand, not in CI: the figures depend on the
machine; the ratio B/A is what matters, and #33 asks for <= 1.05x.)

Starts two servers from the same binary, each `codespace serve --config` over stdio (raw
JSON-RPC, one line per message) on a temp workspace of its own holding a 10 KB file:

  A  no `export` (the export is off)
  B  `export.otlp` pointing at a collector that is not there: by default a TEST-NET-1 address
     (192.0.2.1, RFC 5737: nothing answers, each export waits out `timeout_ms`), with
     `--refused` a loopback port nobody listens on (each export fails at once); a small
     `queue` (default 100) so the full-queue drop path runs too

and times `read` of the 10 KB file in --rounds rounds; each round runs a block of --iters calls
on one server then the same block on the other, the order alternating (A B, B A, ...) so that
load drift hits both alike. Prints the median and p90 (us) of A and B, the ratio B/A of the
medians, the median of the per-round ratios, and B's export counts from workspace_info
(queued, dropped, failed).

Usage: scripts/bench-otlp-dead.py [--bin PATH] [--rounds N] [--iters M] [--queue Q] [--refused]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


class Server:
    """`codespace serve --config CFG` over stdio, driven with raw JSON-RPC lines."""

    def __init__(self, binary: str, cfg: Path, cwd: Path) -> None:
        self.p = subprocess.Popen(
            [binary, "serve", "--config", str(cfg)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd=cwd, env={**os.environ, "CODESPACE_LOG": "error"},
        )
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "bench-otlp-dead", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg: dict) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert self.p.stdout is not None
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("server closed stdout")
            msg = json.loads(line)
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(msg["error"])
                return msg["result"]

    def call(self, tool: str, args: dict) -> dict:
        r = self.request("tools/call", {"name": tool, "arguments": args})
        if r.get("isError"):
            raise RuntimeError(r)
        return r.get("structuredContent", {})

    def stop(self) -> None:
        self.p.terminate()
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup(tmp: Path, name: str, export: dict | None) -> tuple[Path, Path]:
    d = tmp / name
    ws = d / "ws"
    ws.mkdir(parents=True)
    (ws / "ten.txt").write_text("x" * 10240)
    cfg: dict = {"workspaces": {"w": {"root": str(ws), "profile": "read-only"}},
                 "store": str(d / "store.db")}
    if export is not None:
        cfg["export"] = export
    path = d / "config.json"
    path.write_text(json.dumps(cfg))
    return path, d


def block(s: Server, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        s.call("read", {"workspace_id": "w", "path": "ten.txt"})
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(here.parent / "target" / "debug" / "codespace"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--queue", type=int, default=100)
    ap.add_argument("--refused", action="store_true")
    args = ap.parse_args()
    endpoint = (f"http://127.0.0.1:{free_port()}" if args.refused
                else "http://192.0.2.1:4318")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        cfg_a, dir_a = setup(tmp, "a", None)
        cfg_b, dir_b = setup(tmp, "b", {"otlp": {"endpoint": endpoint, "timeout_ms": 3000,
                                                  "queue": args.queue}})
        a, b = Server(args.bin, cfg_a, dir_a), Server(args.bin, cfg_b, dir_b)
        try:
            block(a, 50)
            block(b, 50)
            all_a: list[float] = []
            all_b: list[float] = []
            ratios = []
            for r in range(args.rounds):
                order = [(a, all_a), (b, all_b)] if r % 2 == 0 else [(b, all_b), (a, all_a)]
                meds = {}
                for s, acc in order:
                    xs = block(s, args.iters)
                    acc.extend(xs)
                    meds[id(s)] = statistics.median(xs)
                ratios.append(meds[id(b)] / meds[id(a)])
            info = b.call("workspace_info", {}).get("telemetry", {}).get("otlp", {})
        finally:
            a.stop()
            b.stop()

    def p(xs: list[float], q: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1e6

    ma, mb = statistics.median(all_a), statistics.median(all_b)
    print(f"endpoint B: {endpoint} ({'refused' if args.refused else 'unreachable, waits out timeout_ms'}),"
          f" queue {args.queue}")
    print(f"read A (export off):  median {ma * 1e6:8.1f} us  p90 {p(all_a, 0.9):8.1f} us  ({len(all_a)} calls)")
    print(f"read B (dead export): median {mb * 1e6:8.1f} us  p90 {p(all_b, 0.9):8.1f} us  ({len(all_b)} calls)")
    print(f"ratio B/A of medians: {mb / ma:.3f}x; median of per-round ratios: "
          f"{statistics.median(ratios):.3f}x; rounds: {', '.join(f'{x:.3f}' for x in ratios)}")
    print(f"B's export: logs {info.get('logs')} spans {info.get('spans')}")


if __name__ == "__main__":
    main()
