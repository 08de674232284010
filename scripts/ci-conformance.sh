#!/usr/bin/env bash
# Runs the official MCP conformance suite (every scenario: `--suite all`, pending and draft ones
# included) against `codespace serve --http`, once per spec version
# the server speaks (2025-11-25: initialize and sessions; 2026-07-28: stateless requests), and
# compares each run's failures with scripts/conformance-expected-failures.txt.
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
suite="@modelcontextprotocol/conformance@0.2.0-alpha.12"
spec_versions=(2025-11-25 2026-07-28)
# Scenarios that must pass, per spec version.
must_pass_2025_11_25=(server-initialize server-session-lifecycle ping tools-list server-sse-polling
  server-sse-multiple-streams dns-rebinding-protection)
must_pass_2026_07_28=(tools-list server-sse-multiple-streams dns-rebinding-protection
  sep-2164-resource-not-found http-header-validation)

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

# The expected failures of one spec version: `SCENARIO [SPEC_VERSION]  # reason` lines; a line
# without a spec version applies to every run.
expected_for() {
  sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$expected_file" | grep -v '^$' \
    | awk -v v="$1" 'NF == 1 || $2 == v { print $1 }' | sort -u
}

# Runs the suite at one spec version and compares; returns 1 on any difference.
run_version() {
  local version="$1" log="$work/suite-$1.log" suite_rc status=0
  set +e
  timeout 600 npx -y -p node@22 -p "$suite" conformance server --url "$url" \
    --suite all --spec-version "$version" -o "$work/results-$version" > "$log" 2>&1
  suite_rc=$?
  set -e
  echo "conformance: spec version $version"
  # Show the summary with the pass/fail counts reworded.
  sed -n '/=== SUMMARY ===/,$p' "$log" \
    | sed -E 's/^Total: ([0-9]+) passed, ([0-9]+) failed(.*)$/conformance: suite checks \1 ok, \2 not ok\3 (expected failures below)/' \
    | sed -E 's/: ([0-9]+) passed, ([0-9]+) failed/: \1 ok, \2 not ok/'
  if ! grep -q '=== SUMMARY ===' "$log"; then
    echo "conformance: the suite did not finish at $version (exit $suite_rc):" >&2
    grep -v '^npm warn' "$log" | tail -n 40 >&2
    return 1
  fi
  local expected failed passed
  mapfile -t expected < <(expected_for "$version")
  mapfile -t failed < <(sed -n '/=== SUMMARY ===/,$p' "$log" | sed -nE 's/^✗ ([^:]+):.*/\1/p' | sort -u)
  mapfile -t passed < <(sed -n '/=== SUMMARY ===/,$p' "$log" | sed -nE 's/^✓ ([^:]+):.*/\1/p' | sort -u)
  local unexpected stale missing
  unexpected="$(comm -13 <(printf '%s\n' "${expected[@]}") <(printf '%s\n' "${failed[@]}") | grep -v '^$' || true)"
  stale="$(comm -12 <(printf '%s\n' "${expected[@]}") <(printf '%s\n' "${passed[@]}") | grep -v '^$' || true)"
  missing="$(comm -23 <(printf '%s\n' "${expected[@]}") <(printf '%s\n' "${failed[@]}" "${passed[@]}" | sort -u) | grep -v '^$' || true)"
  # An expected failure of every version that this version does not run is not stale.
  missing="$(comm -12 <(printf '%s\n' "$missing" | sort -u) \
    <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$expected_file" | awk -v v="$version" '$2 == v { print $1 }' | sort -u) || true)"
  if [[ -n "$unexpected" ]]; then
    echo "conformance: UNEXPECTED failures at $version (not in $(basename "$expected_file")):"
    sed 's/^/  /' <<< "$unexpected"
    status=1
  fi
  if [[ -n "$stale" ]]; then
    echo "conformance: stale expected failures at $version (these pass now; remove them):"
    sed 's/^/  /' <<< "$stale"
    status=1
  fi
  if [[ -n "$missing" ]]; then
    echo "conformance: expected failures of $version the suite did not run (rename or remove them):"
    sed 's/^/  /' <<< "$missing"
    status=1
  fi
  local s must_var="must_pass_${version//-/_}[@]"
  for s in "${!must_var}"; do
    if ! printf '%s\n' "${passed[@]}" | grep -qx "$s"; then
      echo "conformance: required scenario $s did not pass at $version"
      status=1
    fi
  done
  if [[ $status -eq 0 ]]; then
    echo "conformance: $version OK (${#passed[@]} scenarios pass, ${#failed[@]} fail as expected)"
  fi
  return $status
}

status=0
for v in "${spec_versions[@]}"; do
  run_version "$v" || status=1
done
if [[ $status -ne 0 ]]; then
  echo "conformance: FAILED; server log tail:"
  tail -n 20 "$work/server.log"
fi
exit $status
