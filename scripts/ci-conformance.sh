#!/usr/bin/env bash
# Runs the official MCP conformance suite against `codespace serve --http` and compares the
# failures with scripts/conformance-expected-failures.txt.
#
#   scripts/ci-conformance.sh            # builds the debug binary if needed
#   CODESPACE_BIN=path/to/codespace scripts/ci-conformance.sh
#
# Needs node/npx and the npm registry. The suite's own "Total: N passed, M failed" line is
# reworded ("conformance: ...") so it is not mistaken for the project's test count.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
expected_file="$here/conformance-expected-failures.txt"
suite="@modelcontextprotocol/conformance@0.1.16"
must_pass=(server-initialize ping tools-list server-sse-multiple-streams dns-rebinding-protection)

if [[ -z "${CODESPACE_BIN:-}" ]]; then
  (cd "$repo" && cargo build -q -p codespace-mcp --bin codespace)
  CODESPACE_BIN="${CARGO_TARGET_DIR:-$repo/target}/debug/codespace"
fi
[[ -x "$CODESPACE_BIN" ]] || { echo "conformance: no binary at $CODESPACE_BIN" >&2; exit 1; }

work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/ws"
echo "conformance fixture" > "$work/ws/README.txt"
"$CODESPACE_BIN" serve "$work/ws" --store "$work/store.db" --http 127.0.0.1:0 \
  2> "$work/server.log" &
server_pid=$!

# Bounded wait for the "serving ... at http://127.0.0.1:PORT/mcp" line.
url=""
for _ in $(seq 1 200); do
  url="$(grep -o 'http://127\.0\.0\.1:[0-9]*/mcp' "$work/server.log" | head -n 1 || true)"
  [[ -n "$url" ]] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done
if [[ -z "$url" ]]; then
  echo "conformance: the server did not start:" >&2
  cat "$work/server.log" >&2
  exit 1
fi
echo "conformance: running $suite against $url"

set +e
timeout 600 npx -y -p node@22 -p "$suite" conformance server --url "$url" \
  -o "$work/results" > "$work/suite.log" 2>&1
suite_rc=$?
set -e

# Show the summary with the pass/fail counts reworded.
sed -n '/=== SUMMARY ===/,$p' "$work/suite.log" \
  | sed -E 's/^Total: ([0-9]+) passed, ([0-9]+) failed(.*)$/conformance: suite checks \1 ok, \2 not ok\3 (expected failures below)/' \
  | sed -E 's/: ([0-9]+) passed, ([0-9]+) failed/: \1 ok, \2 not ok/'

if ! grep -q '=== SUMMARY ===' "$work/suite.log"; then
  echo "conformance: the suite did not finish (exit $suite_rc):" >&2
  grep -v '^npm warn' "$work/suite.log" | tail -n 40 >&2
  exit 1
fi

mapfile -t expected < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$expected_file" | grep -v '^$' | sort -u)
mapfile -t failed < <(sed -n '/=== SUMMARY ===/,$p' "$work/suite.log" | sed -nE 's/^✗ ([^:]+):.*/\1/p' | sort -u)
mapfile -t passed < <(sed -n '/=== SUMMARY ===/,$p' "$work/suite.log" | sed -nE 's/^✓ ([^:]+):.*/\1/p' | sort -u)

status=0
unexpected="$(comm -13 <(printf '%s\n' "${expected[@]}") <(printf '%s\n' "${failed[@]}") | grep -v '^$' || true)"
stale="$(comm -12 <(printf '%s\n' "${expected[@]}") <(printf '%s\n' "${passed[@]}") | grep -v '^$' || true)"
missing="$(comm -23 <(printf '%s\n' "${expected[@]}") <(printf '%s\n' "${failed[@]}" "${passed[@]}" | sort -u) | grep -v '^$' || true)"
if [[ -n "$unexpected" ]]; then
  echo "conformance: UNEXPECTED failures (not in $(basename "$expected_file")):"
  sed 's/^/  /' <<< "$unexpected"
  status=1
fi
if [[ -n "$stale" ]]; then
  echo "conformance: stale expected failures (these pass now; remove them):"
  sed 's/^/  /' <<< "$stale"
  status=1
fi
if [[ -n "$missing" ]]; then
  echo "conformance: expected failures the suite did not run (rename or remove them):"
  sed 's/^/  /' <<< "$missing"
  status=1
fi
for s in "${must_pass[@]}"; do
  if ! printf '%s\n' "${passed[@]}" | grep -qx "$s"; then
    echo "conformance: required scenario $s did not pass"
    status=1
  fi
done
if [[ $status -eq 0 ]]; then
  echo "conformance: OK (${#passed[@]} scenarios pass, ${#failed[@]} fail as expected; required: ${must_pass[*]})"
else
  echo "conformance: FAILED; server log tail:"
  tail -n 20 "$work/server.log"
fi
exit $status
