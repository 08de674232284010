#!/usr/bin/env bash
# Search benchmarks: grep vs `rg PATTERN`, first find vs `rg --files`, paging from the index,
# find_files p50 over 100 000 paths, index memory per path. `rg` is a benchmark-only baseline: this
# script installs it with apt when missing; no test needs it. Run by hand (not in CI).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v rg >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y ripgrep >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y ripgrep >/dev/null; }
fi
command -v rg >/dev/null 2>&1 && rg --version | head -1
exec cargo bench -p codespace-engine --bench search
