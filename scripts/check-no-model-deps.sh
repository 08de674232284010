#!/usr/bin/env bash
# check-no-model-deps.sh: CodeSpace is execution-only, so no crate may pull in a model/LLM client
# and no source may talk to a model API.
#
# Fails (exit 1), naming the file and the match, when
#   - any Cargo.toml declares a model/LLM client crate or a `codex-*` crate (any dependency table,
#     `[dependencies.NAME]` tables, and `package = "..."` renames included);
#   - Cargo.lock contains a package with such a name;
#   - any source under engine/ runner/ mcp/ tests/src contains a model-API marker.
# Exceptions: third_party/policy-scan-allowlist.txt, one entry a line, `#` comments:
#   crate:NAME            a crate name that is not a model client despite its name
#   PATH                  a repo-relative file the source scan skips
#   PATH:MARKER           one marker allowed in one file
#
# Usage: scripts/check-no-model-deps.sh [--root DIR]    scan DIR (default: the repository)
#        scripts/check-no-model-deps.sh --self-test      plant bad inputs in a temp dir, check they are caught
set -euo pipefail

SCRIPT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
ROOT="$(cd "$(dirname "$SCRIPT")/.." && pwd)"

# Crate-name patterns (extended regex, whole name). Kept broad on purpose: a false positive is
# one allowlist line, a miss is a model client in an execution-only server.
BANNED_CRATES='^(async-openai.*|openai.*|.*-openai|anthropic.*|async-anthropic.*|.*-anthropic|misanthropic|claude.*|ollama.*|llm|llm[-_].*|.*[-_]llm|langchain.*|genai|rig-core|rig|mistral.*|gemini.*|google-generative-ai.*|cohere.*|groq.*|replicate.*|huggingface.*|hf-hub|candle-transformers|tiktoken.*|codex-.*|codex_.*)$'
# Model-API markers in source (fixed strings).
MARKERS=(
  "api.openai.com"
  "api.anthropic.com"
  "generativelanguage.googleapis.com"
  "/v1/responses"
  "/v1/chat/completions"
  "/v1/messages"
  "/v1/completions"
)
SCAN_DIRS=(engine runner mcp tests/src)

self_test() {
  local tmp rc out
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' RETURN
  local failures=0

  # 1. A clean tree passes.
  mkdir -p "$tmp/clean/engine/src"
  printf '[package]\nname = "x"\n\n[dependencies]\nserde = "1"\nrig-core-not = { version = "1" }\n' \
    >"$tmp/clean/engine/Cargo.toml"
  printf '//! fine\nfn main() { println!("hello"); }\n' >"$tmp/clean/engine/src/main.rs"
  if out="$("$SCRIPT" --root "$tmp/clean" 2>&1)"; then
    echo "self-test ok: clean tree passes"
  else
    echo "self-test FAILED: clean tree was rejected:"; echo "$out"; failures=$((failures + 1))
  fi

  # 2. Each way of declaring a banned crate is caught, naming the file and the crate.
  local n=0
  local -a manifests=(
    '[dependencies]\nasync-openai = "0.28"\n'
    '[dev-dependencies]\nanthropic-sdk = { version = "0.1" }\n'
    '[workspace.dependencies]\nollama-rs = "0.2"\n'
    '[dependencies.llm]\nversion = "1"\n'
    '[target.'"'"'cfg(unix)'"'"'.dependencies]\ngenai = "0.1"\n'
    '[dependencies]\nchat = { package = "rig-core", version = "0.9" }\n'
    '[build-dependencies]\ncodex-core = { path = "../codex" }\n'
    '[dependencies]\nmistralrs.workspace = true\n'
  )
  local m
  for m in "${manifests[@]}"; do
    n=$((n + 1))
    mkdir -p "$tmp/bad$n/runner/x"
    printf '[package]\nname = "x"\n\n'"$m" >"$tmp/bad$n/runner/x/Cargo.toml"
    rc=0; out="$("$SCRIPT" --root "$tmp/bad$n" 2>&1)" || rc=$?
    if [[ $rc -eq 1 && "$out" == *"runner/x/Cargo.toml"* ]]; then
      echo "self-test ok: caught manifest $n ($(grep -o 'crate `[^`]*`' <<<"$out" | head -1))"
    else
      echo "self-test FAILED: manifest $n not caught (rc $rc):"; printf "$m"; echo "$out"
      failures=$((failures + 1))
    fi
  done

  # 3. A banned package in Cargo.lock is caught.
  mkdir -p "$tmp/lock"
  printf 'version = 4\n\n[[package]]\nname = "serde"\nversion = "1.0.0"\n\n[[package]]\nname = "async-openai"\nversion = "0.28.0"\n' \
    >"$tmp/lock/Cargo.lock"
  rc=0; out="$("$SCRIPT" --root "$tmp/lock" 2>&1)" || rc=$?
  if [[ $rc -eq 1 && "$out" == *"Cargo.lock"*"async-openai"* ]]; then
    echo "self-test ok: caught Cargo.lock package"
  else
    echo "self-test FAILED: Cargo.lock package not caught (rc $rc):"; echo "$out"; failures=$((failures + 1))
  fi

  # 4. A model-API marker in source is caught; docs are not scanned; the allowlist works.
  mkdir -p "$tmp/src/mcp/src" "$tmp/src/docs" "$tmp/src/third_party"
  printf '//! x\nconst U: &str = "https://api.openai.com/v1/chat/completions";\n' >"$tmp/src/mcp/src/client.rs"
  printf 'We never call https://api.anthropic.com/v1/messages.\n' >"$tmp/src/docs/security.md"
  rc=0; out="$("$SCRIPT" --root "$tmp/src" 2>&1)" || rc=$?
  if [[ $rc -eq 1 && "$out" == *"mcp/src/client.rs:2"*"api.openai.com"* && "$out" != *"docs/security.md"* ]]; then
    echo "self-test ok: caught source marker, docs ignored"
  else
    echo "self-test FAILED: source marker (rc $rc):"; echo "$out"; failures=$((failures + 1))
  fi
  printf '# test allowlist\nmcp/src/client.rs:api.openai.com\nmcp/src/client.rs:/v1/chat/completions\n' \
    >"$tmp/src/third_party/policy-scan-allowlist.txt"
  if out="$("$SCRIPT" --root "$tmp/src" 2>&1)"; then
    echo "self-test ok: allowlisted marker passes"
  else
    echo "self-test FAILED: allowlist not honoured:"; echo "$out"; failures=$((failures + 1))
  fi

  if [[ $failures -ne 0 ]]; then
    echo "check-no-model-deps self-test: $failures failure(s)"
    return 1
  fi
  echo "check-no-model-deps self-test: all checks caught"
}

case "${1:-}" in
  --self-test) self_test; exit $? ;;
  --root) ROOT="$(cd "${2:?--root needs a directory}" && pwd)" ;;
  "") ;;
  -h|--help) sed -n '2,17p' "$SCRIPT"; exit 0 ;;
  *) echo "usage: $0 [--root DIR | --self-test]" >&2; exit 2 ;;
esac

cd "$ROOT"
ALLOWLIST="third_party/policy-scan-allowlist.txt"
allowed_crates=()
allowed_files=()
allowed_pairs=()
if [[ -f "$ALLOWLIST" ]]; then
  while IFS= read -r line || [[ -n "$line" ]]; do
    line="${line%%#*}"
    line="$(sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' <<<"$line")"
    [[ -z "$line" ]] && continue
    case "$line" in
      crate:*) allowed_crates+=("${line#crate:}") ;;
      *:*) allowed_pairs+=("$line") ;;
      *) allowed_files+=("$line") ;;
    esac
  done <"$ALLOWLIST"
fi

contains() {
  local needle="$1"; shift
  local x
  for x in "$@"; do [[ "$x" == "$needle" ]] && return 0; done
  return 1
}

problems=0
report() {
  echo "check-no-model-deps: $1"
  problems=$((problems + 1))
}

crate_banned() {
  local name="$1"
  [[ "$name" =~ $BANNED_CRATES ]] || return 1
  contains "$name" "${allowed_crates[@]+"${allowed_crates[@]}"}" && return 1
  return 0
}

# Dependency names declared in one manifest, as "LINE NAME" pairs.
manifest_deps() {
  awk '
    function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
    /^[ \t]*\[/ {
      hdr = $0; sub(/#.*/, "", hdr); hdr = trim(hdr)
      indeps = 0
      # [dependencies], [dev-dependencies], [build-dependencies], [workspace.dependencies],
      # [target.X.dependencies] ...
      if (hdr ~ /^\[(.*\.)?(dev-|build-)?dependencies\]$/) { indeps = 1; next }
      # [dependencies.NAME] and friends: the table names one crate.
      if (match(hdr, /(dev-|build-)?dependencies\.[^\]]+\]$/)) {
        name = substr(hdr, RSTART, RLENGTH - 1); sub(/^(dev-|build-)?dependencies\./, "", name)
        gsub(/"/, "", name); print NR, trim(name); intable = 1; next
      }
      intable = 0; next
    }
    indeps && /^[ \t]*[A-Za-z0-9_"-]/ {
      line = $0; sub(/#.*/, "", line)
      key = line; sub(/[=.].*/, "", key); gsub(/"/, "", key); key = trim(key)
      if (key != "") print NR, key
    }
    (indeps || intable) && /package[ \t]*=/ {
      line = $0
      if (match(line, /package[ \t]*=[ \t]*"[^"]+"/)) {
        pkg = substr(line, RSTART, RLENGTH); sub(/^package[ \t]*=[ \t]*"/, "", pkg); sub(/"$/, "", pkg)
        print NR, pkg
      }
    }
  ' "$1"
}

# 1. Manifests.
while IFS= read -r -d '' manifest; do
  rel="${manifest#./}"
  while read -r lineno name; do
    [[ -z "${name:-}" ]] && continue
    if crate_banned "$name"; then
      report "$rel:$lineno: declares model/LLM client crate \`$name\`"
    fi
  done < <(manifest_deps "$manifest")
done < <(find . -name Cargo.toml -not -path './target/*' -not -path '*/target/*' -not -path './.git/*' -not -path '*/node_modules/*' -not -path '*/.venv/*' -print0 | sort -z)

# 2. Lockfile.
if [[ -f Cargo.lock ]]; then
  while read -r lineno name; do
    if crate_banned "$name"; then
      report "Cargo.lock:$lineno: locks model/LLM client package \`$name\`"
    fi
  done < <(awk '/^name = "/ { n = $3; gsub(/"/, "", n); print NR, n }' Cargo.lock)
fi

# 3. Sources.
for dir in "${SCAN_DIRS[@]}"; do
  [[ -d "$dir" ]] || continue
  for marker in "${MARKERS[@]}"; do
    while IFS= read -r hit; do
      [[ -z "$hit" ]] && continue
      file="${hit%%:*}"
      contains "$file" "${allowed_files[@]+"${allowed_files[@]}"}" && continue
      contains "$file:$marker" "${allowed_pairs[@]+"${allowed_pairs[@]}"}" && continue
      rest="${hit#*:}"
      report "$file:${rest%%:*}: contains model-API marker \`$marker\`"
    done < <(grep -rnF --binary-files=without-match --exclude-dir=target --exclude='*.md' \
               -e "$marker" "$dir" 2>/dev/null || true)
  done
done

if [[ $problems -ne 0 ]]; then
  echo "check-no-model-deps: FAILED ($problems problem(s)); CodeSpace must not depend on a model client"
  exit 1
fi
echo "check-no-model-deps: ok (no model/LLM client crates, no model-API markers)"
