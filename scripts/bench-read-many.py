#!/usr/bin/env python3
"""`read` of 20 files in one call (`paths`) against twenty single `read` calls of the same files,
same server, same run, interleaved rounds (issue 31's target: one call <= 0.3x the twenty).

usage: scripts/bench-read-many.py [--bin target/debug/codespace] [--rounds 200] [--size 2048]
Run by hand (not in CI): the figures depend on the machine; the ratio is what matters.
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

FILES = 20


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(here, "..", "target", "debug", "codespace"))
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--size", type=int, default=2048, help="bytes per file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = os.path.join(tmp, "ws")
        os.makedirs(os.path.join(ws, "src"))
        names = [f"src/f{i:02}.txt" for i in range(FILES)]
        line = "abcdefghij" * 7 + "\n"
        for n in names:
            with open(os.path.join(ws, n), "w") as f:
                f.write((line * (args.size // len(line) + 1))[: args.size])
        s = Server([args.bin, "serve", ws, "--store", os.path.join(tmp, "s.db")], "bench-read-many")
        try:
            def singles() -> None:
                for n in names:
                    r = s.tool("read", {"workspace_id": "default", "path": n})
                    assert "content" in r, r

            def many() -> None:
                r = s.tool("read", {"workspace_id": "default", "paths": names})
                files = r["files"]
                assert len(files) == FILES and all("content" in f for f in files), r

            for _ in range(10):  # warm up both paths
                singles()
                many()
            one, twenty = [], []
            for _ in range(args.rounds):
                t = time.perf_counter()
                many()
                one.append(time.perf_counter() - t)
                t = time.perf_counter()
                singles()
                twenty.append(time.perf_counter() - t)
        finally:
            s.close()
    p_one, p_twenty = statistics.median(one), statistics.median(twenty)
    ratio = p_one / p_twenty
    print(f"read paths=[{FILES} files of {args.size} B] p50 {p_one * 1e3:.3f} ms")
    print(f"{FILES} single reads p50 {p_twenty * 1e3:.3f} ms")
    verdict = "met" if ratio <= 0.3 else "NOT met"
    print(f"ratio one call / {FILES} calls: {ratio:.3f}x (target <= 0.3x: {verdict})")


if __name__ == "__main__":
    main()
