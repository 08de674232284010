#!/usr/bin/env bash
# CI gate for policy changes: `codespace policy diff` of the shipped set against itself must
# find no flip (exit 0) over a few decisions recorded by a real `codespace serve` on a temp store
# and over every policy test case; and a candidate that widens access must exit 3, so the gate
# itself is known to bite. See docs/policy.md, "Rolling out a policy change safely".
#
# Env: CODESPACE_BIN (a built `codespace` binary; default: build it).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${CODESPACE_BIN:-}" ]; then
    cargo build --quiet -p codespace-mcp --bin codespace
    CODESPACE_BIN="${CARGO_TARGET_DIR:-target}/debug/codespace"
fi
bin="$CODESPACE_BIN"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/ws"
printf 'alpha\n' > "$work/ws/a.txt"
printf 'SECRET=1\n' > "$work/ws/.env"
cat > "$work/codespace.json" <<JSON
{
  "policies": "$PWD/policies",
  "schema": "$PWD/schema/codespace.cedarschema",
  "store": "$work/audit.db",
  "workspaces": {
    "w": {"root": "$work/ws", "profile": "workspace-write"},
    "r": {"root": "$work/ws", "profile": "read-only"}
  }
}
JSON

# Record a few decisions: allowed and denied reads, a listing, a denied command.
HOME="$work" python3 - "$bin" "$work/codespace.json" <<'PY'
import json, subprocess, sys
p = subprocess.Popen([sys.argv[1], "serve", "--config", sys.argv[2]],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
def send(m):
    p.stdin.write(json.dumps(m) + "\n"); p.stdin.flush()
def reply(i):
    while True:
        line = p.stdout.readline()
        if not line:
            sys.exit("ci-policy-diff: the server closed stdout")
        m = json.loads(line)
        if m.get("id") == i:
            return m
send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "ci", "version": "0"}}})
reply(0)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
calls = [
    ("read", {"workspace_id": "w", "path": "a.txt"}),
    ("read", {"workspace_id": "w", "path": ".env"}),
    ("find", {"workspace_id": "w"}),
    ("exec_command", {"workspace_id": "r", "command": ["make"]}),
]
for i, (name, args) in enumerate(calls, 1):
    send({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": args}})
    reply(i)
p.stdin.close()
p.wait(timeout=30)
PY

rows="$("$bin" audit --config "$work/codespace.json" --json --all-rows | wc -l)"
echo "ci-policy-diff: $rows decision row(s) recorded"
if [ "$rows" -lt 4 ]; then
    echo "ci-policy-diff: FAILED: expected at least 4 recorded rows"; exit 1
fi

echo "ci-policy-diff: shipped set against itself (expect exit 0)"
set +e
"$bin" policy diff --config "$work/codespace.json" --against policies --tests
code=$?
set -e
if [ "$code" -ne 0 ]; then
    echo "ci-policy-diff: FAILED: policy diff of the shipped set against itself exited $code"; exit 1
fi

echo "ci-policy-diff: a widening candidate (expect exit 3)"
cp -r policies "$work/wide"
cat > "$work/wide/profiles/ci-widen.cedar" <<'CEDAR'
@id("read-only.permit.any-command")
permit (principal in CodeSpace::PermissionProfile::"read-only", action == CodeSpace::Action::"exec_command", resource);
CEDAR
set +e
"$bin" policy diff --config "$work/codespace.json" --against "$work/wide" > "$work/wide.out"
code=$?
set -e
cat "$work/wide.out"
if [ "$code" -ne 3 ]; then
    echo "ci-policy-diff: FAILED: a widening candidate exited $code, not 3"; exit 1
fi
echo "ci-policy-diff: ok"
