#!/usr/bin/env python3
"""Listing figures of issue 34, each against a baseline measured in the same run, over raw stdio
JSON-RPC (no third-party Python packages).

Rows (median of --runs, every run a fresh server process on the same generated tree):
  first-page   first `find` page (10 000 paths) on a fresh server and a fresh store
               vs `rg --files DIR` (target: <= 1.2x)
  full-listing every page of that tree (`next_offset` until done) on a fresh server
               vs `rg --files DIR` (target: <= 1.5x)
  restart      first `find` page on a server restarted over the store of a previous one (the
               persisted path index, validated on start) vs `rg --files DIR`
  repeat       the same first page again on a warm server (read from the index) vs `rg --files`
  no-links     the first page on a fresh server whose policy set is the shipped one without
               `base.forbid.hardlinked-files`, the one policy that reads `resource.links` (a copy
               in the temp dir): listings then read no link count, so the row shows what the
               per-file link stat the shipped set needs costs (no target of its own)

The tree (--files files, ~10 per directory, three levels) is generated in a temp dir (or --dir)
and read once by `rg --files` before anything is timed, so every figure sees a warm page cache.
`rg` is a benchmark-only baseline: installed with apt when missing.

Each row also gives the server's CPU time (user + system, all its threads) over the timed calls:
on a loaded machine it moves far less than the wall time. `--against PATH` runs every row for a
second build too, interleaved run by run with the first, so a before/after pair shares the load.

usage: scripts/bench-find.py [--bin PATH] [--against PATH] [--files 60000] [--runs 3] [--dir DIR]
                             [--json]
Run by hand (not in CI): figures depend on the machine; the ratios are what matter.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_stdio  # noqa: E402  (the shared raw-stdio client, beside this script)

REPO = Path(__file__).resolve().parents[1]


def default_bin() -> str:
    for t in (os.environ.get("CARGO_TARGET_DIR"), str(REPO / "target")):
        if t and Path(t, "release", "codespace").exists():
            return str(Path(t, "release", "codespace"))
    return str(REPO / "target" / "release" / "codespace")


def ensure_rg() -> str:
    rg = shutil.which("rg")
    if rg:
        return rg
    if shutil.which("apt-get"):
        print("installing ripgrep (benchmark baseline) with apt-get", file=sys.stderr)
        if subprocess.call(["apt-get", "install", "-y", "ripgrep"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL) != 0:
            subprocess.call(["apt-get", "update"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            subprocess.check_call(["apt-get", "install", "-y", "ripgrep"], stdout=subprocess.DEVNULL)
    rg = shutil.which("rg")
    if not rg:
        sys.exit("bench-find: `rg` (ripgrep) is needed for the baseline")
    return rg


def make_tree(root: Path, files: int) -> None:
    """~10 files per directory, three levels of directories, names of mixed length."""
    per_dir = 10
    dirs = max(1, files // per_dir)
    top = max(1, round(dirs ** (1 / 3)))
    mid = top
    n = 0
    d = 0
    while n < files:
        a, b, c = d // (top * mid), (d // top) % mid, d % top
        dd = root / f"pkg{a:02d}" / f"mod_{b:02d}" / f"sub{c:02d}"
        dd.mkdir(parents=True, exist_ok=True)
        for i in range(min(per_dir, files - n)):
            (dd / f"file_{i:02d}_{'x' * (i % 7)}.rs").write_text("fn main() {}\n")
            n += 1
        d += 1


class Server(bench_stdio.Server):
    """`codespace serve WS --store STORE`, its one workspace `default`."""

    def __init__(self, binary: str, ws: Path, store: Path, policies: Path | None = None) -> None:
        if policies is None:
            argv = [binary, "serve", str(ws), "--store", str(store)]
        else:
            config = store.with_suffix(".json")
            config.write_text(json.dumps({"workspaces": {"default": {"root": str(ws)}},
                                          "store": str(store), "policies": str(policies)}))
            argv = [binary, "serve", "--config", str(config)]
        super().__init__(argv, "bench-find")

    def find(self, **args) -> dict:
        return self.tool("find", {"workspace_id": "default", **args})


def timed(f):
    t = time.perf_counter()
    r = f()
    return time.perf_counter() - t, r


TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system time of process `pid`, all its threads (seconds)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def timed_cpu(s: "Server", f):
    c = cpu_s(s.p.pid)
    t, r = timed(f)
    return t, cpu_s(s.p.pid) - c, r


def rg_files(rg: str, ws: Path) -> float:
    t, _ = timed(lambda: subprocess.run([rg, "--files", "--hidden", "--no-ignore", str(ws)],
                                        stdout=subprocess.DEVNULL, check=True))
    return t


def full_listing(s: Server) -> tuple[int, int]:
    pages, paths, offset = 0, 0, None
    while True:
        args = {} if offset is None else {"offset": offset}
        r = s.find(**args)
        pages += 1
        paths += len(r["paths"])
        offset = r.get("next_offset")
        if offset is None:
            return pages, paths


def policies_without_links(tmp: Path) -> Path:
    """A copy of the shipped policies (and the schema beside them) without
    `base.forbid.hardlinked-files`; returns its policies directory."""
    dst = tmp / "no-links"
    shutil.copytree(REPO / "policies", dst / "policies")
    shutil.copytree(REPO / "schema", dst / "schema")
    guardrails = dst / "policies" / "base" / "guardrails.cedar"
    text = guardrails.read_text()
    start = text.index('@id("base.forbid.hardlinked-files")')
    end = text.index("@id(", start + 1)
    guardrails.write_text(text[:start] + text[end:])
    left = [str(f) for f in (dst / "policies").rglob("*.cedar") if "resource.links" in f.read_text()]
    if left:
        sys.exit(f"bench-find: policies still reading resource.links: {left}")
    return dst / "policies"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=default_bin())
    ap.add_argument("--against", help="a second build measured in the same runs (before/after)")
    ap.add_argument("--files", type=int, default=60000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", help="where the tree is generated (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="also print the rows as one JSON line")
    args = ap.parse_args()
    rg = ensure_rg()
    for b in [args.bin] + ([args.against] if args.against else []):
        if not Path(b).exists():
            sys.exit(f"bench-find: no binary at {b} (build it with cargo build --release)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-find-", dir=args.dir))
    try:
        ws = tmp / "ws"
        ws.mkdir()
        make_tree(ws, args.files)
        for _ in range(3):
            rg_files(rg, ws)  # warm the page cache
        bins = [args.bin] + ([args.against] if args.against else [])
        no_links = policies_without_links(tmp)
        rows = {b: {"first-page": [], "full-listing": [], "restart": [], "repeat": [],
                    "no-links": []}
                for b in bins}
        info = {}
        for run in range(args.runs):
            for k, binary in enumerate(bins):
                r_ = rows[binary]
                store = tmp / f"store-{run}-{k}.db"
                # A fresh server and store: the first page is built by a walk.
                base = rg_files(rg, ws)
                s = Server(binary, ws, store)
                t, c, r = timed_cpu(s, lambda: s.find())
                r_["first-page"].append((t, base, c))
                info["first_source"] = (r.get("listing_source"), r.get("walk_reason"))
                info["page_paths"] = len(r["paths"])
                base = rg_files(rg, ws)
                t, c, _ = timed_cpu(s, lambda: s.find())
                r_["repeat"].append((t, base, c))
                s.close()
                # A restarted server over the same store: the persisted index.
                base = rg_files(rg, ws)
                s = Server(binary, ws, store)
                t, c, r = timed_cpu(s, lambda: s.find())
                r_["restart"].append((t, base, c))
                info["restart_source"] = (r.get("listing_source"), r.get("walk_reason"))
                s.close()
                # Full listing on a fresh server and store.
                base = rg_files(rg, ws)
                s = Server(binary, ws, tmp / f"store-full-{run}-{k}.db")
                t, c, (pages, paths) = timed_cpu(s, lambda: full_listing(s))
                r_["full-listing"].append((t, base, c))
                info["pages"], info["paths"] = pages, paths
                s.close()
                # A fresh server and store under the set without the hard-link rule.
                base = rg_files(rg, ws)
                s = Server(binary, ws, tmp / f"store-nolinks-{run}-{k}.db", no_links)
                t, c, r = timed_cpu(s, lambda: s.find())
                r_["no-links"].append((t, base, c))
                info["no_links_paths"] = len(r["paths"])
                s.close()
        total = sum(1 for _ in ws.rglob("*"))
        print(f"tree: {args.files} files, {total} entries in {ws}; {args.runs} runs, each on a "
              f"fresh server process; load average {os.getloadavg()[0]:.1f} at the end")
        print(f"first page: {info['page_paths']} paths, source {info['first_source']}; "
              f"restart source {info['restart_source']}; full listing {info['pages']} pages, "
              f"{info['paths']} paths")
        targets = {"first-page": 1.2, "full-listing": 1.5, "restart": 1.2, "repeat": None,
                   "no-links": None}
        out = {}
        for binary in bins:
            print(f"binary {binary}")
            print(f"{'row':<13} {'ours (ms)':>24} {'rg --files (ms)':>24} {'ratio':>7} "
                  f"{'target':>7} {'server CPU (ms)':>22}")
            out[binary] = {}
            for name, vals in rows[binary].items():
                ours = [v[0] * 1e3 for v in vals]
                base = [v[1] * 1e3 for v in vals]
                cpu = [v[2] * 1e3 for v in vals]
                m_o, m_b = statistics.median(ours), statistics.median(base)
                ratio = m_o / m_b if m_b else float("inf")
                tgt = targets[name]
                runs_o = "/".join(f"{x:.0f}" for x in ours)
                runs_b = "/".join(f"{x:.0f}" for x in base)
                runs_c = "/".join(f"{x:.0f}" for x in cpu)
                print(f"{name:<13} {statistics.median(ours):>7.1f} [{runs_o:>14}] {m_b:>7.1f} "
                      f"[{runs_b:>14}] {ratio:>6.2f}x {('<=' + str(tgt) + 'x') if tgt else '-':>7} "
                      f"{statistics.median(cpu):>6.0f} [{runs_c:>14}]")
                out[binary][name] = {"ours_ms": ours, "baseline_ms": base, "cpu_ms": cpu,
                                     "ratio": ratio, "target": tgt}
        if args.json:
            print(json.dumps({"rows": out, "info": info}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
