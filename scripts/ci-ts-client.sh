#!/usr/bin/env bash
# The official MCP TypeScript client v2 (`@modelcontextprotocol/client`, pinned in
# tests/ts/package-lock.json) against `codespace serve`: `auto` and pinned 2026-07-28 over stdio
# and streamable HTTP calling every tool, and a legacy 2025-11-25 client (issue 30).
#
#   scripts/ci-ts-client.sh            # builds the debug binary if needed
#   CODESPACE_BIN=path/to/codespace scripts/ci-ts-client.sh
#
# Needs node (>= 20; else Node 22 through npx, as the conformance step) and the npm registry.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
if [[ -z "${CODESPACE_BIN:-}" ]]; then
  (cd "$repo" && cargo build -q -p codespace-mcp --bin codespace)
  CODESPACE_BIN="${CARGO_TARGET_DIR:-$repo/target}/debug/codespace"
fi
[[ -x "$CODESPACE_BIN" ]] || { echo "ts-client: no binary at $CODESPACE_BIN" >&2; exit 1; }
export CODESPACE_BIN

cd "$repo/tests/ts"
npm ci --no-audit --no-fund --loglevel=error
major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
if (( major >= 20 )); then
  node --test
else
  npx -y -p node@22 node --test
fi
