#!/usr/bin/env bash
# CI step: prove the shipped policy set's properties with Cedar's symbolic compiler
# (`codespace policy verify`, cedar-policy-symcc + cvc5) with the custom properties of
# policies/examples/verify.toml, and check that the proofs bite: a candidate that lets read-only
# run a command, and is wider than the shipped set, must fail; a candidate without the guardrail
# that keeps commands out of .git must fail "no profile lets a command write .git/**" with a
# counterexample.
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

echo "ci-policy-verify: the shipped set with policies/examples/verify.toml (expect exit 0)"
"$bin" policy verify --policies policies --schema schema/codespace.cedarschema \
    --properties policies/examples/verify.toml

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

# The git property bites: the shipped set without base.forbid.git-metadata-command-write.
cp -r policies "$work/git"
python3 - "$work/git/base/guardrails.cedar" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
start = text.index('@id("base.forbid.git-metadata-command-write")')
end = text.index("};", start) + 2
open(path, "w").write(text[:start] + text[end:])
PY
echo "ci-policy-verify: a candidate that lets commands write .git (expect exit 1 with a counterexample)"
set +e
"$bin" policy verify --policies "$work/git" --schema schema/codespace.cedarschema \
    --properties policies/examples/verify.toml > "$work/git.out"
code=$?
set -e
cat "$work/git.out"
if [ "$code" -ne 1 ] \
    || ! grep -q '^FAILED  no profile lets a command write .git/\*\*' "$work/git.out" \
    || ! grep -q '^FAILED  no command writes git metadata' "$work/git.out" \
    || ! grep -q 'process_write: counterexample: principal CodeSpace::PermissionProfile::"workspace-write", action CodeSpace::Action::"process_write", path "[^"]*\.git' "$work/git.out" \
    || ! grep -q 'the authorizer says allow under the set (by workspace-write.permit.process-write)' "$work/git.out"; then
    echo "ci-policy-verify: FAILED: the .git candidate was not refused with a replayed counterexample (exit $code)"
    exit 1
fi
echo "ci-policy-verify: ok"
