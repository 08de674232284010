#!/usr/bin/env python3
"""Sandboxed exec start (issue 34, "Exec start"), run by hand, not in CI's pass/fail path.

Through the real server over stdio (raw JSON-RPC): the round trip of `exec_command ["true"]`
with `yield_ms` in a workspace whose commands are sandboxed and masked (a `.env` the shipped
policy withholds is masked), against a plain fork+exec of `true` from this script's own loop in
the same run (interleaved rounds), as a ratio. Then the per-step breakdown of the same call: with
`CODESPACE_SANDBOX_STEPS=1` in the workspace's env the helper prints the CLOCK_MONOTONIC time at
which each of its steps ended (runner/sandbox/src/steps.rs), after the process table's two
(before the cgroup, before the fork: runner/process/src/steps.rs); this script stamps the
request's send and the reply's arrival on the same clock. Last, the cost of exec'ing the helper binary
alone (it refuses at once: no plan), for the `codespace` binary and the dedicated
`codespace-sandbox-helper` beside it (and its static build, `codespace-sandbox-helper-static`,
which the servers above prefer when it is there: scripts/build-static-helper.sh). Figures and their reading: docs/security.md, "Cost of a
command's start".

Usage: scripts/bench-exec-start.py [--iters N] [--rounds R] [--binary PATH]
Default binary: $CARGO_TARGET_DIR/debug/codespace (build it first:
`cargo build --workspace --all-targets --features codespace-mcp/test-hooks`).
Six servers of that build run side by side, each given blocks of consecutive calls in turn, so
that what a server does in the background after a call lands in its own next call
(`--interleave`: one call each in turn, as before): the binary in place (the dedicated
`codespace-sandbox-helper` beside it, a warm spare of it started ahead for the next command, each
command's exit watched by a pidfd on the reactor), the same with `CODESPACE_SANDBOX_SPARE=0` (each
helper started with `posix_spawn` at its command's start), with `CODESPACE_EXIT_WATCH=thread` (a
thread per process blocked in `waitid`), with both (the start before those two cuts), the same with
`CODESPACE_SANDBOX_SPAWN=fork` (the server forked for each helper, as before that cut), and a hard
link of it alone in a directory of its own (no helper beside it: the self-exec fallback, i.e. the
start before the dedicated helper existed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stdio import Server  # noqa: E402  (the shared raw-stdio client, beside this script)

REPO = Path(__file__).resolve().parents[1]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
STEPS_PREFIX = "codespace-sandbox-steps:"
# What each mark ends (the time since the previous mark).
LABELS = {
    "server": "server: JSON-RPC, decisions, masks, plan",
    "cgroup": "server: the process's cgroup",
    "start": "fork + helper exec/load",
    "spare": "hand-over to the warm spare",
    "plan": "plan decode",
    "seccomp_build": "seccomp compile",
    "landlock_probe": "Landlock ABI probe",
    "session": "no_new_privs + setsid",
    "netns": "network namespace",
    "mounts": "mount namespace + masks",
    "caps": "capabilities dropped",
    "landlock": "Landlock ruleset",
    "seccomp_load": "seccomp load",
}


def exec_true(s: Server, ws: str, argv: list[str] | None = None) -> tuple[int, int, dict]:
    """(send ns, reply ns, result) of one exec_command with yield_ms; retries WORKSPACE_BUSY
    (the previous command's lease is released just after its exit is reported)."""
    while True:
        t0 = time.monotonic_ns()
        try:
            r = s.tool("exec_command", {"workspace_id": ws, "command": argv or ["true"], "yield_ms": 10000})
            t1 = time.monotonic_ns()
            return t0, t1, r
        except RuntimeError as e:
            if "WORKSPACE_BUSY" not in str(e):
                raise
            time.sleep(0.002)


def raw_true() -> int:
    t = time.monotonic_ns()
    subprocess.run(["true"], check=True)
    return time.monotonic_ns() - t


def ms(ns: float) -> str:
    return f"{ns / 1e6:.2f}"


def steps_of(chunk: str) -> list[tuple[str, int]]:
    for line in chunk.splitlines():
        if line.startswith(STEPS_PREFIX):
            out = []
            for item in line[len(STEPS_PREFIX):].split():
                name, _, value = item.partition("=")
                out.append((name, int(value)))
            return out
    raise RuntimeError(f"no step line in the output: {chunk!r}")


def helper_alone(program: list[str], iters: int) -> float:
    times = []
    for _ in range(iters):
        t = time.monotonic_ns()
        subprocess.run(program, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.monotonic_ns() - t)
    return statistics.median(times)


def alone_copy(binary: Path, tmp: str) -> Path:
    """The binary in a directory of its own (hard link, else a copy): no dedicated helper beside
    it, so its server falls back to exec'ing itself as the helper (the figures before the cut)."""
    d = Path(tmp) / "alone"
    d.mkdir()
    out = d / binary.name
    try:
        os.link(binary, out)
    except OSError:
        subprocess.run(["cp", str(binary), str(out)], check=True)
    return out


def start_server(binary: Path, tmp: str, label: str, env: dict[str, str] | None = None) -> tuple[Server, dict]:
    base = Path(tmp) / ("srv-" + label.replace(" ", "-").replace(",", ""))
    base.mkdir()
    roots = {}
    for ws in ("w", "s"):
        root = base / ws
        root.mkdir()
        (root / ".env").write_text("SECRET=1\n")
        (root / "README").write_text("x\n")
        roots[ws] = root
    cfg = base / "config.json"
    cfg.write_text(json.dumps({
        "workspaces": {"w": {"root": str(roots["w"])},
                       "s": {"root": str(roots["s"]), "env": {"CODESPACE_SANDBOX_STEPS": "1"}}},
        "store": str(base / "store.db")}))
    s = Server([str(binary), "serve", "--config", str(cfg)], "bench-exec-start", env)
    info = s.tool("workspace_info", {"workspace_id": "w"})
    iso = info["execution"]["isolation"]
    _, _, r = exec_true(s, "w", ["sh", "-c", "wc -c < .env"])
    iso["masked"] = (r.get("chunk") or "").strip() == "0"
    return s, iso


# The pause before each server's block of calls (not a synchronization: a benchmark's spacing).
BLOCK_PAUSE_S = 0.05


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=60, help="calls per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--binary", type=Path, default=TARGET / "debug" / "codespace")
    ap.add_argument("--interleave", action="store_true",
                    help="one call per server in turn (a server's background work after a call then "
                         "lands in the next server's call) instead of blocks of consecutive calls")
    a = ap.parse_args()
    binary = a.binary.resolve()
    dedicated = binary.parent / "codespace-sandbox-helper"
    with tempfile.TemporaryDirectory(dir=binary.parent) as tmp:
        builds = [("self-exec", alone_copy(binary, tmp), None)]
        if dedicated.exists():
            # The dedicated helper started with posix_spawn (the default), and with the server
            # forked for it as before (CODESPACE_SANDBOX_SPAWN=fork, the off switch).
            builds.append(("dedicated", binary, None))
            builds.append(("dedicated, no spare", binary, {**os.environ, "CODESPACE_SANDBOX_SPARE": "0"}))
            builds.append(("dedicated, thread exit watch", binary, {**os.environ, "CODESPACE_EXIT_WATCH": "thread"}))
            builds.append(("dedicated, both off", binary, {**os.environ, "CODESPACE_SANDBOX_SPARE": "0",
                                                           "CODESPACE_EXIT_WATCH": "thread"}))
            builds.append(("dedicated+fork", binary, {**os.environ, "CODESPACE_SANDBOX_SPAWN": "fork"}))
        servers = []
        print(f"binary {binary}")
        for label, b, env in builds:
            s, iso = start_server(b, tmp, label, env)
            print(f"{label}: command_sandbox={iso['command_sandbox']} secret_masking={iso['secret_masking']} "
                  f"sandbox_helper={iso.get('sandbox_helper', '(not reported)')} .env masked={iso['masked']} "
                  f"pids={iso['pids']['mechanism']}")
            if iso["command_sandbox"] != "linux-sandbox" or not iso["masked"]:
                print("the commands are not sandboxed and masked here: the figures would not mean anything")
                return 1
            for _ in range(5):
                exec_true(s, "w")
            servers.append((label, s))

        how = "interleaved calls" if a.interleave else "consecutive calls per server"
        print(f"\n== exec_command [\"true\"] (yield_ms) vs fork+exec of true, {a.iters} {how} per round ==")
        print("round | helper | exec_command median ms | p90 ms | raw true median ms | ratio")
        for rnd in range(a.rounds):
            raw: list[int] = []
            ours: dict[str, list[int]] = {label: [] for label, _ in servers}
            if a.interleave:
                for _ in range(a.iters):
                    raw.append(raw_true())
                    for label, s in servers:
                        t0, t1, r = exec_true(s, "w")
                        assert r.get("exit_code") == 0, r
                        ours[label].append(t1 - t0)
            else:
                # Blocks: what a server does in the background after a call (its next spare's
                # start) lands in its own next call, not in another server's or in the raw loop;
                # a pause between blocks lets the last call's background work end.
                raw = [raw_true() for _ in range(a.iters)]
                for label, s in servers:
                    time.sleep(BLOCK_PAUSE_S)
                    for _ in range(a.iters):
                        t0, t1, r = exec_true(s, "w")
                        assert r.get("exit_code") == 0, r
                        ours[label].append(t1 - t0)
            rmed = statistics.median(raw)
            for label, times in ours.items():
                med = statistics.median(times)
                p90 = sorted(times)[int(len(times) * 0.9)]
                print(f"{rnd + 1} | {label} | {ms(med)} | {ms(p90)} | {ms(rmed)} | {med / rmed:.2f}x")

        n = a.iters * a.rounds
        print(f"\n== per step (medians over {n} calls each, ms; CLOCK_MONOTONIC marks from the helper) ==")
        table: dict[str, dict[str, list[int]]] = {label: {} for label, _ in servers}
        order: list[str] = []
        calls = ([(label, s) for _ in range(n) for label, s in servers] if a.interleave
                 else [(label, s) for label, s in servers for _ in range(n)])
        previous = None
        for label, s in calls:
            if not a.interleave and label != previous:
                time.sleep(BLOCK_PAUSE_S)
            previous = label
            t0, t1, r = exec_true(s, "s")
            marks = steps_of(r.get("chunk") or "")
            prev = t0
            rows = table[label]
            for name, ns in marks:
                key = LABELS.get(name, name)
                if key not in order:
                    order.append(key)
                rows.setdefault(key, []).append(ns - prev)
                prev = ns
            key = "target exec+exit, reap, reply"
            if key not in order:
                order.append(key)
            rows.setdefault(key, []).append(t1 - prev)
            rows.setdefault("total", []).append(t1 - t0)
        print("step | " + " | ".join(label for label, _ in servers))
        for key in order + ["total"]:
            cells = " | ".join(
                ms(statistics.median(table[label][key]))
                + ("" if len(table[label][key]) == n or key == "total" else f" ({len(table[label][key])}/{n})")
                if table[label].get(key) else "-"
                for label, _ in servers)
            print(f"{key} | {cells}")
        for _, s in servers:
            s.close(timeout=30)

    print(f"\n== exec of the helper binary alone (it refuses at once: no plan), median of {a.iters} ==")
    raw_med = statistics.median([raw_true() for _ in range(a.iters)])
    print(f"fork+exec of true | {ms(raw_med)}")
    candidates = [("codespace __sandbox-exec", [str(binary), "__sandbox-exec"])]
    if dedicated.exists():
        candidates.append(("codespace-sandbox-helper", [str(dedicated)]))
    static_build = binary.parent / "codespace-sandbox-helper-static"
    if static_build.exists():
        candidates.append(("codespace-sandbox-helper-static (musl)", [str(static_build)]))
    for name, program in candidates:
        size = Path(program[0]).stat().st_size / 1e6
        print(f"{name} ({size:.0f} MB) | {ms(helper_alone(program, a.iters))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
