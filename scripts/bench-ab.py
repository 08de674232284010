#!/usr/bin/env python3
"""A/B latency of two `codespace` builds over stdio: did a change make the server slower?
(Run by hand, not in CI: the figures depend on the machine; the ratios B/A are what matter.)

Starts two servers, `--a` (the baseline binary) and `--b` (the new one), each `codespace serve`
over stdio with raw JSON-RPC (bench-exec.py's client) on a temp workspace of its own: a git
repository (a `.git` directory, so the command write scope and its read-only `.git` are active)
holding a 10 KB file. Times three round trips:

  read  `read` of the 10 KB file
  exec  `exec_command ["true"]` with yield_ms until it exits (sandboxed, as configured by default)
  ping  the JSON-RPC `ping` (the transport floor)

in --rounds rounds. Each round runs, per measure, a block of calls on one server then the same
block on the other, the order alternating A B, B A, A B, ... so that load drift hits both alike.
Prints per measure: median and p90 (µs) of all calls of A and of B, the ratio B/A of those
medians, the ratio of each round's medians, and the median of the per-round ratios.
Run it with --a and --b the same binary first: the ratios then show the noise floor.

Usage: scripts/bench-ab.py --a PATH --b PATH [--rounds N] [--iters M] [--exec-iters K]
  --rounds      rounds (default 5)
  --iters       read and ping calls per server per round (default 300)
  --exec-iters  exec_command calls per server per round (default 100)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable


def _bench_exec():
    """scripts/bench-exec.py as a module: its stdio client and its exec loop are shared."""
    spec = importlib.util.spec_from_file_location("bench_exec", Path(__file__).with_name("bench-exec.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_BENCH_EXEC = _bench_exec()
Server = _BENCH_EXEC.Server

FILE = "ten.txt"
FILE_BYTES = 10 * 1024


def read_file(s: Server) -> float:
    t = time.perf_counter()
    r = s.tool("read", {"workspace_id": "w", "path": FILE})
    dt = time.perf_counter() - t
    assert len(r["content"]) == FILE_BYTES, r
    return dt


def exec_true(s: Server) -> float:
    dt, r = _BENCH_EXEC.exec_when_free(s, {"workspace_id": "w", "command": ["true"], "yield_ms": 10000})
    assert r["exit_code"] == 0, r
    return dt


def ping(s: Server) -> float:
    t = time.perf_counter()
    s.request("ping", {})
    return time.perf_counter() - t


MEASURES: list[tuple[str, Callable[[Server], float]]] = [("read", read_file), ("exec", exec_true), ("ping", ping)]


def workspace(tmp: Path, name: str) -> Path:
    """A git workspace with the 10 KB file, and the config of a server on it; returns the config."""
    root = tmp / name / "ws"
    root.mkdir(parents=True)
    (root / FILE).write_text("x" * FILE_BYTES)
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q", str(root)], check=True)
    else:
        for d in [".git/hooks", ".git/objects", ".git/refs/heads"]:
            (root / d).mkdir(parents=True, exist_ok=True)
        (root / ".git/HEAD").write_text("ref: refs/heads/main\n")
    cfg = tmp / name / "config.json"
    cfg.write_text(json.dumps({"workspaces": {"w": {"root": str(root)}}, "store": str(tmp / name / "store.db")}))
    return cfg


def p90(v: list[float]) -> float:
    return sorted(v)[int(len(v) * 0.9)]


def us(x: float) -> str:
    return f"{x * 1e6:.0f}"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description="A/B latency of two codespace builds over stdio")
    ap.add_argument("--a", type=Path, required=True, help="baseline binary")
    ap.add_argument("--b", type=Path, required=True, help="new binary")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=300, help="read and ping calls per server per round")
    ap.add_argument("--exec-iters", type=int, default=100, help="exec_command calls per server per round")
    a = ap.parse_args()
    iters = {"read": a.iters, "exec": a.exec_iters, "ping": a.iters}
    binaries = {"A": a.a.resolve(), "B": a.b.resolve()}
    print(f"A = {binaries['A']}\nB = {binaries['B']}")
    print(f"rounds={a.rounds} iters: read={iters['read']} exec={iters['exec']} ping={iters['ping']}; "
          f"load at start {load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        servers = {
            name: Server([str(binary), "serve", "--config", str(workspace(Path(tmp), name))],
                         f"bench-ab-{name}")
            for name, binary in binaries.items()
        }
        try:
            for name, s in servers.items():
                info = s.tool("workspace_info", {"workspace_id": "w"})
                iso = info["execution"]["isolation"]
                r = s.tool("exec_command", {"workspace_id": "w", "command": ["true"], "yield_ms": 10000})
                print(f"  {name}: command_sandbox={iso.get('command_sandbox')} "
                      f"write_paths={json.dumps(r.get('write_paths'))} exit_code={r.get('exit_code')}")
            for s in servers.values():  # warm-up: page cache, decision cache, path index
                for _ in range(20):
                    read_file(s)
                    ping(s)
                for _ in range(5):
                    exec_true(s)
            times = {m: {"A": [], "B": []} for m, _ in MEASURES}
            ratios: dict[str, list[float]] = {m: [] for m, _ in MEASURES}
            for rnd in range(a.rounds):
                order = ["A", "B"] if rnd % 2 == 0 else ["B", "A"]
                line = []
                for m, fn in MEASURES:
                    block: dict[str, list[float]] = {}
                    for name in order:
                        block[name] = [fn(servers[name]) for _ in range(iters[m])]
                        times[m][name] += block[name]
                    ratio = statistics.median(block["B"]) / statistics.median(block["A"])
                    ratios[m].append(ratio)
                    line.append(f"{m} {us(statistics.median(block['A']))}/{us(statistics.median(block['B']))} µs "
                                f"B/A {ratio:.3f}")
                print(f"round {rnd + 1} ({''.join(order)}): " + "; ".join(line) + f"; load {load()}", flush=True)
        finally:
            for s in servers.values():
                s.close()
    print(f"== summary (µs; {a.rounds} rounds; load at end {load()})")
    for m, _ in MEASURES:
        ta, tb = times[m]["A"], times[m]["B"]
        ma, mb = statistics.median(ta), statistics.median(tb)
        print(f"  {m:4}  A median {us(ma):>6} p90 {us(p90(ta)):>6} | B median {us(mb):>6} p90 {us(p90(tb)):>6} | "
              f"B/A {mb / ma:.3f} | per round {' '.join(f'{r:.3f}' for r in ratios[m])} "
              f"(median {statistics.median(ratios[m]):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
