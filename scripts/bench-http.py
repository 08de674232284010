#!/usr/bin/env python3
"""Load check of `codespace serve --http`: N concurrent MCP clients (official Python SDK,
streamable HTTP), each with its own bearer token, making M `read` calls. Each round runs the
2025-11-25 session path (initialize, Mcp-Session-Id) and then the 2026-07-28 stateless path
(no initialize, no session: every request self-contained) against the same server, so the two
are compared in one run. Prints per era the error count, throughput and call latency
percentiles, and the ratio 2026/2025; exits 1 on any error. Run by hand:

    python3 scripts/bench-http.py                      # 32 clients x 200 calls, 2 rounds, debug binary
    python3 scripts/bench-http.py --clients 8 --calls 50 --rounds 3
    python3 scripts/bench-http.py --era 2025           # one era only
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
from mcp.client import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

MODERN = "2026-07-28"

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


async def timed_calls(call, calls: int, latencies: list, errors: list):
    for _ in range(calls):
        t = time.perf_counter()
        try:
            r = await call("read", {"workspace_id": "main", "path": "a.txt"})
            if r.is_error:
                errors.append(r.content[0].text if r.content else "isError")
        except Exception as e:  # transport or JSON-RPC error
            errors.append(repr(e))
        latencies.append(time.perf_counter() - t)


async def one_client(url: str, token: str, calls: int, latencies: list, errors: list, era: str):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    try:
        async with client:
            transport = streamable_http_client(url, http_client=client)
            if era == MODERN:
                # Pinned: no discover probe, no initialize, no session.
                async with Client(transport, mode=MODERN, cache=None) as c:
                    await c.list_tools()
                    await timed_calls(c.call_tool, calls, latencies, errors)
                return
            async with transport as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await timed_calls(session.call_tool, calls, latencies, errors)
    except Exception as e:
        errors.append(f"{era} client: {e!r}")


def pct(sorted_values, p):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, int(len(sorted_values) * p / 100))
    return sorted_values[i]


def report(era: str, clients: int, calls: int, lat: list, wall: float, errors: list) -> float:
    lat = sorted(lat)
    rate = len(lat) / wall if wall > 0 else float("nan")
    print(f"bench-http: {era}: {clients} clients x {calls} calls = {clients * calls} calls, {len(lat)} timed, "
          f"{len(errors)} errors, {wall:.2f} s wall, {rate:.0f} calls/s")
    print(f"bench-http: {era}: latency p50 {pct(lat, 50) * 1000:.2f} ms, p90 {pct(lat, 90) * 1000:.2f} ms, "
          f"p99 {pct(lat, 99) * 1000:.2f} ms, max {lat[-1] * 1000 if lat else float('nan'):.2f} ms")
    for e in errors[:5]:
        print(f"bench-http: {era}: error: {e}")
    return rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of (2025 session, 2026 stateless)")
    ap.add_argument("--era", choices=["both", "2025", "2026"], default="both")
    a = ap.parse_args()
    eras = {"both": ["2025-11-25", MODERN], "2025": ["2025-11-25"], "2026": [MODERN]}[a.era]
    ok = True
    rates: dict[str, list] = {e: [] for e in eras}
    with tempfile.TemporaryDirectory() as d:
        proc, log, url, tokens = start(Path(d), a.clients)
        for rnd in range(a.rounds):
            for era in eras:
                latencies, errors = [], []
                t0 = time.perf_counter()

                async def run():
                    await asyncio.gather(
                        *(one_client(url, tokens[i], a.calls, latencies, errors, era) for i in range(a.clients))
                    )

                asyncio.run(run())
                wall = time.perf_counter() - t0
                rates[era].append(report(f"round {rnd + 1} {era}", a.clients, a.calls, latencies, wall, errors))
                ok = ok and not errors and len(latencies) == a.clients * a.calls
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
        log.close()
    for era, r in rates.items():
        print(f"bench-http: {era}: mean {sum(r) / len(r):.0f} calls/s over {len(r)} rounds")
    if len(eras) == 2:
        old, new = (sum(rates[e]) / len(rates[e]) for e in eras)
        print(f"bench-http: throughput 2026 stateless / 2025 session = {new / old:.2f}")
    print(f"bench-http: server exit code {code} after SIGTERM")
    return 0 if ok and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
