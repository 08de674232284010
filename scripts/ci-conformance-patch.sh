#!/usr/bin/env bash
# Runs the external apply_patch conformance scenarios (../shared/conformance/apply-patch next to
# the repo) through the patch crate and the engine's tool path, when that folder exists;
# otherwise says it skipped. The in-repo fixtures (runner/patch/tests/fixtures) run in the
# ordinary test suite either way.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
scenarios="$repo/../shared/conformance/apply-patch"
if [[ ! -d "$scenarios" ]]; then
  echo "skip: external apply_patch conformance scenarios not found at ../shared/conformance/apply-patch"
  exit 0
fi
CODESPACE_PATCH_SCENARIOS="$(cd "$scenarios" && pwd)"
export CODESPACE_PATCH_SCENARIOS
cd "$repo"
cargo test -p codespace-runner-patch --test it conformance::
cargo test -p codespace-engine --test it apply_patch::conformance_scenarios
