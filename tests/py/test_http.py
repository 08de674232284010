"""End-to-end tests of `codespace serve --http` with the official MCP Python SDK's
streamable-HTTP client: initialize, tools and errors; bearer tokens (401, never echoed or
logged); the DNS-rebinding guard; the client name in Cedar and in the decision log.

The binary is $CODESPACE_BIN, else it is built with cargo (target dir $CARGO_TARGET_DIR or
<repo>/target). Run: python3 -m pytest tests/py/test_http.py
"""

import asyncio
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from codespace_helpers import REPO, error_body

CI_TOKEN = "py-ci-token-0123456789abcdef"
DEV_TOKEN = "py-dev-token-0123456789abcdef"
WRONG_TOKEN = "py-wrong-token-0123456789abcdef"
CI_ONLY = """
@id("base.forbid.secret-for-ci")
@reason("only client ci may read secret-for-ci.txt")
forbid (principal, action == CodeSpace::Action::"read", resource)
when { resource.path == "secret-for-ci.txt" && context.session.client != "ci" };
"""


def binary() -> str:
    if os.environ.get("CODESPACE_BIN"):
        return os.environ["CODESPACE_BIN"]
    subprocess.run(
        ["cargo", "build", "-q", "-p", "codespace-mcp", "--bin", "codespace"], cwd=REPO, check=True
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return str(target / "debug" / "codespace")


class Server:
    """A `serve --http` process on a free loopback port, with clients ci and dev."""

    def __init__(self, tmp: Path):
        ws = tmp / "ws"
        ws.mkdir()
        (ws / "a.txt").write_text("hello from python\n")
        (ws / "secret-for-ci.txt").write_text("ci eyes only\n")
        shutil.copytree(REPO / "policies", tmp / "policies")
        shutil.copytree(REPO / "schema", tmp / "schema")
        (tmp / "policies" / "base" / "ci-only.cedar").write_text(CI_ONLY)
        self.store = tmp / "store.db"
        cfg = {
            "workspaces": {"main": {"root": str(ws), "profile": "workspace-write"}},
            "policies": str(tmp / "policies"),
            "schema": str(tmp / "schema" / "codespace.cedarschema"),
            "store": str(self.store),
            "clients": {"ci": {"token": CI_TOKEN}, "dev": {"token_file": str(tmp / "dev.token")}},
        }
        (tmp / "dev.token").write_text(DEV_TOKEN + "\n")
        (tmp / "config.json").write_text(json.dumps(cfg))
        self.log_path = tmp / "server.log"
        self.log = open(self.log_path, "w")
        env = dict(os.environ, CODESPACE_LOG="debug")
        env.pop("CODESPACE_CONFIG", None)
        self.proc = subprocess.Popen(
            [binary(), "serve", "--config", str(tmp / "config.json"), "--http", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            env=env,
        )
        deadline = time.monotonic() + 60
        self.url = None
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"http://127\.0\.0\.1:(\d+)/mcp", self.log_path.read_text())
            if m:
                self.url = m.group(0)
                self.port = int(m.group(1))
                break
            time.sleep(0.05)
        assert self.url, self.log_path.read_text()

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=20)
        self.log.close()
        text = self.log_path.read_text()
        assert code == 0, text
        return text


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("http"))
    yield s
    log = s.stop()
    for token in (CI_TOKEN, DEV_TOKEN, WRONG_TOKEN):
        assert token not in log, "a token reached the server log"


async def with_session(server, token, fn):
    client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with client:
        async with streamable_http_client(server.url, http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                return init, await fn(session)


def test_sdk_initialize_tools_and_errors(server):
    async def body(s):
        tools = await s.list_tools()
        ok = await s.call_tool("read", {"workspace_id": "main", "path": "a.txt"})
        bad = await s.call_tool("read", {"workspace_id": "main"})
        info = await s.call_tool("workspace_info", {})
        try:
            await s.call_tool("no_such_tool", {})
            unknown = None
        except Exception as e:  # the SDK raises on a JSON-RPC error
            unknown = str(e)
        return tools, ok, bad, info, unknown

    init, (tools, ok, bad, info, unknown) = asyncio.run(with_session(server, CI_TOKEN, body))
    assert init.protocol_version == "2025-11-25"
    assert init.server_info.name == "codespace"
    names = {t.name for t in tools.tools}
    assert {"workspace_info", "read", "find"} <= names
    assert not ok.is_error
    assert ok.structured_content["content"] == "hello from python\n"
    assert error_body(bad)["code"] == "INVALID_ARGUMENTS"
    assert info.structured_content["transports"] == ["streamable-http"]
    assert unknown is not None and "tool not found" in unknown


def test_missing_and_wrong_tokens_get_401_without_echo(server):
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    base = {"Accept": "application/json, text/event-stream"}
    for extra in ({}, {"Authorization": f"Bearer {WRONG_TOKEN}"}, {"Authorization": f"Basic {CI_TOKEN}"}):
        r = httpx2.post(server.url, json=init, headers={**base, **extra})
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.json() == {"error": "unauthorized"}
        everything = r.text + json.dumps(dict(r.headers))
        assert WRONG_TOKEN not in everything and CI_TOKEN not in everything

    with pytest.raises(Exception):
        asyncio.run(with_session(server, WRONG_TOKEN, lambda s: s.list_tools()))


def test_foreign_host_and_origin_are_refused(server):
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    auth = {"Authorization": f"Bearer {CI_TOKEN}", "Accept": "application/json, text/event-stream"}
    r = httpx2.post(server.url, json=ping, headers={**auth, "Host": "evil.example"})
    assert r.status_code == 403
    r = httpx2.post(server.url, json=ping, headers={**auth, "Host": f"evil.example:{server.port}"})
    assert r.status_code == 403
    r = httpx2.post(server.url, json=ping, headers={**auth, "Origin": "http://evil.example"})
    assert r.status_code == 403
    assert "mcp-session-id" not in r.headers


def test_client_scoped_policy_and_decision_rows(server):
    args = {"workspace_id": "main", "path": "secret-for-ci.txt"}

    async def read_secret(s):
        return await s.call_tool("read", args)

    _, ci = asyncio.run(with_session(server, CI_TOKEN, read_secret))
    _, dev = asyncio.run(with_session(server, DEV_TOKEN, read_secret))
    assert not ci.is_error and ci.structured_content["content"] == "ci eyes only\n"
    denied = error_body(dev)
    assert denied["code"] == "UNAUTHORIZED"
    assert "base.forbid.secret-for-ci" in json.dumps(denied)

    # Read decisions are group-committed within 50 ms of the call (docs/operations.md): poll.
    deadline = time.monotonic() + 10
    while True:
        db = sqlite3.connect(server.store)
        rows = db.execute(
            "SELECT client, transport, decision FROM decisions WHERE tool = 'read' AND subject LIKE '%secret-for-ci.txt%'"
        ).fetchall()
        db.close()
        if len(rows) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert ("ci", "streamable-http", "allow") in rows, rows
    assert ("dev", "streamable-http", "deny") in rows, rows


def test_concurrent_sdk_clients_without_errors(server):
    clients, calls = 8, 20

    async def one(i):
        token = CI_TOKEN if i % 2 == 0 else DEV_TOKEN

        async def body(s):
            errors = 0
            for _ in range(calls):
                r = await s.call_tool("read", {"workspace_id": "main", "path": "a.txt"})
                errors += int(r.is_error)
            return errors

        _, errors = await with_session(server, token, body)
        return errors

    async def all_clients():
        return await asyncio.gather(*(one(i) for i in range(clients)))

    assert asyncio.run(all_clients()) == [0] * clients
