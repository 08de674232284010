"""The file toolkit (issue 31) through the official MCP SDK over stdio: an image `read` is a
valid result (the SDK checks structuredContent against the read tool's outputSchema) whose
content holds an `ImageContent` item with the file's bytes; another binary file is BINARY_FILE.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

from mcp.types import ImageContent, TextContent

from codespace_helpers import WS, require_binary, run, serve, write, write_config


def setup_module(_module: Any) -> None:
    require_binary()


def png_1x1() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00\xff")) + chunk(b"IEND", b""))


def test_an_image_read_is_image_content(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    png = png_1x1()
    write(root, "dot.png", png)
    write(root, "blob.bin", b"\x00\x01binary\x00")
    cfg = write_config(tmp_path, root, "read-only")

    async def main() -> None:
        async with serve(tmp_path, ["--config", str(cfg), "--store", str(tmp_path / "store.db")]) as c:
            res = await c.call("read", {"workspace_id": WS, "path": "dot.png"})
            assert not res.is_error, res
            assert isinstance(res.content[0], TextContent)
            assert json.loads(res.content[0].text) == res.structured_content
            images = [b for b in res.content if isinstance(b, ImageContent)]
            assert len(images) == 1, res.content
            assert images[0].mime_type == "image/png"
            assert base64.b64decode(images[0].data) == png
            assert res.structured_content["mime_type"] == "image/png"
            assert res.structured_content["byte_count"] == len(png)
            body = await c.err("read", {"workspace_id": WS, "path": "blob.bin"})
            assert body["code"] == "BINARY_FILE", body
            assert "9 bytes" in body["message"], body
            c.assert_no_absolute_paths()

    run(main())
