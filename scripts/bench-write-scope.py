#!/usr/bin/env python3
"""Write-scope and mask-pinning cost over stdio, new build against a baseline (run by hand, not in CI).

Builds one tree (--files files under src/, plus .git, target, tmp; with --masks also a few `.env`
files in nested directories), starts three release servers on it with raw JSON-RPC over stdio:

  new4  --new binary, command_write_paths [".", "target", "src", "tmp"] (4 candidates + .git)
  new1  --new binary, no command_write_paths (the default ["."] + .git)
  base  --baseline binary, no command_write_paths (it has no write scopes and rejects the field)

and times `exec_command ["true"]` with yield_ms to exit, --iters times per server, rotating which
server goes first in each round so machine noise hits all alike; in the same rounds it times a plain
fork+exec of /bin/true from Python (the floor). Prints medians (ms), p90, the ratios new/base and
each figure against the floor. Scenarios: masks off (secret_masking "off") and masks on
("required", with the .env files present), or one of them with --only.

Usage: scripts/bench-write-scope.py --new PATH --baseline PATH [--files N] [--iters N] [--only off|on]

Results so far: docs/operations.md, "Command sandbox settings" (the prepared mount namespaces).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SECRETS = [".env", "src/m0/.env", "src/m0/d3/.env.local", "tmp/a/b/c/.env"]
SCOPE4 = [".", "target", "src", "tmp"]


def _bench_exec():
    """scripts/bench-exec.py as a module: its stdio client and its exec loop are shared."""
    spec = importlib.util.spec_from_file_location("bench_exec", Path(__file__).with_name("bench-exec.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_BENCH_EXEC = _bench_exec()
Server = _BENCH_EXEC.Server


def exec_true(s: Server) -> tuple[float, dict]:
    dt, r = _BENCH_EXEC.exec_when_free(
        s, {"workspace_id": "w", "command": ["true"], "yield_ms": 10000})
    assert r["exit_code"] == 0, r
    return dt, r


def populate(root: Path, files: int, masks: bool) -> None:
    for i in range(files):
        d = root / f"src/m{i // 5000}/d{i // 100}"
        if i % 100 == 0:
            d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.rs").write_text("x")
    for d in ["src", "target", "tmp", ".git/hooks", ".git/objects", ".git/refs/heads"]:
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / ".git/HEAD").write_text("ref: refs/heads/main\n")
    if masks:
        for s in SECRETS:
            p = root / s
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("SECRET=1\n")


def ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


def scenario(new: Path, base: Path, files: int, iters: int, masks: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        populate(root, files, masks)
        masking = "required" if masks else "off"
        specs = {
            "new4": (new, {"command_write_paths": SCOPE4}),
            "new1": (new, {}),
            "base": (base, {}),
        }
        servers: dict[str, Server] = {}
        for name, (binary, extra) in specs.items():
            cfg = Path(tmp) / f"{name}.json"
            ws = {"root": str(root), "secret_masking": masking, **extra}
            cfg.write_text(json.dumps({"workspaces": {"w": ws}, "store": str(Path(tmp) / f"{name}.db")}))
            servers[name] = Server(binary, cfg)
        print(f"== masks {'on (' + ', '.join(SECRETS) + ')' if masks else 'off'}; files={files} iters={iters}",
              flush=True)
        for name, s in servers.items():
            iso = s.tool("workspace_info", {"workspace_id": "w"})["execution"]["isolation"]
            _, r = exec_true(s)
            print(f"  {name}: command_sandbox={iso.get('command_sandbox')} "
                  f"write_paths={json.dumps(r.get('write_paths'))}")
        for s in servers.values():  # warm-up: page cache, decision cache, path index
            for _ in range(3):
                exec_true(s)
        times: dict[str, list[float]] = {name: [] for name in servers}
        floor: list[float] = []
        names = list(servers)
        for i in range(iters):
            t = time.perf_counter()
            subprocess.run(["/bin/true"], check=True)
            floor.append(time.perf_counter() - t)
            k = i % len(names)
            for name in names[k:] + names[:k]:
                times[name].append(exec_true(servers[name])[0])
        for s in servers.values():
            s.close()
    f = statistics.median(floor)
    med = {name: statistics.median(v) for name, v in times.items()}
    p90 = {name: sorted(v)[int(len(v) * 0.9)] for name, v in times.items()}
    print(f"  fork_exec_true (python subprocess /bin/true): median {ms(f)} ms")
    for name in names:
        print(f"  {name}: median {ms(med[name])} ms, p90 {ms(p90[name])} ms, vs fork_exec {med[name] / f:.1f}x")
    print(f"  RATIO new4/base={med['new4'] / med['base']:.3f} new1/base={med['new1'] / med['base']:.3f} "
          f"new4/new1={med['new4'] / med['new1']:.3f} (masks {'on' if masks else 'off'})", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", type=Path, required=True)
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--only", choices=["off", "on"])
    a = ap.parse_args()
    for masks in [False, True]:
        if a.only is None or a.only == ("on" if masks else "off"):
            scenario(a.new, a.baseline, a.files, a.iters, masks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
