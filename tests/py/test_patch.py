"""End-to-end tests of `apply_patch` and `operation_status` over stdio with the official MCP SDK.

The binary comes from $CODESPACE_BIN (default: <repo>/target/debug/codespace). Every test builds its
own temporary workspace and `--store` file. Each test checks the files on disk, not only the tool
results; every refused patch must leave the workspace tree byte-identical, and no response may
contain an absolute path of the test's temporary directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, cast

from codespace_helpers import WS, Client, require_binary, run, serve, snapshot, write, write_config

OP_ID = re.compile(r"^op-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
VERSION = re.compile(r"^sha256:[0-9a-f]{64}$")


def setup_module(_module: Any) -> None:
    require_binary()


def patch_text(*body: str) -> str:
    return "*** Begin Patch\n" + "".join(line + "\n" for line in body) + "*** End Patch\n"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def make_workspace(tmp: Path) -> Path:
    root = tmp / "ws"
    root.mkdir()
    write(root, "a.txt", "one\ntwo\nthree\n")
    write(root, "gone.txt", "bye\n")
    write(root, "m.txt", "move me\n")
    write(root, "src/lib.rs", "pub fn f() {}\n")
    write(root, "dir/keep.txt", "keep\n")
    return root


class PatchClient(Client):
    """The shared client, plus: every error body has a string code and message; apply_patch and
    version shorthands; the absolute-path scan requires a non-empty transcript."""

    async def err(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        body = await super().err(tool, args)
        assert isinstance(body.get("code"), str) and isinstance(body.get("message"), str), body
        return body

    async def patch(self, text: str, **kw: Any) -> dict[str, Any]:
        return await self.ok("apply_patch", {"workspace_id": WS, "patch": text, **kw})

    async def patch_err(self, text: str, **kw: Any) -> dict[str, Any]:
        return await self.err("apply_patch", {"workspace_id": WS, "patch": text, **kw})

    async def version(self, path: str) -> str:
        return (await self.ok("read", {"workspace_id": WS, "path": path}))["version"]

    def assert_no_absolute_paths(self) -> None:
        assert self.transcript, "nothing was recorded"
        super().assert_no_absolute_paths()


@asynccontextmanager
async def connect(tmp: Path, root: Path, profile: str = "workspace-write") -> AsyncIterator[PatchClient]:
    cfg = write_config(tmp, root, profile)
    async with serve(tmp, ["--config", str(cfg), "--store", str(tmp / "store.db")], client=PatchClient) as client:
        yield cast(PatchClient, client)


def assert_result_shape(r: dict[str, Any], status: str) -> None:
    assert r["status"] == status, r
    assert OP_ID.match(r["operation_id"]), r["operation_id"]
    assert r["replayed"] is False
    assert None not in r.values()
    for ch in r["changes"]:
        assert None not in ch.values(), "optional fields are left out, never null"
        for field in ("before_version", "after_version"):
            if field in ch:
                assert VERSION.match(ch[field]), ch


# --- success paths -------------------------------------------------------------------------------


def test_add_update_delete_move_in_one_patch(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    os.chmod(root / "m.txt", 0o750)
    text = patch_text(
        "*** Add File: new/deep/n.txt",
        "+hello",
        "+world",
        "*** Update File: a.txt",
        "@@",
        " one",
        "-two",
        "+2",
        " three",
        "*** Delete File: gone.txt",
        "*** Update File: m.txt",
        "*** Move to: moved/m.txt",
        "@@",
        "-move me",
        "+moved",
    )

    async def main() -> None:
        async with connect(tmp_path, root) as c:
            before = {p: await c.version(p) for p in ("a.txt", "gone.txt", "m.txt")}
            r = await c.patch(text)
            assert_result_shape(r, "applied")

            # On disk.
            assert (root / "new/deep/n.txt").read_bytes() == b"hello\nworld\n"
            assert (root / "a.txt").read_bytes() == b"one\n2\nthree\n"
            assert not (root / "gone.txt").exists()
            assert not (root / "m.txt").exists()
            assert (root / "moved/m.txt").read_bytes() == b"moved\n"
            assert stat.S_IMODE((root / "moved/m.txt").stat().st_mode) == 0o750, "a move keeps the mode"
            assert (root / "src/lib.rs").read_text() == "pub fn f() {}\n", "untouched file kept"

            # Result fields.
            assert set(r["files"]) == {"new/deep/n.txt", "a.txt", "gone.txt", "m.txt", "moved/m.txt"}
            by_kind = {ch["kind"]: ch for ch in r["changes"]}
            assert len(r["changes"]) == 4 and set(by_kind) == {"add", "update", "delete", "move"}

            add = by_kind["add"]
            assert add["path"] == "new/deep/n.txt"
            assert "before_version" not in add
            assert add["after_version"] == sha(b"hello\nworld\n")

            upd = by_kind["update"]
            assert upd["path"] == "a.txt"
            assert upd["before_version"] == before["a.txt"] == sha(b"one\ntwo\nthree\n")
            assert upd["after_version"] == sha(b"one\n2\nthree\n")

            dele = by_kind["delete"]
            assert dele["path"] == "gone.txt"
            assert dele["before_version"] == before["gone.txt"]
            assert "after_version" not in dele

            mv = by_kind["move"]
            assert mv["path"] == "moved/m.txt" and mv["from"] == "m.txt"
            assert mv["before_version"] == before["m.txt"]
            assert mv["after_version"] == sha(b"moved\n")

            # after_version is exactly what `read` reports now.
            for ch in (add, upd, mv):
                assert ch["after_version"] == await c.version(ch["path"]), ch["path"]
            gone = await c.err("read", {"workspace_id": WS, "path": "gone.txt"})
            assert gone["code"] == "FILE_NOT_FOUND"
            c.assert_no_absolute_paths()

    run(main())


def test_each_kind_alone_and_chained_versions(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)

    async def main() -> None:
        async with connect(tmp_path, root) as c:
            r = await c.patch(patch_text("*** Add File: solo.txt", "+1"))
            assert_result_shape(r, "applied")
            assert r["files"] == ["solo.txt"]
            assert r["changes"] == [{"path": "solo.txt", "kind": "add", "after_version": sha(b"1\n")}]
            assert (root / "solo.txt").read_bytes() == b"1\n"

            u = await c.patch(patch_text("*** Update File: solo.txt", "@@", "-1", "+2"))
            assert_result_shape(u, "applied")
            assert u["changes"] == [
                {"path": "solo.txt", "kind": "update", "before_version": sha(b"1\n"), "after_version": sha(b"2\n")}
            ]
            # The update's before_version is the add's after_version.
            assert u["changes"][0]["before_version"] == r["changes"][0]["after_version"]
            assert u["operation_id"] != r["operation_id"]
            assert (root / "solo.txt").read_bytes() == b"2\n"

            m = await c.patch(patch_text("*** Update File: solo.txt", "*** Move to: sub/solo.txt"))
            assert_result_shape(m, "applied")
            assert m["changes"] == [
                {
                    "path": "sub/solo.txt",
                    "kind": "move",
                    "from": "solo.txt",
                    "before_version": sha(b"2\n"),
                    "after_version": sha(b"2\n"),
                }
            ]
            assert not (root / "solo.txt").exists()
            assert (root / "sub/solo.txt").read_bytes() == b"2\n"

            d = await c.patch(patch_text("*** Delete File: sub/solo.txt"))
            assert_result_shape(d, "applied")
            assert d["files"] == ["sub/solo.txt"]
            assert d["changes"] == [{"path": "sub/solo.txt", "kind": "delete", "before_version": sha(b"2\n")}]
            assert not (root / "sub/solo.txt").exists()
            c.assert_no_absolute_paths()

    run(main())


def test_line_endings_are_preserved(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    write(root, "crlf.txt", b"alpha\r\nbeta\r\ngamma\r\n")
    write(root, "noeol.txt", b"x\ny")

    async def main() -> None:
        async with connect(tmp_path, root) as c:
            r = await c.patch(
                patch_text(
                    "*** Update File: crlf.txt",
                    "@@",
                    " alpha",
                    "-beta",
                    "+BETA",
                    " gamma",
                )
            )
            assert r["status"] == "applied"
            assert (root / "crlf.txt").read_bytes() == b"alpha\r\nBETA\r\ngamma\r\n"
            assert r["changes"][0]["after_version"] == sha(b"alpha\r\nBETA\r\ngamma\r\n")
            c.assert_no_absolute_paths()

    run(main())


def test_check_only_writes_nothing(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    text = patch_text(
        "*** Add File: new.txt",
        "+n",
        "*** Update File: a.txt",
        "@@",
        "-two",
        "+2",
        "*** Delete File: gone.txt",
        "*** Update File: m.txt",
        "*** Move to: moved/m.txt",
    )

    async def main() -> None:
        async with connect(tmp_path, root) as c:
            before = snapshot(root)
            r = await c.patch(text, check_only=True)
            assert_result_shape(r, "checked")
            assert snapshot(root) == before, "check_only must not write"
            assert not (root / "moved").exists() and not (root / "new.txt").exists()
            kinds = sorted(ch["kind"] for ch in r["changes"])
            assert kinds == ["add", "delete", "move", "update"]
            upd = next(ch for ch in r["changes"] if ch["kind"] == "update")
            assert upd["before_version"] == await c.version("a.txt")
            assert upd["after_version"] == sha(b"one\n2\nthree\n"), "the planned version is reported"
            st = await c.ok("operation_status", {"operation_id": r["operation_id"]})
            assert st["status"] == "checked"
            # A check_only of a failing patch fails the same way as the real apply would.
            body = await c.patch_err(patch_text("*** Delete File: nope.txt"), check_only=True)
            assert body["code"] == "FILE_NOT_FOUND"
            # And the checked patch then applies for real.
            applied = await c.patch(text)
            assert applied["status"] == "applied"
            assert applied["operation_id"] != r["operation_id"]
            assert applied["changes"] == r["changes"]
            assert (root / "a.txt").read_bytes() == b"one\n2\nthree\n"
            c.assert_no_absolute_paths()

    run(main())


# --- expected_versions ---------------------------------------------------------------------------


def test_expected_versions_match_and_mismatch(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    upd = patch_text("*** Update File: a.txt", "@@", "-two", "+2")

    async def main() -> None:
        async with connect(tmp_path, root) as c:
            v1 = await c.version("a.txt")
            # An outside editor changes the file after our read.
            write(root, "a.txt", "one\ntwo\nthree\nfour\n")
            before = snapshot(root)
            body = await c.patch_err(upd, expected_versions={"a.txt": v1})
            assert body["code"] == "VERSION_CONFLICT", body
            assert "a.txt" in body["message"]
            assert OP_ID.match(body.get("operation_id", "")), body
            assert snapshot(root) == before, "a version conflict writes nothing"
            st = await c.ok("operation_status", {"operation_id": body["operation_id"]})
            assert st["status"] == "rejected"
            assert st["events"][-1]["name"] == "finished"
            assert st["events"][-1].get("reason") == "VERSION_CONFLICT"

            # A well-formed version that matches nothing conflicts too.
            body = await c.patch_err(upd, expected_versions={"a.txt": sha(b"something else")})
            assert body["code"] == "VERSION_CONFLICT"
            assert snapshot(root) == before

            # Read again: the current version applies.
            v2 = await c.version("a.txt")
            assert v2 == sha(b"one\ntwo\nthree\nfour\n") and v2 != v1
            r = await c.patch(upd, expected_versions={"a.txt": v2})
            assert r["status"] == "applied"
            assert r["changes"][0]["before_version"] == v2
            assert (root / "a.txt").read_bytes() == b"one\n2\nthree\nfour\n"

            # A path the patch does not touch is checked too.
            keep = await c.version("dir/keep.txt")
            r = await c.patch(
                patch_text("*** Update File: a.txt", "@@", "-2", "+two"),
                expected_versions={"dir/keep.txt": keep},
            )
            assert r["status"] == "applied"
            write(root, "dir/keep.txt", "changed\n")
            before = snapshot(root)
            body = await c.patch_err(
                patch_text("*** Update File: a.txt", "@@", "-two", "+2"),
                expected_versions={"dir/keep.txt": keep},
            )
            assert body["code"] == "VERSION_CONFLICT"
            assert snapshot(root) == before

            # A malformed version is an argument error, nothing written.
            body = await c.patch_err(upd, expected_versions={"a.txt": "v1"})
            assert body["code"] == "INVALID_ARGUMENTS"
            assert snapshot(root) == before
            c.assert_no_absolute_paths()

    run(main())


def test_expected_versions_absent(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)

    async def main() -> None:
        async with connect(tmp_path, root) as c:
            # "absent" on the path an Add creates: applies.
            r = await c.patch(patch_text("*** Add File: fresh.txt", "+f"), expected_versions={"fresh.txt": "absent"})
            assert r["status"] == "applied"
            assert (root / "fresh.txt").read_bytes() == b"f\n"

            # "absent" on an existing file the patch updates: conflict.
            before = snapshot(root)
            body = await c.patch_err(
                patch_text("*** Update File: a.txt", "@@", "-two", "+2"), expected_versions={"a.txt": "absent"}
            )
            assert body["code"] == "VERSION_CONFLICT"
            assert snapshot(root) == before

            # "absent" on an existing file the patch does not touch: conflict.
            body = await c.patch_err(patch_text("*** Add File: other.txt", "+o"), expected_versions={"gone.txt": "absent"})
            assert body["code"] == "VERSION_CONFLICT"
            assert snapshot(root) == before
            assert not (root / "other.txt").exists()

            # A version for a file that does not exist: conflict.
            body = await c.patch_err(
                patch_text("*** Add File: other.txt", "+o"), expected_versions={"nothing.txt": sha(b"x\n")}
            )
            assert body["code"] == "VERSION_CONFLICT"
            assert snapshot(root) == before

            # "absent" on a missing, untouched path, and on the destination of a move: applies.
            r = await c.patch(
                patch_text("*** Update File: m.txt", "*** Move to: mv/m.txt"),
                expected_versions={"nothing.txt": "absent", "mv/m.txt": "absent", "m.txt": await c.version("m.txt")},
            )
            assert r["status"] == "applied"
            assert (root / "mv/m.txt").read_bytes() == b"move me\n"
            assert not (root / "m.txt").exists()

            # After a delete, "absent" holds for the deleted path.
            await c.patch(patch_text("*** Delete File: gone.txt"))
            r = await c.patch(patch_text("*** Add File: gone.txt", "+back"), expected_versions={"gone.txt": "absent"})
            assert r["status"] == "applied"
            assert (root / "gone.txt").read_bytes() == b"back\n"
            c.assert_no_absolute_paths()

    run(main())


# --- operation_key and operation_status ----------------------------------------------------------


def test_operation_key_replays_without_a_second_write(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    add = patch_text("*** Add File: once.txt", "+1")

    async def main() -> None:
        async with connect(tmp_path, root) as c:
            first = await c.patch(add, operation_key="k-once")
            assert_result_shape(first, "applied")
            assert (root / "once.txt").read_bytes() == b"1\n"

            # Remove the file: if the replay wrote again, it would come back.
            (root / "once.txt").unlink()
            before = snapshot(root)
            again = await c.patch(add, operation_key="k-once")
            assert again["replayed"] is True
            assert again["operation_id"] == first["operation_id"]
            assert again["status"] == "applied"
            assert again["files"] == first["files"] and again["changes"] == first["changes"]
            assert snapshot(root) == before, "a replay never writes"

            # An update replayed after an outside edit does not touch the edit either.
            upd = patch_text("*** Update File: a.txt", "@@", "-two", "+2")
            u1 = await c.patch(upd, operation_key="k-upd")
            assert (root / "a.txt").read_bytes() == b"one\n2\nthree\n"
            write(root, "a.txt", "one\ntwo\nthree\n")
            u2 = await c.patch(upd, operation_key="k-upd")
            assert u2["replayed"] is True and u2["operation_id"] == u1["operation_id"]
            assert (root / "a.txt").read_bytes() == b"one\ntwo\nthree\n", "no second write"

            # A key reused with a different request conflicts and writes nothing.
            before = snapshot(root)
            other = patch_text("*** Add File: other.txt", "+2")
            body = await c.patch_err(other, operation_key="k-once")
            assert body["code"] == "OPERATION_KEY_CONFLICT", body
            assert body.get("operation_id") == first["operation_id"]
            # check_only is part of the request too.
            body = await c.patch_err(add, operation_key="k-once", check_only=True)
            assert body["code"] == "OPERATION_KEY_CONFLICT"
            body = await c.patch_err(add, operation_key="k-once", expected_versions={"once.txt": "absent"})
            assert body["code"] == "OPERATION_KEY_CONFLICT"
            assert snapshot(root) == before

            # A failed operation replays its failure, never re-applies.
            bad = patch_text("*** Delete File: missing.txt")
            b1 = await c.patch_err(bad, operation_key="k-bad")
            assert b1["code"] == "FILE_NOT_FOUND"
            write(root, "missing.txt", "now here\n")
            before = snapshot(root)
            res = await c.call("apply_patch", {"workspace_id": WS, "patch": bad, "operation_key": "k-bad"})
            payload = res.structured_content if not res.is_error else json.loads(res.content[0].text)
            assert payload.get("operation_id") == b1["operation_id"]
            if not res.is_error:
                # Replayed as the stored outcome: rejected, nothing touched.
                assert payload["replayed"] is True and payload["status"] == "rejected", payload
                assert payload["changes"] == []
            else:
                assert payload["code"] == "FILE_NOT_FOUND", payload
            assert snapshot(root) == before, "a replayed failure never applies"
            c.assert_no_absolute_paths()

    run(main())


def test_operation_status_by_id_and_by_key(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)

    async def main() -> None:
        async with connect(tmp_path, root) as c:
            r = await c.patch(
                patch_text("*** Update File: a.txt", "@@", "-two", "+2", "*** Add File: b.txt", "+b"),
                operation_key="k-status",
            )
            by_id = await c.ok("operation_status", {"operation_id": r["operation_id"]})
            by_key = await c.ok("operation_status", {"operation_key": "k-status"})
            for st in (by_id, by_key):
                assert st["operation_id"] == r["operation_id"]
                assert st["status"] == "applied"
                assert st["kind"] == "patch"
                assert st["workspace_id"] == WS
                assert isinstance(st["created_at"], int) and isinstance(st["finished_at"], int)
                assert st["finished_at"] >= st["created_at"]
                assert st["changes"] == r["changes"]
                assert sorted(st["files"]) == sorted(r["files"])
                names = [e["name"] for e in st["events"]]
                assert names == ["minted", "finished"], st["events"]
                assert st["events"][1]["status"] == "applied"
                for e in st["events"]:
                    assert isinstance(e["at"], str) and e["at"]
            assert by_id == by_key

            # A failed patch is recorded as rejected with its error code.
            body = await c.patch_err(patch_text("*** Update File: a.txt", "@@", "-no such line", "+x"))
            assert body["code"] == "INVALID_PATCH"
            st = await c.ok("operation_status", {"operation_id": body["operation_id"]})
            assert st["status"] == "rejected"
            assert [e["name"] for e in st["events"]] == ["minted", "finished"]
            assert st["events"][1]["status"] == "rejected"
            assert st["events"][1]["reason"] == "INVALID_PATCH"
            assert st["error"]["code"] == "INVALID_PATCH"

            # OPERATION_NOT_FOUND: unknown id, unknown key, neither, both.
            for args in (
                {"operation_id": "op-00000000-0000-0000-0000-000000000000"},
                {"operation_id": "nonsense"},
                {"operation_key": "never-used"},
                {},
                {"operation_id": r["operation_id"], "operation_key": "k-status"},
            ):
                body = await c.err("operation_status", args)
                assert body["code"] == "OPERATION_NOT_FOUND", (args, body)
            c.assert_no_absolute_paths()

    run(main())


# --- error codes ---------------------------------------------------------------------------------


def test_every_error_code_of_apply_patch_leaves_the_tree_unchanged(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    (root / "link.txt").symlink_to("a.txt")
    (root / "dir-link").symlink_to("dir")
    (root / "dangling").symlink_to("nowhere.txt")
    os.mkfifo(root / "pipe")
    inside_abs = str(root / "abs.txt")

    P = patch_text
    cases: list[tuple[str, str, str]] = [
        # INVALID_PATCH
        ("garbage", "this is not a patch\n", "INVALID_PATCH"),
        ("empty string", "", "INVALID_PATCH"),
        ("empty patch", P(), "INVALID_PATCH"),
        ("no end marker", "*** Begin Patch\n*** Add File: x.txt\n+x\n", "INVALID_PATCH"),
        ("context not found", P("*** Update File: a.txt", "@@", "-no such line", "+x"), "INVALID_PATCH"),
        ("duplicate add", P("*** Add File: d.txt", "+1", "*** Add File: d.txt", "+2"), "INVALID_PATCH"),
        ("duplicate update", P("*** Update File: a.txt", "@@", "-one", "+1", "*** Delete File: a.txt"), "INVALID_PATCH"),
        # FILE_NOT_FOUND
        ("update missing", P("*** Update File: missing.txt", "@@", "-a", "+b"), "FILE_NOT_FOUND"),
        ("delete missing", P("*** Delete File: missing.txt"), "FILE_NOT_FOUND"),
        ("move missing", P("*** Update File: missing.txt", "*** Move to: there.txt"), "FILE_NOT_FOUND"),
        # ADD_FILE_EXISTS
        ("add existing", P("*** Add File: a.txt", "+x"), "ADD_FILE_EXISTS"),
        # MOVE_DESTINATION_EXISTS
        ("move onto file", P("*** Update File: m.txt", "*** Move to: a.txt"), "MOVE_DESTINATION_EXISTS"),
        ("move onto dir", P("*** Update File: m.txt", "*** Move to: dir", "@@", "-move me", "+x"), "MOVE_DESTINATION_EXISTS"),
        # SYMLINK_REJECTED
        ("update symlink", P("*** Update File: link.txt", "@@", "-one", "+1"), "SYMLINK_REJECTED"),
        ("delete symlink", P("*** Delete File: link.txt"), "SYMLINK_REJECTED"),
        ("add through symlinked dir", P("*** Add File: dir-link/new.txt", "+x"), "SYMLINK_REJECTED"),
        ("update through symlinked dir", P("*** Update File: dir-link/keep.txt", "@@", "-keep", "+k"), "SYMLINK_REJECTED"),
        ("add onto dangling symlink", P("*** Add File: dangling", "+x"), "SYMLINK_REJECTED"),
        # SPECIAL_FILE_REJECTED
        ("update fifo", P("*** Update File: pipe", "@@", "-x", "+y"), "SPECIAL_FILE_REJECTED"),
        # PATH_ESCAPE
        ("dotdot add", P("*** Add File: ../escape.txt", "+x"), "PATH_ESCAPE"),
        ("dotdot inside", P("*** Add File: dir/../../escape.txt", "+x"), "PATH_ESCAPE"),
        ("dotdot move", P("*** Update File: m.txt", "*** Move to: ../escape.txt"), "PATH_ESCAPE"),
        ("absolute add", P("*** Add File: /tmp/codespace-abs-escape.txt", "+x"), "PATH_ESCAPE"),
        ("absolute delete", P("*** Delete File: /etc/hostname"), "PATH_ESCAPE"),
        ("absolute inside root", P(f"*** Add File: {inside_abs}", "+x"), "PATH_ESCAPE"),
        # UNAUTHORIZED
        ("git hooks", P("*** Add File: .git/hooks/pre-commit", "+#!/bin/sh"), "UNAUTHORIZED"),
        ("nested git hooks", P("*** Add File: vendor/x/.git/hooks/post-checkout", "+x"), "UNAUTHORIZED"),
        ("move into git hooks", P("*** Update File: m.txt", "*** Move to: .git/hooks/pre-push"), "UNAUTHORIZED"),
        # All or nothing: an earlier valid hunk is not applied when a later one fails.
        (
            "valid then failing hunk",
            P("*** Add File: first.txt", "+1", "*** Update File: a.txt", "@@", "-two", "+2", "*** Delete File: missing.txt"),
            "FILE_NOT_FOUND",
        ),
    ]

    async def main() -> None:
        async with connect(tmp_path, root) as c:
            before = snapshot(root)
            outside_before = sorted(p.name for p in tmp_path.iterdir())
            got: list[tuple[str, str]] = []
            for name, text, _want in cases:
                body = await c.patch_err(text)
                got.append((name, body["code"]))
                assert snapshot(root) == before, f"{name}: the tree changed after a refused patch"
                if body["code"] == "UNAUTHORIZED":
                    assert body.get("decision_id"), body
                    assert body.get("policy_ids") == ["base.forbid.git-metadata-write"], body
                # check_only fails identically and writes nothing either.
                checked = await c.patch_err(text, check_only=True)
                assert checked["code"] == body["code"], name
                assert snapshot(root) == before, f"{name} (check_only): the tree changed"
            assert got == [(n, w) for n, _t, w in cases]
            assert sorted(p.name for p in tmp_path.iterdir()) == outside_before, "nothing escaped the root"
            assert not Path("/tmp/codespace-abs-escape.txt").exists()
            assert not (root / ".git").exists()
            c.assert_no_absolute_paths()

    run(main())


def test_invalid_arguments_and_unknown_workspace(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)

    async def main() -> None:
        async with connect(tmp_path, root) as c:
            before = snapshot(root)
            body = await c.err("apply_patch", {"workspace_id": WS})
            assert body["code"] == "INVALID_ARGUMENTS"
            assert "patch" in body["message"], "INVALID_ARGUMENTS names the field"
            body = await c.err("apply_patch", {"workspace_id": WS, "patch": 42})
            assert body["code"] == "INVALID_ARGUMENTS"
            body = await c.err("apply_patch", {"workspace_id": WS, "patch": patch_text("*** Add File: x.txt", "+x"),
                                               "check_only": "yes"})
            assert body["code"] == "INVALID_ARGUMENTS"
            body = await c.err("apply_patch", {"workspace_id": WS, "patch": patch_text("*** Add File: x.txt", "+x"),
                                               "expected_versions": ["x.txt"]})
            assert body["code"] == "INVALID_ARGUMENTS"
            body = await c.err("apply_patch", {"patch": patch_text("*** Add File: x.txt", "+x")})
            assert body["code"] == "INVALID_ARGUMENTS"
            assert "workspace_id" in body["message"]
            body = await c.err("apply_patch", {"workspace_id": "nope", "patch": patch_text("*** Add File: x.txt", "+x")})
            assert body["code"] == "WORKSPACE_NOT_FOUND"
            assert snapshot(root) == before
            # The session keeps serving.
            r = await c.patch(patch_text("*** Add File: x.txt", "+x"))
            assert r["status"] == "applied" and (root / "x.txt").read_bytes() == b"x\n"
            c.assert_no_absolute_paths()

    run(main())


def test_read_only_config_denies_every_write(tmp_path: Path) -> None:
    root = make_workspace(tmp_path)
    P = patch_text
    writes = [
        P("*** Add File: new.txt", "+x"),
        P("*** Update File: a.txt", "@@", "-two", "+2"),
        P("*** Delete File: gone.txt"),
        P("*** Update File: m.txt", "*** Move to: moved.txt"),
        P("*** Add File: src/extra.rs", "+x", "*** Update File: a.txt", "@@", "-one", "+1"),
    ]

    async def main() -> None:
        async with connect(tmp_path, root, profile="read-only") as c:
            info = await c.ok("workspace_info", {"workspace_id": WS})
            assert info["profile"] == "read-only"
            assert info["execution"]["permissions"]["write"] is False
            before = snapshot(root)
            for text in writes:
                body = await c.patch_err(text)
                assert body["code"] == "UNAUTHORIZED", (text, body)
                assert body.get("decision_id"), body
                assert snapshot(root) == before, text
                # With an operation_key and expected_versions, still denied and nothing written.
                body = await c.patch_err(text, operation_key="ro-key", expected_versions={"a.txt": "absent"})
                assert body["code"] == "UNAUTHORIZED"
                assert snapshot(root) == before, text
            # Denied calls mint no operation.
            body = await c.err("operation_status", {"operation_key": "ro-key"})
            assert body["code"] == "OPERATION_NOT_FOUND"
            # Reads still work.
            r = await c.ok("read", {"workspace_id": WS, "path": "a.txt"})
            assert r["content"] == "one\ntwo\nthree\n"
            c.assert_no_absolute_paths()

    run(main())
