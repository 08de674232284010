#!/usr/bin/env python3
"""`workspace_info`'s cost against a `ping` and a plain `read` of a 10 KB file, in the same run
over raw stdio (issue 34: its capability probe set, ~27 Cedar decisions, is decided once per
policy set and cached). Prints the first call of a fresh server (the probes decided) and the
p50 of later calls (from the decision cache), each against `ping` and `read` measured in
interleaved rounds so that load on the machine hits all three alike.

usage: scripts/bench-workspace-info.py [--bin target/release/codespace] [--calls 1000] [--runs 3]
Run by hand (not in CI): no third-party Python packages needed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_stdio import Server  # noqa: E402


def one_run(binary: str, calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        ws = os.path.join(tmp, "ws")
        os.mkdir(ws)
        with open(os.path.join(ws, "ten.txt"), "w") as f:
            f.write(("0123456789abcdef" * 4 + "\n") * 157)  # ~10 KB of lines
        s = Server([binary, "serve", ws, "--store", os.path.join(tmp, "s.db")], "bench-info")
        info_args = {"workspace_id": "default"}
        read_args = {"workspace_id": "default", "path": "ten.txt"}
        t = time.perf_counter()
        first = s.tool("workspace_info", info_args)
        first_s = time.perf_counter() - t
        if "capabilities" not in first.get("execution", {}):
            raise SystemExit("workspace_info has no execution.capabilities")
        for _ in range(50):  # warm-up of all three
            s.request("ping", {})
            s.tool("read", read_args)
            s.tool("workspace_info", info_args)
        lat: dict[str, list[float]] = {"ping": [], "read": [], "info": []}
        calls_of = {
            "ping": lambda: s.request("ping", {}),
            "read": lambda: s.tool("read", read_args),
            "info": lambda: s.tool("workspace_info", info_args),
        }
        for _ in range(calls):
            for name, call in calls_of.items():
                t = time.perf_counter()
                call()
                lat[name].append(time.perf_counter() - t)
        s.close()
    out = {k: statistics.median(v) for k, v in lat.items()}
    out["first"] = first_s
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bin", default=os.path.join(here, "..", "target", "release", "codespace"))
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    print(f"workspace_info vs ping and read 10 KB, {args.calls} interleaved calls each, p50 in µs"
          f" (load {os.getloadavg()[0]:.1f})")
    print(f"{'run':>3} {'ping':>8} {'read':>8} {'info':>8} {'info/ping':>10} {'info/read':>10}"
          f" {'first info':>11}")
    for run in range(1, args.runs + 1):
        r = one_run(args.bin, args.calls)
        print(f"{run:>3} {r['ping'] * 1e6:8.0f} {r['read'] * 1e6:8.0f} {r['info'] * 1e6:8.0f}"
              f" {r['info'] / r['ping']:9.2f}x {r['info'] / r['read']:9.2f}x"
              f" {r['first'] * 1e6:9.0f} µs")


if __name__ == "__main__":
    main()
