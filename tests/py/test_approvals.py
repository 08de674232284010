"""End-to-end tests of approval holds (issue #14) over stdio with the official MCP SDK.

A workspace with `approvals: confirm` holds every allowed apply_patch / exec_command with
APPROVAL_REQUIRED and an approval_id; the operator CLI (`codespace approvals`) or elicitation
grants it (over approval_resolve the asking client may only deny its own hold); operation_resume
runs it exactly once. The binary comes from $CODESPACE_BIN (default:
<repo>/target/debug/codespace); every test has its own workspace, config and store.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from codespace_helpers import BIN, WS, Client, require_binary, run, serve, write

APPR_ID_PREFIX = "appr-"


def setup_module(_module: Any) -> None:
    require_binary()


def add(path: str, line: str) -> str:
    return f"*** Begin Patch\n*** Add File: {path}\n+{line}\n*** End Patch\n"


def setup(tmp: Path, *, ttl_ms: int | None = None, unsandboxed: bool = False) -> tuple[Path, Path]:
    """A confirm workspace `ws` under tmp, its config (store inside tmp)."""
    root = tmp / "ws"
    root.mkdir()
    cfg: dict[str, Any] = {
        "store": str(tmp / "store.db"),
        "workspaces": {WS: {"root": str(root), "profile": "workspace-write", "approvals": "confirm"}},
    }
    if unsandboxed:
        # The held command never runs; this keeps the hold independent of the host's sandbox.
        cfg["workspaces"][WS].update({"sandbox": "off", "secret_masking": "off"})
    if ttl_ms is not None:
        cfg["limits"] = {"approval_ttl_ms": ttl_ms}
    path = tmp / "config.json"
    path.write_text(json.dumps(cfg))
    return root, path


def cli(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BIN, "approvals", *args, "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "CODESPACE_LOG": "warn", "USER": "alice"},
    )


def grant(cfg: Path, appr: str) -> None:
    """The operator grants from the CLI (the shipped policies refuse a grant over the tool)."""
    granted = cli(cfg, "grant", appr)
    assert granted.returncode == 0, granted.stderr
    assert granted.stdout.strip() == f"{appr} granted"


async def held(c: Client, tool: str, args: dict[str, Any]) -> str:
    body = await c.err(tool, args)
    assert body["code"] == "APPROVAL_REQUIRED", body
    appr = body["approval_id"]
    assert appr.startswith(APPR_ID_PREFIX), body
    return appr


def test_confirm_hold_grant_resume_applies_once_and_a_repeat_replays(tmp_path: Path) -> None:
    root, cfg = setup(tmp_path)

    async def go() -> None:
        async with serve(tmp_path, ["--config", str(cfg)]) as c:
            info = await c.ok("workspace_info", {"workspace_id": WS})
            assert info["execution"]["approvals"] == "confirm"
            assert "cli" in info["execution"]["approval_channels"]
            assert {"approval_create", "approval_resolve", "operation_resume"} <= set(info["tools_exposed"])
            appr = await held(c, "apply_patch", {"workspace_id": WS, "patch": add("x.txt", "x")})
            assert not (root / "x.txt").exists()
            pending = await c.err("operation_resume", {"approval_id": appr})
            assert pending["code"] == "APPROVAL_REQUIRED"
            grant(cfg, appr)
            done = await c.ok("operation_resume", {"approval_id": appr})
            assert done["state"] == "consumed" and done["approval_id"] == appr
            assert done["apply_patch"]["status"] == "applied"
            assert (root / "x.txt").read_text() == "x\n"
            again = await c.ok("operation_resume", {"approval_id": appr})
            assert again["replayed"] is True
            assert again["apply_patch"]["operation_id"] == done["apply_patch"]["operation_id"]
            assert (root / "x.txt").read_text() == "x\n"
            missing = await c.err("operation_resume", {"approval_id": "appr-unknown"})
            assert missing["code"] == "APPROVAL_NOT_FOUND"
            c.assert_no_absolute_paths()

    run(go())


def test_a_file_changed_since_the_hold_fails_the_resume(tmp_path: Path) -> None:
    root, cfg = setup(tmp_path)
    write(root, "a.txt", "one\n")

    async def go() -> None:
        async with serve(tmp_path, ["--config", str(cfg)]) as c:
            patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+two\n*** End Patch\n"
            appr = await held(c, "apply_patch", {"workspace_id": WS, "patch": patch})
            write(root, "a.txt", "one\nchanged outside\n")
            grant(cfg, appr)
            body = await c.err("operation_resume", {"approval_id": appr})
            assert body["code"] in ("VERSION_CONFLICT", "STALE_READ"), body
            assert body["approval_id"] == appr
            assert (root / "a.txt").read_text() == "one\nchanged outside\n"

    run(go())


def test_deny_scrubs_the_held_call(tmp_path: Path) -> None:
    root, cfg = setup(tmp_path, unsandboxed=True)

    async def go() -> None:
        async with serve(tmp_path, ["--config", str(cfg)]) as c:
            appr = await held(c, "exec_command", {"workspace_id": WS, "command": ["touch", "y.txt"]})
            shown = cli(cfg, "show", appr, "--json")
            assert shown.returncode == 0, shown.stderr
            assert json.loads(shown.stdout)["held"]["command"] == ["touch", "y.txt"]
            denied = await c.ok("approval_resolve", {"approval_id": appr, "decision": "deny"})
            assert denied["state"] == "denied"
            shown = json.loads(cli(cfg, "show", appr, "--json").stdout)
            assert shown["state"] == "denied" and shown["held"] is None
            body = await c.err("operation_resume", {"approval_id": appr})
            assert body["code"] == "APPROVAL_CONFLICT"
            assert not (root / "y.txt").exists()

    run(go())


def test_holds_survive_a_restart(tmp_path: Path) -> None:
    root, cfg = setup(tmp_path)
    ids: list[str] = []

    async def first() -> None:
        async with serve(tmp_path, ["--config", str(cfg)]) as c:
            appr = await held(c, "apply_patch", {"workspace_id": WS, "patch": add("r.txt", "r")})
            grant(cfg, appr)
            ids.append(appr)

    async def second() -> None:
        async with serve(tmp_path, ["--config", str(cfg)]) as c:
            done = await c.ok("operation_resume", {"approval_id": ids[0]})
            assert done["apply_patch"]["status"] == "applied"

    run(first())
    assert not (root / "r.txt").exists()
    run(second())
    assert (root / "r.txt").read_text() == "r\n"


def test_an_expired_hold_is_approval_conflict(tmp_path: Path) -> None:
    _root, cfg = setup(tmp_path, ttl_ms=1)

    async def go() -> None:
        async with serve(tmp_path, ["--config", str(cfg)]) as c:
            appr = await held(c, "apply_patch", {"workspace_id": WS, "patch": add("e.txt", "e")})
            # Starting the CLI takes far longer than the 1 ms the hold lives.
            shown = json.loads(cli(cfg, "show", appr, "--json").stdout)
            assert shown["state"] == "expired"
            body = await c.err("approval_resolve", {"approval_id": appr, "decision": "deny"})
            assert body["code"] == "APPROVAL_CONFLICT"

    run(go())


def test_the_cli_grants_while_the_asking_client_cannot(tmp_path: Path) -> None:
    root, cfg = setup(tmp_path)

    async def go() -> None:
        async with serve(tmp_path, ["--config", str(cfg)]) as c:
            appr = await held(c, "apply_patch", {"workspace_id": WS, "patch": add("c.txt", "c")})
            refused = await c.err("approval_resolve", {"approval_id": appr, "decision": "grant"})
            assert refused["code"] == "UNAUTHORIZED"
            assert refused["policy_ids"] == ["base.forbid.self-approval"]
            listed = cli(cfg, "list")
            assert listed.returncode == 0 and appr in listed.stdout, listed
            shown = cli(cfg, "show", appr)
            assert "+c" in shown.stdout and "add c.txt (+1 -0)" in shown.stdout, shown.stdout
            grant(cfg, appr)
            # The running server sees the grant on the next resume; no restart.
            done = await c.ok("operation_resume", {"approval_id": appr})
            assert done["apply_patch"]["status"] == "applied"
            assert (root / "c.txt").read_text() == "c\n"
            again = cli(cfg, "deny", appr)
            assert again.returncode != 0 and "APPROVAL_CONFLICT" in again.stderr

    run(go())


def test_an_elicitation_grant_resumes_the_held_call_in_band(tmp_path: Path) -> None:
    from mcp import ClientSession, StdioServerParameters, types
    from mcp.client.stdio import stdio_client

    root, cfg = setup(tmp_path)
    asked: list[str] = []
    answers = [None, {"decision": "grant"}]  # first decline (hold stays pending), then grant

    async def on_elicit(_ctx: Any, params: Any) -> Any:
        asked.append(params.message)
        answer = answers.pop(0)
        if answer is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content=answer)

    async def go() -> None:
        params = StdioServerParameters(
            command=BIN, args=["serve", "--config", str(cfg)], cwd=str(tmp_path), env={"CODESPACE_LOG": "warn"}
        )
        with open(tmp_path / "server-stderr.log", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write_stream):
                async with ClientSession(read, write_stream, elicitation_callback=on_elicit) as session:
                    await session.initialize()
                    await session.list_tools()
                    c = Client(session, tmp_path)
                    args = {"workspace_id": WS, "patch": add("in-band.txt", "hi")}
                    declined = await c.err("apply_patch", args)
                    assert declined["code"] == "APPROVAL_REQUIRED"
                    assert not (root / "in-band.txt").exists()
                    done = await c.ok("apply_patch", args)
                    assert done["status"] == "applied", done
                    assert (root / "in-band.txt").read_text() == "hi\n"
                    shown = json.loads(cli(cfg, "show", declined["approval_id"], "--json").stdout)
                    assert shown["state"] == "consumed" and shown["channel"] == "elicitation"

    run(go())
    assert len(asked) == 2
    assert "add in-band.txt (+1 -0)" in asked[0], asked
