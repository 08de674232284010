"""`codespace audit --format ocsf` validated with a published OCSF validator: every event a run
produces (allowed and denied reads, an applied patch, a refused patch) parses as OCSF 1.5.0 API
Activity (class 6003) with the `pydantic-ocsf` models (PyPI; the OCSF schema bundled in the
package, no network), and carries no top-level attribute outside that class and the
`security_control` profile it declares. The OTLP log bodies are the same events (one function,
engine/src/telemetry/ocsf.rs; mcp/tests/it/telemetry.rs decodes them).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from codespace_helpers import BIN, WS, require_binary, run, serve, write

from ocsf.v1_5_0.events import ApiActivity

# The attributes of the `security_control` profile the events declare in metadata.profiles
# (the class model covers the class and base-event attributes only).
SECURITY_CONTROL = {"action", "action_id", "disposition", "disposition_id"}


def setup_module(_module: Any) -> None:
    require_binary()


def test_every_audit_event_validates_as_ocsf_api_activity(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    write(root, "a.txt", "hello\n")
    store = tmp_path / "store.db"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({
        "workspaces": {
            WS: {"root": str(root), "profile": "workspace-write"},
            "ro": {"root": str(root), "profile": "read-only"},
        },
        "store": str(store),
    }))
    patch = "*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch\n"

    async def main() -> None:
        async with serve(tmp_path, ["--config", str(cfg)]) as c:
            await c.ok("read", {"workspace_id": WS, "path": "a.txt"})
            await c.ok("find", {"workspace_id": WS})
            await c.ok("apply_patch", {"workspace_id": WS, "patch": patch})
            await c.err("apply_patch", {"workspace_id": "ro", "patch": patch})
            await c.ok("workspace_info", {"workspace_id": "ro"})

    run(main())
    out = subprocess.run(
        [BIN, "audit", "--store", str(store), "--format", "ocsf"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    events = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert len(events) >= 5, out.stdout
    allowed = set(ApiActivity.model_fields) | SECURITY_CONTROL
    for ev in events:
        ApiActivity.model_validate(ev)
        extra = set(ev) - allowed
        assert not extra, f"attributes outside API Activity: {extra} in {ev}"
        assert ev["metadata"]["version"] == "1.5.0"
        assert ev["metadata"]["profiles"] == ["security_control"]
        assert ev["class_uid"] == 6003 and ev["type_uid"] == 600300 + ev["activity_id"]
    ops = {(e["api"]["operation"], e["action"]) for e in events}
    assert ("read", "Allowed") in ops, ops
    assert ("apply_patch", "Allowed") in ops, ops
    assert ("apply_patch", "Denied") in ops, ops
