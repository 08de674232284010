#!/usr/bin/env bash
# Builds the dedicated sandbox helper as a static executable and installs it beside a built
# `codespace` as `codespace-sandbox-helper-static`, which the server prefers to the glibc
# `codespace-sandbox-helper` that `cargo build` puts there (runner/sandbox/src/helper_exe.rs; it
# uses either only when it answers `--helper-version` for this build).
#
# Why: every sandboxed command starts through the helper (a warm spare of it, started ahead, or
# a cold one). The glibc build spends most of its start in the dynamic loader and in glibc's
# CPU-feature probes, whose `cpuid` instructions trap to the hypervisor on a VM: 1.2 ms against
# 0.3 ms for the static musl build on the 2-core VM of docs/security.md ("Session 12"), and
# `exec_command` 0.94 times as long end to end. The code is the same: both builds run the
# sandbox crate's `dedicated_main` (runner/sandbox/src/bin/codespace-sandbox-helper-static.rs).
#
# Usage: scripts/build-static-helper.sh [--profile dev|release|quick] [--dest DIR]
#   --profile  the cargo profile of both builds (default dev; its directory: debug, release,
#              quick)
#   --dest     where `codespace` is (default ${CARGO_TARGET_DIR:-target}/<profile dir>)
# Needs the target x86_64-unknown-linux-musl (`rustup target add x86_64-unknown-linux-musl`; the
# script adds it with rustup when it is missing and rustup is there). Honours CARGO_TARGET_DIR and
# CARGO_LOCKED=1 (adds --locked). Exit 3 when the target cannot be had (nothing is installed).
# After a change to the sandbox crate, run it again: a static helper of another version is not
# used (the server then says why and takes the glibc one).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

TRIPLE=x86_64-unknown-linux-musl
profile=dev
dest=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --profile) profile="$2"; shift 2 ;;
    --dest) dest="$2"; shift 2 ;;
    *) echo "usage: $0 [--profile dev|release|quick] [--dest DIR]" >&2; exit 2 ;;
  esac
done
case "$profile" in
  dev) dir=debug ;;
  *) dir="$profile" ;;
esac
target="${CARGO_TARGET_DIR:-target}"
[[ "$target" == /* ]] || target="$REPO/$target"
dest="${dest:-$target/$dir}"
locked=()
[[ "${CARGO_LOCKED:-}" == "1" ]] && locked=(--locked)

if [[ "$(uname -m)" != x86_64 ]]; then
  echo "build-static-helper: only x86_64 is set up (this machine: $(uname -m))" >&2
  exit 3
fi
if ! rustup target list --installed 2>/dev/null | grep -qx "$TRIPLE"; then
  if ! command -v rustup >/dev/null 2>&1 || ! rustup target add "$TRIPLE"; then
    echo "build-static-helper: the Rust target $TRIPLE is not installed and could not be added" >&2
    exit 3
  fi
fi

cargo build "${locked[@]+"${locked[@]}"}" --profile "$profile" --target "$TRIPLE" \
  -p codespace-runner-sandbox --features static-helper --bin codespace-sandbox-helper-static
built="$target/$TRIPLE/$dir/codespace-sandbox-helper-static"
mkdir -p "$dest"
# A new file, renamed into place (a server starting meanwhile sees the old one or the new one).
install -m 0755 "$built" "$dest/codespace-sandbox-helper-static.new"
mv -f "$dest/codespace-sandbox-helper-static.new" "$dest/codespace-sandbox-helper-static"
echo "installed $dest/codespace-sandbox-helper-static ($TRIPLE): $("$dest/codespace-sandbox-helper-static" --helper-version)"
