#!/usr/bin/env python3
"""Load check of `codespace serve --http`: N concurrent MCP clients (official Python SDK,
streamable HTTP), each with its own session and bearer token, making M `read` calls. Prints
the error count and call latency percentiles; exits 1 on any error. Run by hand:

    python3 scripts/bench-http.py                      # 32 clients x 200 calls, debug binary
    python3 scripts/bench-http.py --clients 8 --calls 50
    CODESPACE_BIN=target/release/codespace python3 scripts/bench-http.py

It starts its own server on a free loopback port with a temporary workspace, config and store,
and stops it (SIGTERM) at the end. Traffic goes to 127.0.0.1 only.
"""

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

REPO = Path(__file__).resolve().parents[1]


def binary() -> str:
    if os.environ.get("CODESPACE_BIN"):
        return os.environ["CODESPACE_BIN"]
    subprocess.run(["cargo", "build", "-q", "-p", "codespace-mcp", "--bin", "codespace"], cwd=REPO, check=True)
    return str(Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "debug" / "codespace")


def start(tmp: Path, clients: int):
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("bench payload\n" * 16)
    tokens = {f"bench{i}": f"bench-token-{i:04d}-0123456789abcdef" for i in range(clients)}
    cfg = {
        "workspaces": {"main": {"root": str(ws), "profile": "read-only"}},
        "store": str(tmp / "store.db"),
        "clients": {name: {"token": tok} for name, tok in tokens.items()},
    }
    (tmp / "config.json").write_text(json.dumps(cfg))
    log = open(tmp / "server.log", "w")
    proc = subprocess.Popen(
        [binary(), "serve", "--config", str(tmp / "config.json"), "--http", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        m = re.search(r"http://127\.0\.0\.1:\d+/mcp", (tmp / "server.log").read_text())
        if m:
            return proc, log, m.group(0), list(tokens.values())
        time.sleep(0.05)
    raise SystemExit("server did not start:\n" + (tmp / "server.log").read_text())


async def one_client(url: str, token: str, calls: int, latencies: list, errors: list):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    try:
        async with client:
            async with streamable_http_client(url, http_client=client) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    for _ in range(calls):
                        t = time.perf_counter()
                        try:
                            r = await session.call_tool("read", {"workspace_id": "main", "path": "a.txt"})
                            if r.is_error:
                                errors.append(r.content[0].text if r.content else "isError")
                        except Exception as e:  # transport or JSON-RPC error
                            errors.append(repr(e))
                        latencies.append(time.perf_counter() - t)
    except Exception as e:
        errors.append(f"session: {e!r}")


def pct(sorted_values, p):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, int(len(sorted_values) * p / 100))
    return sorted_values[i]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--calls", type=int, default=200)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        proc, log, url, tokens = start(Path(d), a.clients)
        latencies, errors = [], []
        t0 = time.perf_counter()

        async def run():
            await asyncio.gather(*(one_client(url, tokens[i], a.calls, latencies, errors) for i in range(a.clients)))

        asyncio.run(run())
        wall = time.perf_counter() - t0
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
        log.close()
    lat = sorted(latencies)
    total = a.clients * a.calls
    print(f"bench-http: {a.clients} clients x {a.calls} calls = {total} calls, {len(lat)} timed, "
          f"{len(errors)} errors, {wall:.2f} s wall, {len(lat) / wall:.0f} calls/s")
    print(f"bench-http: latency p50 {pct(lat, 50) * 1000:.2f} ms, p90 {pct(lat, 90) * 1000:.2f} ms, "
          f"p99 {pct(lat, 99) * 1000:.2f} ms, max {lat[-1] * 1000 if lat else float('nan'):.2f} ms")
    print(f"bench-http: server exit code {code} after SIGTERM")
    for e in errors[:5]:
        print(f"bench-http: error: {e}")
    return 0 if not errors and len(lat) == total and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
