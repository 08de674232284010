#!/usr/bin/env python3
"""Every row of issue 34's table, each printed by its own driver against a baseline measured in the
same run. This script only runs the drivers one after the other and prints their output under the
row they answer (a driver that is missing is reported, not faked):

  listing   first `find` page and full listing vs `rg --files`, restart
            from the saved index                          scripts/bench-find.py
  exec      exec_command ["true"] sandboxed vs a bare fork+exec
                                                          scripts/bench-exec-start.py if present,
                                                          else scripts/bench-exec.py
  read      `read` 10 KB over stdio vs a bare rmcp server (the floor) and server-filesystem
                                                          scripts/bench-peers --floor
  rss       RSS growth over 20 000 reads                  scripts/bench-rss.py
  decide    an uncached decision vs a bare Authorizer::is_authorized
                                                          cargo bench -p codespace-policy --bench decide
  info      workspace_info (its probe set decided once per policy set) vs ping and read
                                                          scripts/bench-workspace-info.py

usage: scripts/bench-speed.py [--bin PATH] [--only listing,read,...] [--runs 3]
                             [--bench-profile quick]
Run by hand on a quiet machine (not in CI). The binary is built by the caller (`cargo build
--release`, or `--profile quick` and `--bin .../quick/codespace`); CARGO_TARGET_DIR is honoured.
The read row's floor server is the `floor_server` example next to the binary when it was built
(`cargo build --profile quick -p codespace-mcp --example floor_server`), else this script builds
it (release) before it measures any row, so no build runs while a row is measured. The decide row's bench is built with `--bench-profile` (default: cargo's `bench` profile).
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"


def default_bin() -> str:
    for t in (os.environ.get("CARGO_TARGET_DIR"), str(REPO / "target")):
        for profile in ("release", "quick"):
            if t and Path(t, profile, "codespace").exists():
                return str(Path(t, profile, "codespace"))
    return str(REPO / "target" / "release" / "codespace")


def floor_server(binary: str) -> Path:
    """The floor server beside `binary`'s build, else a release one built now (by the caller of
    `rows`, before any row runs)."""
    beside = Path(binary).parent / "examples" / "floor_server"
    if beside.exists():
        return beside
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    built = target / "release" / "examples" / "floor_server"
    print(f"no floor_server beside {binary}: building {built} before any row is measured", flush=True)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "codespace-mcp", "--example", "floor_server"],
                   cwd=REPO, check=True)
    return built


def rows(binary: str, runs: int, bench_profile: str,
         with_floor: bool) -> list[tuple[str, str, list[str] | None]]:
    exec_driver = next((p for p in (SCRIPTS / "bench-exec-start.py", SCRIPTS / "bench-exec.py")
                        if p.exists()), None)
    decide = REPO / "policy" / "benches" / "decide.rs"
    floor_arg = ["--floor", str(floor_server(binary))] if with_floor else ["--floor"]
    bench = ["cargo", "bench"] + (["--profile", bench_profile] if bench_profile else [])
    return [
        ("listing", "first find page <= 1.2x rg --files; full listing <= 1.5x rg --files",
         [sys.executable, str(SCRIPTS / "bench-find.py"), "--bin", binary, "--runs", str(runs)]),
        ("exec", 'exec_command ["true"] sandboxed and masked <= 3x a bare fork+exec of true',
         [sys.executable, str(exec_driver), "--binary", binary, "--iters", "20", "--rounds", str(runs)]
         if exec_driver else None),
        ("read", "read 10 KB over raw stdio <= 1.2x the bare rmcp floor",
         [str(SCRIPTS / "bench-peers"), *floor_arg, "--bin", binary]),
        ("rss", "RSS growth over 20 000 reads <= 1 MB",
         [sys.executable, str(SCRIPTS / "bench-rss.py"), "--bin", binary, "--runs", str(runs)]),
        ("decide", "uncached decision <= 1.5x a bare is_authorized and <= 10 us",
         [*bench, "-p", "codespace-policy", "--bench", "decide"] if decide.exists() else None),
        ("info", "workspace_info's probe set decided once per policy set and cached",
         [sys.executable, str(SCRIPTS / "bench-workspace-info.py"), "--bin", binary,
          "--runs", str(runs)]),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=default_bin())
    ap.add_argument("--only", default="", help="comma-separated rows (default: all)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bench-profile", default="", help="cargo profile of the decide bench")
    args = ap.parse_args()
    only = {r for r in args.only.split(",") if r}
    failed = []
    for name, target, argv in rows(args.bin, args.runs, args.bench_profile,
                                   with_floor=not only or "read" in only):
        if only and name not in only:
            continue
        print(f"\n=== {name}: target {target}", flush=True)
        if argv is None:
            print(f"no driver for this row in this tree (skipped)")
            failed.append(name)
            continue
        print("$ " + " ".join(argv), flush=True)
        rc = subprocess.call(argv, cwd=REPO)
        if rc != 0:
            print(f"{name}: driver exited with {rc}")
            failed.append(name)
    if failed:
        print(f"\nrows without figures: {', '.join(failed)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
