#!/usr/bin/env bash
# The CodeSpace test command (what the README and CI run):
#   1. scripts/check-no-model-deps.sh, and its --self-test
#   2. cargo build --workspace, the static sandbox helper beside the binary
#      (scripts/build-static-helper.sh; the musl target is added with rustup when missing),
#      cargo test --workspace (both cargo steps with the test-hooks feature); the
#      outside programs the tests run (cvc5, curl, openssl, util-linux, gzip, python3-pytest,
#      openssh-server/-client, podman, crun) are installed
#      first (Debian packages) when missing
#   3. codespace policy validate, policy fmt --check, policy test (the shipped policies/)
#   4. python3 -m pytest -q tests/py (official MCP SDK over stdio/HTTP against the built binary)
# Every step runs and prints its own summary; the script exits non-zero when any step failed.
# At the end: `skips: N`, the tests that could not run their invariant on this host, grouped by
# reason (each test records its skip in the file CODESPACE_SKIP_LOG names, through the
# `codespace-test-skip` crate or tests/py's `skip_missing`). Under CODESPACE_REQUIRE_ISOLATION=1
# (.ci/run sets it) or CI=true a skip fails its test instead, so a green run has 0.
# Honours CARGO_TARGET_DIR (the binary is ${CARGO_TARGET_DIR:-target}/debug/codespace),
# CARGO_LOCKED=1 (adds --locked to cargo) and PYTHON (the interpreter for step 4). By default step
# 4 uses the project venv tests/py/.venv: created with `python3 -m venv` when missing, and
# tests/py/requirements.txt installed into it when missing or changed. Nothing is ever installed
# into the global interpreter; a PYTHON you give must already have the requirements.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

TARGET="${CARGO_TARGET_DIR:-target}"
case "$TARGET" in
  /*) ;;
  *) TARGET="$REPO/$TARGET" ;;
esac
BIN="$TARGET/debug/codespace"
LOCKED=()
if [[ "${CARGO_LOCKED:-}" == "1" ]]; then
  LOCKED=(--locked)
fi
VENV="$REPO/tests/py/.venv"
PYTHON="${PYTHON:-$VENV/bin/python}"

# Every skip of this run lands here (one `kind<TAB>test<TAB>why` line each).
CODESPACE_SKIP_LOG="$(mktemp "${TMPDIR:-/tmp}/codespace-skips.XXXXXX")"
export CODESPACE_SKIP_LOG
trap 'rm -f "$CODESPACE_SKIP_LOG"' EXIT

# `skips: N` and the skipped tests grouped by reason; then the opt-in inputs not configured.
skip_summary() {
  local kind label
  for kind in skip not-configured; do
    label="skips"
    [[ "$kind" == "skip" ]] || label="not configured (opt-in inputs; never a failure)"
    echo "$label: $(awk -F'\t' -v k="$kind" '$1 == k' "$CODESPACE_SKIP_LOG" | wc -l)"
    awk -F'\t' -v k="$kind" '$1 == k { print $3 "\t" $2 }' "$CODESPACE_SKIP_LOG" |
      LC_ALL=C sort -u |
      awk -F'\t' '$1 != last { print "  " $1; last = $1 } { print "    - " $2 }'
  done
}

failed=()
step() {
  local name="$1"
  shift
  echo
  echo "==> $name"
  local start=$SECONDS
  if "$@"; then
    echo "<== $name: ok ($((SECONDS - start)) s)"
  else
    echo "<== $name: FAILED ($((SECONDS - start)) s)"
    failed+=("$name")
  fi
}

python_deps() {
  if [[ "$PYTHON" != "$VENV/bin/python" ]]; then
    # An interpreter the caller chose: use it as it is, never install into it.
    if "$PYTHON" -c "import mcp, pytest" 2>/dev/null; then
      return 0
    fi
    echo "PYTHON=$PYTHON lacks the packages of tests/py/requirements.txt; install them into it," \
      "or unset PYTHON to use the project venv tests/py/.venv"
    return 1
  fi
  if [[ ! -x "$VENV/bin/python" ]]; then
    echo "creating the project venv tests/py/.venv"
    if ! python3 -m venv "$VENV"; then
      echo "python3 -m venv failed (on Debian: apt-get install python3-venv)"
      return 1
    fi
  fi
  # Reinstall when requirements.txt changed since the venv was filled.
  local stamp="$VENV/.requirements.txt"
  if cmp -s tests/py/requirements.txt "$stamp" && "$PYTHON" -c "import mcp, pytest" 2>/dev/null; then
    return 0
  fi
  echo "installing tests/py/requirements.txt into tests/py/.venv"
  "$PYTHON" -m pip install --quiet --disable-pip-version-check -r tests/py/requirements.txt &&
    cp tests/py/requirements.txt "$stamp"
}

pytest_e2e() {
  python_deps || return 1
  CODESPACE_BIN="$BIN" "$PYTHON" -m pytest -q tests/py
}

# The outside programs the tests run (each test that lacks its program skips, and fails under
# CODESPACE_REQUIRE_ISOLATION=1 or CI=true): cvc5 (`policy verify`), curl + openssl (the
# documented HTTP session), setpriv + unshare (util-linux: dropping to an unprivileged uid, a
# PID namespace), zcat (gzip: the kernel config the sandbox tests read), pytest for the system
# python3 (python3-pytest: the python-tester worked example), sshd + ssh + ssh-keygen
# (openssh-server, openssh-client: the loopback sshd of the ssh environment tests), podman + crun
# (the container environment tests; docs/environments.md), prometheus + promtool (the /metrics
# tests: `promtool check metrics` and a real scrape; docs/telemetry.md), node + npm (nodejs, npm:
# the OIDC tests' provider, `oidc-provider` from tests/oidc/package-lock.json), chromium +
# chromedriver (chromium, chromium-driver: the web console's browser test, tests/py/test_console.py).
# Each missing one is
# installed from Debian, as root or with passwordless sudo, and the step says what it installed;
# otherwise a note (an error under CI).
test_programs() {
  local -A package=([cvc5]=cvc5 [curl]=curl [openssl]=openssl [setpriv]=util-linux
    [unshare]=util-linux [zcat]=gzip [/usr/sbin/sshd]=openssh-server [ssh]=openssh-client
    [ssh-keygen]=openssh-client [podman]=podman [crun]=crun [prometheus]=prometheus
    [promtool]=prometheus [node]=nodejs [npm]=npm [chromium]=chromium [chromedriver]=chromium-driver)
  local missing=() prog
  for prog in cvc5 curl openssl setpriv unshare zcat /usr/sbin/sshd ssh ssh-keygen podman crun \
    prometheus promtool node npm chromium chromedriver; do
    if [[ "$prog" == cvc5 && -n "${CVC5:-}" ]] || command -v "$prog" >/dev/null 2>&1; then
      continue
    fi
    missing+=("${package[$prog]}")
  done
  # pytest for the system python3 (the worked example of the python-tester profile runs
  # `python3 -m pytest` inside the sandbox, outside the project venv).
  if ! python3 -c 'import pytest' >/dev/null 2>&1 &&
    ! /usr/bin/python3 -c 'import pytest' >/dev/null 2>&1; then
    missing+=(python3-pytest)
  fi
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "all present; cvc5: $("${CVC5:-cvc5}" --version | head -1)"
    return 0
  fi
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  local sudo=()
  if [[ "$(id -u)" -ne 0 ]]; then
    if ! sudo -n true 2>/dev/null; then
      echo "missing and cannot be installed without root: ${missing[*]} (the tests that need them skip;" \
        "apt-get install ${missing[*]})"
      [[ "${CI:-}" != "true" && "${CODESPACE_REQUIRE_ISOLATION:-}" != "1" ]]
      return
    fi
    sudo=(sudo -n)
  fi
  echo "installing (Debian packages) for the tests: ${missing[*]}"
  "${sudo[@]+"${sudo[@]}"}" apt-get update -qq &&
    "${sudo[@]+"${sudo[@]}"}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null &&
    for p in "${missing[@]}"; do echo "installed: $(dpkg-query -W -f '${Package} ${Version}' "$p")"; done
}

step "check-no-model-deps" scripts/check-no-model-deps.sh
step "check-no-model-deps --self-test" scripts/check-no-model-deps.sh --self-test
before=${#failed[@]}
# The tested binary carries the env-driven test hooks (crash and fail-closed tests); release
# builds never enable this feature.
HOOKS=(--features codespace-mcp/test-hooks)
# The OIDC provider of mcp/tests/it/oidc.rs, from its lock file (the test runs `npm ci` itself
# when this step could not).
oidc_provider() {
  (cd tests/oidc && npm ci --no-audit --no-fund --loglevel=error) &&
    echo "installed: oidc-provider $(node -p 'require("./tests/oidc/node_modules/oidc-provider/package.json").version')"
}
# The static sandbox helper (scripts/build-static-helper.sh) beside the tested binary: the
# server prefers it, so the suite runs every sandboxed command through it, as an install that
# ran the script does (the glibc build's code is the same, and the sandbox crate's own tests run
# it). Without the target x86_64-unknown-linux-musl, and no way to add it, the suite runs the
# glibc helper and records a skip (an error under CI).
static_helper() {
  local rc=0
  bash scripts/build-static-helper.sh --dest "$TARGET/debug" || rc=$?
  if [[ $rc -eq 3 ]]; then
    rm -f "$TARGET/debug/codespace-sandbox-helper-static"
    printf 'skip\t%s\t%s\n' "static sandbox helper (scripts/build-static-helper.sh)" \
      "the Rust target x86_64-unknown-linux-musl is not installed and could not be added" \
      >>"$CODESPACE_SKIP_LOG"
    [[ "${CI:-}" != "true" && "${CODESPACE_REQUIRE_ISOLATION:-}" != "1" ]]
    return
  fi
  return $rc
}
step "cargo build --workspace" cargo build --workspace "${HOOKS[@]}" "${LOCKED[@]+"${LOCKED[@]}"}"
if [[ ${#failed[@]} -eq $before && -x "$BIN" ]]; then
  step "static sandbox helper (x86_64-unknown-linux-musl)" static_helper
  step "test programs (cvc5, curl, openssl, util-linux, gzip, python3-pytest, openssh, podman, prometheus, nodejs, chromium)" test_programs
  step "npm ci tests/oidc (oidc-provider)" oidc_provider
  step "cargo test --workspace" cargo test --workspace --no-fail-fast "${HOOKS[@]}" "${LOCKED[@]+"${LOCKED[@]}"}"
  step "codespace policy validate" "$BIN" policy validate --policies policies
  step "codespace policy fmt --check" "$BIN" policy fmt --check --policies policies
  step "codespace policy test" "$BIN" policy test --policies policies --coverage-min 100 \
    --coverage-min-profile 100 --coverage-min-action 100 --fail-on-empty
  step "pytest tests/py" pytest_e2e
else
  echo "the build failed or $BIN is missing: skipping cargo test, policy and Python steps"
  failed+=("cargo test (skipped)" "policy (skipped)" "pytest (skipped)")
fi

echo
skip_summary
echo
if [[ ${#failed[@]} -ne 0 ]]; then
  echo "scripts/test.sh: FAILED steps:"
  printf '  - %s\n' "${failed[@]}"
  exit 1
fi
echo "scripts/test.sh: every step passed"
