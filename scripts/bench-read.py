#!/usr/bin/env python3
"""Round trip of `read` (10 KB file) against `ping` on the same server, with the official MCP
Python SDK over stdio. Prints calls/s and the ratio read/ping (the transport floor).

usage: scripts/bench-read.py [--bin target/release/codespace] [--calls 2000]
Run by hand (not in CI): figures depend on the machine; the ratio is what matters.
"""
import argparse
import asyncio
import os
import statistics
import tempfile
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--bin", default=os.path.join(here, "..", "target", "release", "codespace"))
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = os.path.join(tmp, "ws")
        os.mkdir(ws)
        with open(os.path.join(ws, "ten.txt"), "w") as f:
            f.write("x" * 10240)
        t0 = time.perf_counter()
        params = StdioServerParameters(
            command=args.bin, args=["serve", ws, "--store", os.path.join(tmp, "s.db")]
        )
        async with stdio_client(params) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                startup = time.perf_counter() - t0
                for _ in range(50):  # warm up
                    await s.send_ping()
                    await s.call_tool("read", {"workspace_id": "default", "path": "ten.txt"})
                pings, reads = [], []
                for _ in range(args.calls):
                    t = time.perf_counter()
                    await s.send_ping()
                    pings.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    res = await s.call_tool("read", {"workspace_id": "default", "path": "ten.txt"})
                    reads.append(time.perf_counter() - t)
                    assert not res.is_error
        p50p, p50r = statistics.median(pings), statistics.median(reads)
        print(f"spawn + initialize: {startup * 1000:.1f} ms")
        print(f"ping  p50 {p50p * 1e3:.3f} ms ({1 / statistics.mean(pings):.0f} calls/s)")
        print(f"read  p50 {p50r * 1e3:.3f} ms ({1 / statistics.mean(reads):.0f} calls/s), 10 KB")
        print(f"read/ping ratio (p50): {p50r / p50p:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
