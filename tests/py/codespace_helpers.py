"""Shared helpers for the Python end-to-end tests in tests/py (not a test module: pytest collects
only test_*.py files, so nothing here is collected).

- `BIN`/`require_binary()`: the `codespace` binary from $CODESPACE_BIN (default
  <repo>/target/debug/codespace);
- `write`, `write_config`, `snapshot`: temporary workspace, config and tree-snapshot helpers;
- `Client` and `serve(...)`: `codespace serve` over stdio through the official MCP SDK, with a
  transcript of every result for the absolute-path scan;
- `error_body`: the ErrorBody JSON of a tool error result;
- `skip_missing(test, why)`: the Rust tests' `codespace_test_skip::skip` (fails under
  CODESPACE_REQUIRE_ISOLATION=1 or CI=true, else prints `skip:` and appends to CODESPACE_SKIP_LOG).
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("CODESPACE_BIN", str(REPO / "target" / "debug" / "codespace"))
WS = "w"
CALL_TIMEOUT = 20.0


def skip_missing(test: str, why: str) -> None:
    """This host cannot run `test`'s invariant (`why`): the caller returns next. Under
    CODESPACE_REQUIRE_ISOLATION=1 (or CI=true) the test fails instead; otherwise a `skip:` line
    is printed and `skip<TAB>test<TAB>why` appended to $CODESPACE_SKIP_LOG (scripts/test.sh counts
    them), as the Rust tests' `codespace_test_skip` does."""
    why = why.replace("\n", " ").replace("\t", " ")
    if os.environ.get("CODESPACE_REQUIRE_ISOLATION") in ("1", "true") or \
            os.environ.get("CI") in ("true", "1"):
        pytest.fail(f"{test}: this host cannot run the test: {why} (CODESPACE_REQUIRE_ISOLATION=1 "
                    "or CI=true requires every invariant to run)")
    log = os.environ.get("CODESPACE_SKIP_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"skip\t{test}\t{why}\n")
    print(f"skip: {test}: {why}")


def require_binary() -> None:
    """Fail the calling module's tests early when the binary is missing."""
    if not os.access(BIN, os.X_OK):
        pytest.fail(f"codespace binary not found at {BIN}; build it or set CODESPACE_BIN", pytrace=False)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def write(root: Path, rel: str, content: str | bytes) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)


def write_config(tmp: Path, root: Path, profile: str) -> Path:
    """A config file with the one workspace `WS` at `root` under `profile`."""
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps({"workspaces": {WS: {"root": str(root), "profile": profile}}}))
    return cfg


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every entry under root, no-follow: files with bytes and mode, dirs, symlinks with target."""
    out: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", p.read_bytes(), stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("special", stat.S_IFMT(st.st_mode))
    return out


def error_body(result: Any) -> dict[str, Any]:
    """The ErrorBody of a tool error result (its one text item, decoded)."""
    assert result.is_error, result
    return json.loads(result.content[0].text)


class Client:
    """A connected SDK session that records every result for the absolute-path scan.

    With `mirrored` (the default), `ok` also checks that the text item mirrors structuredContent
    and `err` that an error carries exactly one content item.
    """

    def __init__(
        self,
        session: ClientSession,
        tmp: Path,
        init: Any = None,
        *,
        timeout: float = CALL_TIMEOUT,
        mirrored: bool = True,
    ) -> None:
        self.session = session
        self.init = init
        self.tmp = tmp
        self.timeout = timeout
        self.mirrored = mirrored
        self.transcript: list[str] = []

    async def call(self, tool: str, args: dict[str, Any]) -> Any:
        res = await asyncio.wait_for(self.session.call_tool(tool, args), self.timeout)
        self.transcript.append(res.model_dump_json())
        return res

    async def ok(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        res = await self.call(tool, args)
        text = res.content[0].text if res.content else ""
        assert not res.is_error, f"{tool} {args} failed: {text}"
        assert res.structured_content is not None
        if self.mirrored:
            assert json.loads(text) == res.structured_content, "text item mirrors structuredContent"
        return res.structured_content

    async def err(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        res = await self.call(tool, args)
        assert res.is_error, f"{tool} {args}: expected a tool error, got {res.structured_content}"
        if self.mirrored:
            assert len(res.content) == 1
        return error_body(res)

    async def code(self, tool: str, args: dict[str, Any]) -> str:
        return (await self.err(tool, args))["code"]

    def assert_no_absolute_paths(self) -> None:
        roots = {str(self.tmp), str(self.tmp.resolve())}
        for line in self.transcript:
            for r in roots:
                assert r not in line, f"absolute path {r} on the wire: {line[:400]}"


@asynccontextmanager
async def serve(
    tmp: Path,
    args: list[str],
    *,
    client: type[Client] = Client,
    timeout: float = CALL_TIMEOUT,
    mirrored: bool = True,
) -> AsyncIterator[Client]:
    """`codespace serve <args>` over stdio (cwd `tmp`, stderr to tmp/server-stderr.log), initialized
    and with its tools listed, as a `client`."""
    params = StdioServerParameters(
        command=BIN,
        args=["serve", *args],
        cwd=str(tmp),
        env={"CODESPACE_LOG": "warn"},
    )
    with open(tmp / "server-stderr.log", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write_stream):
            async with ClientSession(read, write_stream) as session:
                init = await asyncio.wait_for(session.initialize(), timeout)
                # The SDK checks structuredContent against a tool's outputSchema once listed.
                await session.list_tools()
                yield client(session, tmp, init, timeout=timeout, mirrored=mirrored)
