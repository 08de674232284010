#!/usr/bin/env python3
"""Secret-mask figures (run by hand, not in CI's pass/fail path).

Runs mcp/tests/it/masks_bench.rs in release: the median round trip of exec_command ["true"] with
yield_ms on a workspace of --files files holding 10 withheld ones, with secret masking on against
the same exec with masking off, measured in the same run, plus the raw ProcessTable spawn of
`true`, a plain fork+exec of `true` (std::process::Command; the floor the 8x target of
wave2-decisions is measured against: masked_vs_fork_exec) and the bare no-follow walk of the
tree; and (exec_write_scope) the same round trip on a workspace with a `.git` directory and a
4-candidate write scope (command_write_paths [".", "target", "src", "tmp"]) against the default
["."], with the fork+exec floor. The tests run one at a time so they do not skew each other.

Usage: scripts/bench-masks.py [--files N] [--iters N]
Honours CARGO_TARGET_DIR.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=50_000)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    env = dict(os.environ, BENCH_FILES=str(a.files), BENCH_ITERS=str(a.iters))
    out = subprocess.run(["cargo", "test", "--release", "-p", "codespace-mcp", "--test", "it", "masks_bench::", "--",
                          "--nocapture", "--test-threads=1"], cwd=REPO, env=env, check=True, capture_output=True, text=True)
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith(("BENCH", "skip:")):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
