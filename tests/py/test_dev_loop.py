"""The dev loop with the official Python MCP SDK over stdio: progress notifications arrive while
a long poll waits (the request carries a progress token), and the extra fields of #10
(terminate_process's final state, read_process's max_bytes/tail, stderr separate) validate
against the tools' output schemas."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from codespace_helpers import require_binary, serve, skip_missing

TIMEOUT = 30.0


def setup_module(_module: Any) -> None:
    require_binary()


def config(tmp: Path) -> Path:
    root = tmp / "ws"
    root.mkdir(exist_ok=True)
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps({
        "workspaces": {"w": {"root": str(root)}},
        "store": str(tmp / "store.db"),
    }))
    return cfg


def test_progress_notifications_arrive_while_a_long_poll_waits(tmp_path: Path) -> None:
    async def main() -> None:
        async with serve(tmp_path, ["--config", str(config(tmp_path))], mirrored=False) as c:
            info = await c.ok("workspace_info", {"workspace_id": "w"})
            if info["execution"]["isolation"]["command_sandbox"] != "linux-sandbox":
                skip_missing("test_progress_notifications_arrive_while_a_long_poll_waits",
                             "the command sandbox is unavailable here")
                return
            r = await c.ok("exec_command", {"workspace_id": "w", "background": True,
                                            "command": ["sh", "-c", "sleep 2; echo done"]})
            pid = r["process_id"]
            seen: list[float] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                seen.append(progress)

            res = await asyncio.wait_for(
                c.session.call_tool("read_process",
                                    {"process_id": pid, "cursor": 0, "wait_ms": 20_000},
                                    progress_callback=on_progress),
                TIMEOUT)
            assert not res.is_error, res
            assert res.structured_content["chunk"] == "done\n", res.structured_content
            assert len(seen) >= 2, f"progress notifications while waiting: {seen}"
            assert seen == sorted(seen), seen
            t = await c.ok("terminate_process", {"process_id": pid})
            assert t["state"] == "exited", t

    asyncio.run(main())


def test_new_process_fields_validate_against_the_output_schemas(tmp_path: Path) -> None:
    async def main() -> None:
        async with serve(tmp_path, ["--config", str(config(tmp_path))], mirrored=False) as c:
            info = await c.ok("workspace_info", {"workspace_id": "w"})
            if info["execution"]["isolation"]["command_sandbox"] != "linux-sandbox":
                skip_missing("test_new_process_fields_validate_against_the_output_schemas",
                             "the command sandbox is unavailable here")
                return
            assert info["execution"]["capabilities"]["exec"]["decision"] in ("allowed", "conditional")
            r = await c.ok("exec_command", {"workspace_id": "w", "stderr": "separate",
                                            "yield_ms": 20_000, "cwd": ".",
                                            "env": {"GREETING": "hi"},
                                            "command": ["sh", "-c", "echo $GREETING; echo err >&2"]})
            assert r["state"] == "exited", r
            pid = r["process_id"]
            x = await c.ok("read_process", {"process_id": pid, "cursor": 0, "stderr_cursor": 0,
                                            "max_bytes": 2})
            assert (x["chunk"], x["stderr_chunk"]) == ("hi", "er"), x
            x = await c.ok("read_process", {"process_id": pid, "tail": True, "max_bytes": 3})
            assert x["chunk"] == "hi\n", x
            s = await c.ok("exec_command", {"workspace_id": "w", "command": ["sleep", "60"]})
            t = await c.ok("terminate_process", {"process_id": s["process_id"]})
            assert (t["state"], t["termination"]) == ("exited", "terminated"), t
            body = await c.err("exec_command", {"workspace_id": "w", "command": ["true"],
                                                "env": {"LD_PRELOAD": "x"}})
            assert body["code"] == "UNAUTHORIZED"
            assert body["policy_ids"] == ["base.forbid.exec-env-hooks"], body

    asyncio.run(main())
