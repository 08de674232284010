"""Operator skills (issue 31) through the official MCP SDK over stdio: with `skills_dir`
configured, the SDK's typed models accept the server's `resources/list` (the skill files as
`skill://` resources), `resources/read` of a `SKILL.md`, `prompts/list` and `prompts/get` (the
body as a user message); a symlinked skill is never listed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mcp.types import TextContent, TextResourceContents

from codespace_helpers import WS, require_binary, run, serve, write

SKILL_MD = "---\nname: release-notes\ndescription: Write release notes\n---\n\nList the changes.\n"


def setup_module(_module: Any) -> None:
    require_binary()


def test_skills_are_sdk_valid_resources_and_prompts(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    skills = tmp_path / "skills"
    write(skills, "release-notes/SKILL.md", SKILL_MD)
    write(tmp_path, "outside/leak/SKILL.md", "---\nname: leak\ndescription: x\n---\nSECRET\n")
    os.symlink(tmp_path / "outside/leak", skills / "leak")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({
        "workspaces": {WS: {"root": str(root), "profile": "read-only"}},
        "skills_dir": str(skills),
    }))

    async def main() -> None:
        async with serve(tmp_path, ["--config", str(cfg), "--store", str(tmp_path / "store.db")]) as c:
            caps = c.init.capabilities
            assert caps.prompts is not None
            listed = await c.session.list_resources()
            uris = [str(r.uri) for r in listed.resources]
            assert uris == ["skill://release-notes/SKILL.md"], uris
            assert listed.resources[0].mime_type == "text/markdown"
            read = await c.session.read_resource("skill://release-notes/SKILL.md")
            assert isinstance(read.contents[0], TextResourceContents)
            assert read.contents[0].text == SKILL_MD
            prompts = await c.session.list_prompts()
            assert [p.name for p in prompts.prompts] == ["release-notes"]
            assert prompts.prompts[0].description == "Write release notes"
            got = await c.session.get_prompt("release-notes")
            assert got.messages[0].role == "user"
            assert isinstance(got.messages[0].content, TextContent)
            assert got.messages[0].content.text == "List the changes.\n"

    run(main())
