#!/usr/bin/env bash
# CI step: a short soak (about 10 s of mixed load over HTTP, then 10 s over stdio, plus warm-up and
# shutdown) of the debug binary. It checks the soak's invariants (scripts/soak --help), not speeds.
# The long pre-deploy run is described in docs/operations.md ("Before you deploy: run the soak").
#
#   scripts/ci-soak.sh                                # builds the debug binary if needed
#   CODESPACE_BIN=path/to/codespace scripts/ci-soak.sh
#   SOAK_DURATION=30 scripts/ci-soak.sh               # seconds of load per transport
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
if [[ -z "${CODESPACE_BIN:-}" ]]; then
  (cd "$repo" && cargo build -q -p codespace-mcp --bin codespace)
  target="${CARGO_TARGET_DIR:-$repo/target}"
  [[ "$target" == /* ]] || target="$repo/$target"
  CODESPACE_BIN="$target/debug/codespace"
fi
[[ -x "$CODESPACE_BIN" ]] || { echo "ci-soak: no binary at $CODESPACE_BIN" >&2; exit 1; }

exec python3 "$here/soak" --bin "$CODESPACE_BIN" --duration "${SOAK_DURATION:-10}" --transport both \
  --clients 2 --sessions 3 --stdio-workers 4 --warmup 3 --reload-every 2
