"""The official Python SDK's `mcp.client.Client` against `codespace serve` in both connect modes
that reach MCP 2026-07-28: `auto` (probes `server/discover`, no initialize) and pinned to
`2026-07-28`, over stdio and streamable HTTP, calling every tool the server lists. A 2025-11-25
(`legacy`) client on the same endpoint keeps its session. Issue 30.

The binary comes from $CODESPACE_BIN (default: <repo>/target/debug/codespace).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters
from mcp.client import Client

from codespace_helpers import BIN, CALL_TIMEOUT, WS, require_binary, run, write, write_config

MODERN = "2026-07-28"
PATCH = "*** Begin Patch\n*** Add File: added.txt\n+added by {mode}\n*** End Patch\n"


def setup_module(_module: Any) -> None:
    require_binary()


def workspace(tmp: Path) -> Path:
    root = tmp / "ws"
    root.mkdir()
    write(root, "a.txt", "hello\n")
    write(root, "src/main.rs", "fn main() { println!(\"needle\"); }\n")
    return root


def stdio_params(tmp: Path, root: Path) -> StdioServerParameters:
    cfg = write_config(tmp, root, "workspace-write")
    return StdioServerParameters(
        command=BIN,
        args=["serve", "--config", str(cfg), "--store", str(tmp / "store.db")],
        cwd=str(tmp),
        env={"CODESPACE_LOG": "warn"},
    )


class HttpServer:
    """`codespace serve --http 127.0.0.1:0` (no clients: unauthenticated loopback)."""

    def __init__(self, tmp: Path, root: Path):
        cfg = write_config(tmp, root, "workspace-write")
        self.log = open(tmp / "server.log", "w+")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--config", str(cfg), "--store", str(tmp / "store.db"), "--http", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            env=dict(os.environ, CODESPACE_LOG="warn"),
        )
        deadline = time.monotonic() + 60
        self.url = ""
        while not self.url:
            self.log.seek(0)
            m = re.search(r"http://127\.0\.0\.1:\d+/mcp", self.log.read())
            if m:
                self.url = m.group(0)
                break
            assert self.proc.poll() is None, "server exited before listening"
            assert time.monotonic() < deadline, "server did not listen within 60 s"
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


async def ok(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    res = await asyncio.wait_for(client.call_tool(tool, args), CALL_TIMEOUT)
    text = res.content[0].text if res.content else ""
    assert not res.is_error, f"{tool} {args} failed: {text}"
    assert res.structured_content is not None
    return res.structured_content


async def err(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    res = await asyncio.wait_for(client.call_tool(tool, args), CALL_TIMEOUT)
    assert res.is_error, f"{tool} {args}: expected a tool error, got {res.structured_content}"
    assert res.structured_content is not None
    return res.structured_content


async def every_tool(client: Client, mode: str) -> None:
    """Calls each listed tool once; a tool that needs state it cannot have here (a hold, a tty)
    answers with its documented error code, which the SDK still parses as a tool result."""
    assert client.protocol_version == MODERN, client.protocol_version
    listed = {t.name for t in (await client.list_tools()).tools}
    called: set[str] = set()

    async def call_ok(tool: str, args: dict[str, Any]) -> dict[str, Any]:
        called.add(tool)
        return await ok(client, tool, args)

    async def call_err(tool: str, args: dict[str, Any]) -> str:
        called.add(tool)
        return (await err(client, tool, args))["code"]

    info = await call_ok("workspace_info", {"workspace_id": WS})
    assert set(info["tools_exposed"]) == listed
    assert (await call_ok("read", {"workspace_id": WS, "path": "a.txt"}))["content"] == "hello\n"
    assert "a.txt" in (await call_ok("find", {"workspace_id": WS}))["paths"]
    assert (await call_ok("grep", {"workspace_id": WS, "pattern": "needle"}))["matches"]
    assert (await call_ok("find_files", {"workspace_id": WS, "query": "main"}))["matches"]
    patched = await call_ok("apply_patch", {"workspace_id": WS, "patch": PATCH.format(mode=mode)})
    assert patched["status"] == "applied"
    st = await call_ok("operation_status", {"operation_id": patched["operation_id"]})
    assert st["status"] == "applied", st
    # The operation ledger: the patch's diff, then its undo as a new applied patch.
    diff = await call_ok("operation_diff", {"operation_id": patched["operation_id"]})
    assert diff["files"], diff
    undone = await call_ok("operation_revert", {"operation_id": patched["operation_id"]})
    assert undone["status"] == "applied", undone
    # A whole-file write with exact bytes (no final newline), then its undo.
    wrote = await call_ok(
        "write_file", {"workspace_id": WS, "path": "written.txt", "content": "no newline", "mode": "create"}
    )
    assert wrote["status"] == "applied" and wrote["changes"][0]["kind"] == "add", wrote
    unwritten = await ok(client, "operation_revert", {"operation_id": wrote["operation_id"]})
    assert unwritten["status"] == "applied", unwritten
    # A misspelt optional argument is named, not ignored.
    bad = await err(client, "read", {"workspace_id": WS, "path": "a.txt", "ofset": 1})
    assert bad["code"] == "INVALID_ARGUMENTS" and "ofset" in bad["message"], bad

    started = await call_ok("exec_command", {"workspace_id": WS, "command": ["cat"]})
    pid = started["process_id"]
    assert (await call_ok("write_stdin", {"process_id": pid, "data": "echo\n"}))["ok"] is True
    await call_ok("read_process", {"process_id": pid, "wait_ms": 100})
    assert await call_err("process_resize", {"process_id": pid, "rows": 5, "cols": 5}) == "PROCESS_NOT_TTY"
    assert (await call_ok("process_status", {"process_id": pid}))["process_id"] == pid
    await call_ok("terminate_process", {"process_id": pid})
    own = await call_ok("process_list", {"workspace_id": WS})
    assert pid in [p["process_id"] for p in own["processes"]], own
    # The process's output as a resource, listed and read in this era too.
    uri = f"codespace://processes/{pid}/output"
    resources = await asyncio.wait_for(client.list_resources(), CALL_TIMEOUT)
    assert uri in [str(r.uri) for r in resources.resources], resources
    read = await asyncio.wait_for(client.read_resource(uri), CALL_TIMEOUT)
    assert "echo" in read.contents[0].text, read

    # The approval tools: a hold nobody created is not found (or not this client's to see).
    code = await call_err("approval_resolve", {"approval_id": "appr-none", "decision": "grant"})
    assert code in ("APPROVAL_NOT_FOUND", "UNAUTHORIZED", "INVALID_ARGUMENTS"), code
    code = await call_err("operation_resume", {"approval_id": "appr-none"})
    assert code in ("APPROVAL_NOT_FOUND", "UNAUTHORIZED", "INVALID_ARGUMENTS"), code
    res = await asyncio.wait_for(
        client.call_tool(
            "approval_create",
            {"tool": "apply_patch", "arguments": {"workspace_id": WS, "patch": PATCH.format(mode="held")}},
        ),
        CALL_TIMEOUT,
    )
    called.add("approval_create")
    assert res.structured_content is not None
    assert called == listed, f"not called: {listed - called}"


@pytest.mark.parametrize("mode", ["auto", MODERN])
def test_every_tool_over_stdio(tmp_path: Path, mode: str) -> None:
    root = workspace(tmp_path)

    async def main() -> None:
        async with Client(stdio_params(tmp_path, root), mode=mode) as client:
            await every_tool(client, mode)

    run(main())


@pytest.mark.parametrize("mode", ["auto", MODERN])
def test_every_tool_over_http(tmp_path: Path, mode: str) -> None:
    root = workspace(tmp_path)
    server = HttpServer(tmp_path, root)
    try:

        async def main() -> None:
            async with Client(server.url, mode=mode) as client:
                await every_tool(client, mode)

        run(main())
    finally:
        server.stop()


def test_a_legacy_client_keeps_the_2025_session(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    server = HttpServer(tmp_path, root)
    try:

        async def main() -> None:
            async with Client(server.url, mode="legacy") as client:
                assert client.protocol_version == "2025-11-25"
                assert (await ok(client, "read", {"workspace_id": WS, "path": "a.txt"}))["content"] == "hello\n"

        run(main())
    finally:
        server.stop()
