#!/usr/bin/env python3
"""Process-tool figures (run by hand, not in CI's pass/fail path).

1. In-process (cargo test --release, mcp/tests/it/process_bench.rs): median round trip of
   exec_command ["true"] with yield_ms through the gateway (sandboxed where the kernel allows)
   against the raw ProcessTable spawn without a launcher, measured in the same run; and the
   read_process drain rate.
2. Over stdio with raw JSON-RPC against the release binary: the same exec round trip as an MCP
   host sees it, and the drain rate of 64 MiB through read_process cursors on the wire.

Usage: scripts/bench-exec.py [--iters N] [--no-build]
Honours CARGO_TARGET_DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stdio import Server  # noqa: E402  (the shared raw-stdio client, beside this script)

REPO = Path(__file__).resolve().parents[1]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))


def exec_when_free(s: Server, args: dict) -> tuple[float, dict]:
    while True:
        t = time.perf_counter()
        try:
            r = s.tool("exec_command", args)
            return time.perf_counter() - t, r
        except RuntimeError as e:
            if "WORKSPACE_BUSY" not in str(e):
                raise
            time.sleep(0.002)


def over_stdio(binary: Path, iters: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        cfg = Path(tmp) / "config.json"
        cfg.write_text(json.dumps({"workspaces": {"w": {"root": str(root)}},
                                   "store": str(Path(tmp) / "store.db"),
                                   "limits": {"output_ring_bytes": 16 << 20}}))
        s = Server([str(binary), "serve", "--config", str(cfg)], "bench-exec")
        info = s.tool("workspace_info", {"workspace_id": "w"})
        sandbox = info["execution"]["isolation"]["command_sandbox"]
        times, raw = [], []
        for _ in range(iters):
            t = time.perf_counter()
            subprocess.run(["true"], check=True)
            raw.append(time.perf_counter() - t)
            dt, r = exec_when_free(s, {"workspace_id": "w", "command": ["true"], "yield_ms": 10000})
            assert r["exit_code"] == 0, r
            times.append(dt)
        med, raw_med = statistics.median(times), statistics.median(raw)
        print(f"stdio exec_command [\"true\"] yield_ms round trip: median {med*1e3:.2f} ms, "
              f"p90 {sorted(times)[int(len(times)*0.9)]*1e3:.2f} ms over {iters} (command_sandbox={sandbox}, "
              f"pids={info['execution']['isolation']['pids']}); raw fork+exec of true (same run): "
              f"median {raw_med*1e3:.2f} ms; ratio {med/raw_med:.1f}x")
        total = 64 << 20
        t = time.perf_counter()
        _, r = exec_when_free(s, {"workspace_id": "w",
                                  "command": ["sh", "-c", f"head -c {total} /dev/zero | tr '\\0' a"]})
        cursor, got = 0, 0
        while True:
            c = s.tool("read_process", {"process_id": r["process_id"], "cursor": cursor, "wait_ms": 5000})
            got += len(c["chunk"])
            cursor = c["cursor"]
            if c["eof"]:
                break
        secs = time.perf_counter() - t
        print(f"stdio read_process drain: {total >> 20} MiB produced, {got} bytes returned (the rest fell out "
              f"of the 16 MiB ring) in {secs:.2f} s = {got / secs / 1e6:.1f} MB/s returned")
        s.close(timeout=30)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    env = dict(os.environ, BENCH_ITERS=str(a.iters))
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "-p", "codespace-mcp"], cwd=REPO, check=True)
    print("== in-process (release) ==", flush=True)
    out = subprocess.run(["cargo", "test", "--release", "-p", "codespace-mcp", "--test", "it", "process_bench::", "--",
                          "--nocapture"], cwd=REPO, env=env, check=True, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("BENCH"):
            print(line)
    print("== over stdio (release binary, raw JSON-RPC) ==", flush=True)
    over_stdio(TARGET / "release" / "codespace", a.iters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
