#!/usr/bin/env bash
# CI step: prove the shipped policy set's properties with Cedar's symbolic compiler
# (`codespace policy verify`, cedar-policy-symcc + cvc5), and check that the proof bites: a
# candidate that lets read-only run a command, and is wider than the shipped set, must fail.
# Installs the solver (Debian's cvc5, run with --strings-exp) when it is missing; this is the
# documented install step (docs/policy.md, "Symbolic checks").
#
# Env: CODESPACE_BIN (a built `codespace` binary; default: build it), CVC5 (a cvc5 executable).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${CODESPACE_BIN:-}" ]; then
    cargo build --quiet -p codespace-mcp --bin codespace
    CODESPACE_BIN="${CARGO_TARGET_DIR:-target}/debug/codespace"
fi
bin="$CODESPACE_BIN"

if [ -z "${CVC5:-}" ] && ! command -v cvc5 >/dev/null 2>&1; then
    echo "ci-policy-verify: installing cvc5 (Debian package)"
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cvc5 >/dev/null
    else
        sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cvc5 >/dev/null
    fi
fi
echo "ci-policy-verify: $(${CVC5:-cvc5} --version | head -1)"

echo "ci-policy-verify: the shipped set (expect exit 0)"
"$bin" policy verify --policies policies --schema schema/codespace.cedarschema

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r policies "$work/wide"
cat > "$work/wide/profiles/ci-widen.cedar" <<'CEDAR'
@id("read-only.permit.make")
permit (principal in CodeSpace::PermissionProfile::"read-only", action == CodeSpace::Action::"exec_command", resource)
when { context has command && context.command.program == "make" };
CEDAR
echo "ci-policy-verify: a widening candidate (expect exit 1 with a counterexample)"
set +e
"$bin" policy verify --policies "$work/wide" --schema schema/codespace.cedarschema \
    --implies policies > "$work/wide.out"
code=$?
set -e
cat "$work/wide.out"
if [ "$code" -ne 1 ] || ! grep -q 'the authorizer says allow under the set (by read-only.permit.make)' "$work/wide.out"; then
    echo "ci-policy-verify: FAILED: the widening candidate was not refused with a replayed counterexample (exit $code)"
    exit 1
fi
echo "ci-policy-verify: ok"
