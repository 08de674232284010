"""End-to-end tests of `codespace serve` over stdio with the official Python MCP SDK.

The binary comes from $CODESPACE_BIN (default: <repo>/target/debug/codespace). Every test builds its
own temporary workspace and store. Malformed JSON-RPC cannot be sent through the SDK; the Rust
subprocess tests (mcp/tests/it/stdio_jsonrpc.rs) cover it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from mcp import MCPError

from codespace_helpers import BIN, CALL_TIMEOUT, REPO, WS, Client, require_binary, run, serve, write, write_config


def setup_module(_module: Any) -> None:
    require_binary()


def basic_workspace(tmp: Path) -> Path:
    root = tmp / "ws"
    root.mkdir()
    write(root, "a.txt", "hello\n")
    write(root, "digits.txt", "0123456789")
    write(root, "src/main.rs", "fn main() {}\n")
    write(root, "src/lib.rs", "//! lib\n")
    write(root, ".env", "SECRET=1\n")
    return root


@asynccontextmanager
async def connect(tmp: Path, args: list[str]) -> AsyncIterator[Client]:
    async with serve(tmp, [*args, "--store", str(tmp / "store.db")]) as client:
        yield client


def test_initialize_and_list_tools(tmp_path: Path) -> None:
    root = basic_workspace(tmp_path)

    async def main() -> None:
        async with connect(tmp_path, [str(root)]) as c:
            assert c.init.protocol_version == "2025-11-25"
            assert c.init.server_info.name == "codespace"
            assert c.init.instructions and "Cedar" in c.init.instructions
            tools = (await c.session.list_tools()).tools
            names = {t.name for t in tools}
            info = await c.ok("workspace_info", {})
            assert names == set(info["tools_exposed"])
            assert {"workspace_info", "read", "find"} <= names
            for t in tools:
                assert t.description and len(t.description) > 20, t.name
                assert t.input_schema.get("type") == "object", t.name
                assert t.output_schema and t.output_schema.get("type") == "object", t.name
            c.assert_no_absolute_paths()

    run(main())


def test_read_and_paging(tmp_path: Path) -> None:
    root = basic_workspace(tmp_path)

    async def main() -> None:
        async with connect(tmp_path, [str(root)]) as c:
            r = await c.ok("read", {"workspace_id": "default", "path": "a.txt"})
            assert r["content"] == "hello\n" and r["truncated"] is False and r["byte_count"] == 6
            assert r["version"].startswith("sha256:") and len(r["version"]) == 71
            assert "offset" not in r and "next_offset" not in r
            assert None not in r.values()
            p1 = await c.ok("read", {"workspace_id": "default", "path": "digits.txt", "limit": 6})
            assert (p1["content"], p1["truncated"], p1["next_offset"]) == ("012345", True, 6)
            p2 = await c.ok(
                "read", {"workspace_id": "default", "path": "digits.txt", "offset": 6, "limit": 6}
            )
            assert (p2["content"], p2["offset"], p2["truncated"]) == ("6789", 6, False)
            assert "next_offset" not in p2
            assert p1["version"] == p2["version"]
            c.assert_no_absolute_paths()

    run(main())


def test_find_glob_paging_and_withheld(tmp_path: Path) -> None:
    root = basic_workspace(tmp_path)

    async def main() -> None:
        async with connect(tmp_path, [str(root)]) as c:
            f = await c.ok("find", {"workspace_id": "default"})
            assert f["paths"] == ["a.txt", "digits.txt", "src/lib.rs", "src/main.rs"]
            assert f["withheld"] == 1, ".env is withheld"
            assert f["truncated"] is False and f["incomplete"] is False
            assert None not in f.values()
            rs = await c.ok("find", {"workspace_id": "default", "glob": "**/*.rs"})
            assert rs["paths"] == ["src/lib.rs", "src/main.rs"]
            p1 = await c.ok("find", {"workspace_id": "default", "limit": 3})
            assert p1["paths"] == ["a.txt", "digits.txt", "src/lib.rs"]
            assert p1["next_offset"] == 3 and p1["truncated"] is True
            p2 = await c.ok("find", {"workspace_id": "default", "offset": 3})
            assert p2["paths"] == ["src/main.rs"] and "next_offset" not in p2
            assert p1["listing_version"] == p2["listing_version"] == f["listing_version"]
            c.assert_no_absolute_paths()

    run(main())


def test_every_error_code_of_the_file_tools(tmp_path: Path) -> None:
    root = basic_workspace(tmp_path)
    (root / "leaf-link").symlink_to("a.txt")
    (root / "dir-link").symlink_to("src")
    os.mkfifo(root / "pipe")

    def rd(path: str, **kw: Any) -> dict[str, Any]:
        return {"workspace_id": "default", "path": path, **kw}

    cases: list[tuple[str, dict[str, Any], str]] = [
        ("read", {"workspace_id": "nope", "path": "a.txt"}, "WORKSPACE_NOT_FOUND"),
        ("find", {"workspace_id": "nope"}, "WORKSPACE_NOT_FOUND"),
        ("workspace_info", {"workspace_id": "nope"}, "WORKSPACE_NOT_FOUND"),
        ("read", rd("../outside"), "PATH_ESCAPE"),
        ("read", rd("/etc/passwd"), "PATH_ESCAPE"),
        ("read", rd("a\0b"), "PATH_ESCAPE"),
        ("read", rd(""), "PATH_ESCAPE"),
        ("read", rd("missing.txt"), "FILE_NOT_FOUND"),
        ("read", rd("a.txt/x"), "PATH_NOT_DIRECTORY"),
        ("read", rd("leaf-link"), "SYMLINK_REJECTED"),
        ("read", rd("dir-link/main.rs"), "SYMLINK_REJECTED"),
        ("read", rd("pipe"), "SPECIAL_FILE_REJECTED"),
        ("read", rd("src"), "SPECIAL_FILE_REJECTED"),
        ("read", rd("a.txt", limit=0), "OUTPUT_LIMIT"),
        ("read", rd("a.txt", limit=1048577), "OUTPUT_LIMIT"),
        ("find", {"workspace_id": "default", "limit": 0}, "OUTPUT_LIMIT"),
        ("find", {"workspace_id": "default", "limit": 10001}, "OUTPUT_LIMIT"),
        ("read", {"workspace_id": "default"}, "INVALID_ARGUMENTS"),
        ("read", rd("a.txt", offset="ten"), "INVALID_ARGUMENTS"),
        ("find", {"workspace_id": "default", "glob": "src/[a"}, "INVALID_ARGUMENTS"),
        ("read", rd(".env"), "UNAUTHORIZED"),
    ]

    async def main() -> None:
        async with connect(tmp_path, [str(root)]) as c:
            got = []
            for tool, args, _want in cases:
                got.append(await c.code(tool, args))
            want = [w for _t, _a, w in cases]
            assert got == want
            body = await c.err("read", {"workspace_id": "default"})
            assert "path" in body["message"], "INVALID_ARGUMENTS names the field"
            c.assert_no_absolute_paths()

    run(main())


def test_unauthorized_under_a_read_only_config(tmp_path: Path) -> None:
    root = basic_workspace(tmp_path)
    cfg = write_config(tmp_path, root, "read-only")

    async def main() -> None:
        async with connect(tmp_path, ["--config", str(cfg)]) as c:
            info = await c.ok("workspace_info", {"workspace_id": WS})
            assert info["profile"] == "read-only"
            assert info["execution"]["permissions"] == {"read": True, "write": False, "exec": False}
            body = await c.err("read", {"workspace_id": WS, "path": ".env"})
            assert body["code"] == "UNAUTHORIZED"
            assert body["decision_id"]
            assert body["policy_ids"] == ["base.forbid.secret-files"]
            assert "SECRET" not in json.dumps(body)
            if "apply_patch" in info["tools_exposed"]:
                patch = "*** Begin Patch\n*** Add File: new.txt\n+x\n*** End Patch\n"
                body = await c.err("apply_patch", {"workspace_id": WS, "patch": patch})
                assert body["code"] == "UNAUTHORIZED" and body["decision_id"]
                assert not (root / "new.txt").exists()
            # Reading ordinary files still works under read-only.
            r = await c.ok("read", {"workspace_id": WS, "path": "src/main.rs"})
            assert r["content"] == "fn main() {}\n"
            c.assert_no_absolute_paths()

    run(main())


def test_workspace_write_permissions(tmp_path: Path) -> None:
    root = basic_workspace(tmp_path)
    cfg = write_config(tmp_path, root, "workspace-write")

    async def main() -> None:
        async with connect(tmp_path, ["--config", str(cfg)]) as c:
            info = await c.ok("workspace_info", {"workspace_id": WS})
            perms = info["execution"]["permissions"]
            assert perms["read"] is True and perms["write"] is True
            assert info["internal_model_calls"] is False
            c.assert_no_absolute_paths()

    run(main())


def test_unknown_tool_is_a_protocol_error_and_the_session_survives(tmp_path: Path) -> None:
    root = basic_workspace(tmp_path)

    async def main() -> None:
        async with connect(tmp_path, [str(root)]) as c:
            with pytest.raises(MCPError):
                await asyncio.wait_for(c.session.call_tool("no_such_tool", {}), CALL_TIMEOUT)
            r = await c.ok("read", {"workspace_id": "default", "path": "a.txt"})
            assert r["content"] == "hello\n"

    run(main())


def test_policy_validate_and_test_commands() -> None:
    policies = str(REPO / "policies")
    v = subprocess.run([BIN, "policy", "validate", "--policies", policies], capture_output=True, text=True)
    assert v.returncode == 0, v.stderr
    t = subprocess.run([BIN, "policy", "test", "--policies", policies], capture_output=True, text=True)
    assert t.returncode == 0, t.stdout + t.stderr
    assert t.stdout.rstrip().splitlines()[-1].endswith(" passed, 0 failed")
