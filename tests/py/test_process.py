"""End-to-end tests of the process tools over stdio with the official Python MCP SDK.

The binary comes from $CODESPACE_BIN (default: <repo>/target/debug/codespace). The SDK validates
every structuredContent against the tool's outputSchema, so these tests also check the schemas.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, cast

from codespace_helpers import Client, require_binary, serve

CALL_TIMEOUT = 30.0


def setup_module(_module: Any) -> None:
    require_binary()


class ProcessClient(Client):
    """The shared client (without the text-mirror checks), plus bounded polling of a process."""

    async def read_until(self, pid: str, needle: str, cursor: int = 0) -> tuple[str, int]:
        out = ""
        deadline = time.monotonic() + 20
        while needle not in out:
            assert time.monotonic() < deadline, f"{needle!r} never appeared in {out!r}"
            r = await self.ok("read_process", {"process_id": pid, "cursor": cursor, "wait_ms": 1000})
            out += r["chunk"]
            cursor = r["cursor"]
        return out, cursor

    async def wait_exited(self, pid: str) -> dict[str, Any]:
        deadline = time.monotonic() + 20
        while True:
            s = await self.ok("process_status", {"process_id": pid})
            if s["state"] == "exited":
                return s
            assert time.monotonic() < deadline, s
            await self.ok("read_process", {"process_id": pid, "cursor": s["output_total"], "wait_ms": 200})


@asynccontextmanager
async def connect(tmp: Path, sandbox: str = "required") -> AsyncIterator[ProcessClient]:
    root = tmp / "ws"
    root.mkdir(exist_ok=True)
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps({
        "workspaces": {"w": {"root": str(root), "sandbox": sandbox}},
        "store": str(tmp / "store.db"),
    }))
    async with serve(tmp, ["--config", str(cfg)], client=ProcessClient, timeout=CALL_TIMEOUT,
                     mirrored=False) as client:
        yield cast(ProcessClient, client)


async def sandboxed(tmp: Path) -> bool:
    """Whether exec works on a restricted workspace here (the sandbox is enforceable)."""
    async with connect(tmp / "probe") as c:
        info = await c.ok("workspace_info", {"workspace_id": "w"})
        return info["execution"]["isolation"]["command_sandbox"] == "linux-sandbox"


def sandbox_for(tmp: Path) -> str:
    """`required` where the sandbox is enforceable, else `off` (the guardrail refuses exec)."""
    (tmp / "probe").mkdir()
    return "required" if asyncio.run(sandboxed(tmp)) else "off"


def test_exec_read_write_resize_terminate(tmp_path: Path) -> None:
    sandbox = sandbox_for(tmp_path)

    async def main() -> None:
        async with connect(tmp_path, sandbox) as c:
            info = await c.ok("workspace_info", {"workspace_id": "w"})
            proc = info["execution"]["process"]
            assert proc["available"] is True
            assert proc["capabilities"]["lifetime"]["gateway_shutdown"] == "terminate"

            r = await c.ok("exec_command", {"workspace_id": "w", "command": ["echo", "hi"], "yield_ms": 10000})
            assert r["dispatch_status"] == "confirmed" and r["process_id"].startswith("proc-")
            assert (r["chunk"], r["state"], r["exit_code"]) == ("hi\n", "exited", 0)

            r = await c.ok("exec_command", {"workspace_id": "w", "command": ["bash", "--norc", "--noprofile"]})
            pid = r["process_id"]
            busy = await c.err("exec_command", {"workspace_id": "w", "command": ["true"]})
            assert busy["code"] == "WORKSPACE_BUSY"
            assert (await c.ok("write_stdin", {"process_id": pid, "data": "echo $((20+22))\n"}))["ok"] is True
            await c.read_until(pid, "42\n")
            await c.ok("write_stdin", {"process_id": pid, "data": "exit 5\n"})
            s = await c.wait_exited(pid)
            assert (s["exit_code"], s["termination"]) == (5, "exited")
            assert (await c.err("process_resize", {"process_id": pid, "rows": 5, "cols": 5}))["code"] == "PROCESS_NOT_TTY"

            deadline = time.monotonic() + 10
            while True:
                res = await c.call("exec_command", {"workspace_id": "w", "tty": True,
                                                    "command": ["bash", "--norc", "--noprofile", "-i"]})
                if not res.is_error or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            assert not res.is_error, res.content[0].text
            tty = res.structured_content["process_id"]
            await c.ok("write_stdin", {"process_id": tty, "data": "stty size\n"})
            _, cur = await c.read_until(tty, "24 80")
            assert await c.ok("process_resize", {"process_id": tty, "rows": 33, "cols": 101}) == \
                {"ok": True, "rows": 33, "cols": 101}
            await c.ok("write_stdin", {"process_id": tty, "data": "stty size\n"})
            await c.read_until(tty, "33 101", cur)
            assert (await c.ok("terminate_process", {"process_id": tty}))["ok"] is True
            s = await c.wait_exited(tty)
            assert s["termination"] == "terminated"
            assert (await c.err("read_process", {"process_id": "proc-unknown"}))["code"] == "PROCESS_NOT_FOUND"
            c.assert_no_absolute_paths()

    asyncio.run(main())


def test_operation_key_replay_and_shutdown_kills_processes(tmp_path: Path) -> None:
    sandbox = sandbox_for(tmp_path)
    pids: list[int] = []

    async def main() -> None:
        async with connect(tmp_path, sandbox) as c:
            args = {"workspace_id": "w", "command": ["sh", "-c", "sleep 1000 & echo $$ $!; wait"],
                    "operation_key": "py-key-1"}
            first = await c.ok("exec_command", args)
            second = await c.ok("exec_command", args)
            assert second["replayed"] is True and second["process_id"] == first["process_id"]
            out, _ = await c.read_until(first["process_id"], "\n")
            pids.extend(int(p) for p in out.split())
            for p in pids:
                assert Path(f"/proc/{p}").exists()

    asyncio.run(main())
    # The SDK closed stdin; the server must have killed both processes on its way out.
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if Path(f"/proc/{p}").exists() and
                 Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")]
        time.sleep(0.05)
    assert not alive, f"processes survived the server: {alive}"


def test_sandbox_blocks_writes_outside_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "probe").mkdir()
    if not asyncio.run(sandboxed(tmp_path)):
        print("SKIP: the command sandbox is unavailable on this kernel")
        return
    outside = tmp_path / "outside.txt"

    async def main() -> None:
        async with connect(tmp_path) as c:
            r = await c.ok("exec_command", {"workspace_id": "w", "yield_ms": 10000, "command": [
                "sh", "-c", f"echo in > inside.txt; echo out > {outside}; echo done"]})
            assert r["state"] == "exited" and r["exit_code"] == 0, r
            assert "Permission denied" in r["chunk"], r["chunk"]
            read = await c.ok("read", {"workspace_id": "w", "path": "inside.txt"})
            assert read["content"] == "in\n"

    asyncio.run(main())
    assert not outside.exists()
