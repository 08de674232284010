#!/usr/bin/env bash
# Independent oracle for the policy engine: the upstream Cedar CLI (cedar-policy-cli) must
#   1. strictly validate schema/ + the policy files (base + profiles, concatenated), and
#   2. agree with our engine on every resolved request of our policy tests
#      (`codespace policy test --emit-cedar DIR` → `cedar run-tests`).
# These sets are checked: the shipped one (policies/{base,profiles}) and the worked example of
# docs/policy.md (shipped + policies/examples/profiles), that plus policies/examples/base, and
# the shipped one with each environment guardrail of policies/examples/environments alone.
# Exits non-zero on any disagreement.
#
# Env: CEDAR_VERSION (default 4.14.1); CODESPACE (a built `codespace` binary; default: build it).
set -euo pipefail
cd "$(dirname "$0")/.."

want="${CEDAR_VERSION:-4.14.1}"
have="$(cedar --version 2>/dev/null | awk '{print $NF}' || true)"
if [ "$have" != "$want" ]; then
    echo "ci-cedar: installing cedar-policy-cli $want (found: ${have:-none}); it stays in ~/.cargo/bin"
    cargo install cedar-policy-cli --version "$want" --locked
fi
echo "ci-cedar: upstream $(cedar --version)"

if [ -z "${CODESPACE:-}" ]; then
    cargo build --quiet -p codespace-mcp --bin codespace
    CODESPACE="${CARGO_TARGET_DIR:-target}/debug/codespace"
fi

schema=schema/codespace.cedarschema
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
problems=0

concat() { # concat OUT FILE... : one policies file for the CLI (it takes exactly one)
    local out="$1"; shift
    : > "$out"
    for f in "$@"; do cat "$f" >> "$out"; printf '\n' >> "$out"; done
}

check_set() { # check_set NAME POLICIES_DIR TEST_FILE...
    local name="$1" dir="$2"; shift 2
    local all="$work/$name.cedar" cases="$work/$name-cases"
    concat "$all" "$dir"/base/*.cedar "$dir"/profiles/*.cedar
    echo "── $name: cedar validate (strict)"
    if ! cedar validate --schema "$schema" --policies "$all" --validation-mode strict --deny-warnings; then
        echo "DISAGREE $name: upstream cedar rejects the policy set"; problems=$((problems + 1))
    fi
    echo "── $name: codespace policy test → $cases"
    if ! "$CODESPACE" policy test --policies "$dir" --schema "$schema" --fail-on-empty \
            --emit-cedar "$cases" "$@" > "$work/$name-ours.log"; then
        sed 's/^\([0-9]*\) passed, \([0-9]*\) failed$/our runner: \1 ok, \2 not ok/' "$work/$name-ours.log"
        echo "FAILED $name: our own policy tests fail"; problems=$((problems + 1))
    fi
    local total=0 bad=0 f out n m
    for f in "$cases"/*.cedartests.json; do
        out="$work/$(basename "$f").log"
        if cedar run-tests --policies "$all" --schema "$schema" --tests "$f" > "$out" 2>&1; then :; fi
        # The CLI ends with "results: N passed, M failed"; reword it (that wording is our runners').
        n="$(sed -n 's/^results: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$out")"
        m="$(sed -n 's/^results: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$out")"
        if [ -z "$n" ] || [ -z "$m" ]; then
            echo "DISAGREE $name $(basename "$f"): cedar run-tests gave no result:"
            sed 's/^/    /' "$out" | head -40
            problems=$((problems + 1)); continue
        fi
        total=$((total + n + m)); bad=$((bad + m))
        if [ "$m" != 0 ]; then
            echo "DISAGREE $name $(basename "$f"): $m case(s) where upstream cedar decides otherwise:"
            grep -E '^  test .* \.\.\. (fail|error)' -A2 "$out" | sed 's/^/    /' | head -60
            problems=$((problems + 1))
        fi
    done
    echo "── $name: upstream cedar agrees on $((total - bad)) of $total emitted request(s)"
}

check_set shipped policies policies/tests/*.yaml

# Example profiles add to the shipped set: its tests must still pass beside theirs. Example base
# policies (tests named base-*.yaml) change shipped behaviour on purpose,
# so their set runs the example tests only.
profile_tests=(); base_tests=()
for f in policies/examples/tests/*.yaml; do
    case "$(basename "$f")" in
        base-*) base_tests+=("$f") ;;
        *) profile_tests+=("$f") ;;
    esac
done

example="$work/example-policies"
mkdir -p "$example"
cp -r policies/base policies/profiles "$example"/
cp policies/examples/profiles/*.cedar "$example"/profiles/
# Example base policies scoped to an example profile join the example set; one that changes
# shipped behaviour on purpose (tested by base-<name>.yaml) does not.
for f in policies/examples/base/*.cedar; do
    n="$(basename "$f" .cedar)"
    [ -e "policies/examples/tests/base-$n.yaml" ] || cp "$f" "$example"/base/
done
check_set example "$example" policies/tests/*.yaml "${profile_tests[@]}"

example_base="$work/example-base-policies"
mkdir -p "$example_base"
cp -r "$example"/base "$example"/profiles "$example_base"/
cp policies/examples/base/*.cedar "$example_base"/base/
check_set example-base "$example_base" "${profile_tests[@]}" "${base_tests[@]}"

# The environment guardrails (docs/environments.md) exclude each other: each joins the shipped
# set alone, with its own tests.
for f in policies/examples/environments/*.cedar; do
    n="$(basename "$f" .cedar)"
    env_set="$work/env-$n-policies"
    mkdir -p "$env_set"
    cp -r policies/base policies/profiles "$env_set"/
    cp "$f" "$env_set"/base/
    check_set "env-$n" "$env_set" policies/examples/environments/tests/"$n"*.yaml
done

if [ "$problems" != 0 ]; then
    echo "ci-cedar: FAILED with $problems problem(s)"
    exit 1
fi
echo "ci-cedar: upstream cedar validates both sets and agrees on every emitted case"
