#!/bin/sh
# Runs every test program and script and ends with one combined count.
#   tests/run_all.sh BUILD_DIR [BUILD_DIR ...]
# For each build directory (e.g. build and the ASan build build-asan) it runs
# the unit tests and the scripts with that build's kvtrace; then, for each
# harness named in FUZZERS, a short libFuzzer run (FUZZ_SMOKE_SECONDS, default 5).
# Unit tests are cmocka programs in BUILD_DIR/tests (TAP output); scripts in
# tests/scripts/*.sh and tests/scripts/*.py print TAP lines too ("ok N - ...",
# "not ok N - ..."). A program that crashes or exits non-zero without a
# "not ok" line counts as one failure of its own.
set -u
[ $# -ge 1 ] || set -- build
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export ROOT
# test models, found as the demo finds the default model: KVTRACE_MODEL_DIR, a
# checkout beside shared/, then the user cache (where `make demo` downloads it)
CACHE_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/kvtrace
if [ -z "${KVTRACE_MODEL_DIR:-}" ] && [ -d "$ROOT/../shared/models" ]; then
    KVTRACE_MODEL_DIR=$(cd "$ROOT/../shared/models" && pwd)
elif [ -z "${KVTRACE_MODEL_DIR:-}" ] && [ -f "$CACHE_DIR/stories260K.gguf" ]; then
    KVTRACE_MODEL_DIR=$CACHE_DIR
fi
[ -n "${KVTRACE_MODEL_DIR:-}" ] && export KVTRACE_MODEL_DIR
export CMOCKA_MESSAGE_OUTPUT=TAP
PY=/usr/bin/python3
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT
passed=0
failed=0

run_one() { # name, command...
    name=$1
    shift
    out="$LOG/out"
    "$@" >"$out" 2>&1
    rc=$?
    p=$(grep -c '^ok ' "$out")
    f=$(grep -c '^not ok ' "$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1
        echo "not ok - $name exited with status $rc" >>"$out"
    fi
    if [ "$f" -gt 0 ]; then
        echo "== $name: $p passed, $f failed"
        grep -v '^ok ' "$out" | sed 's/^/   /' | head -60
    else
        echo "== $name: $p passed"
    fi
    passed=$((passed + p))
    failed=$((failed + f))
}

for BUILD in "$@"; do
    KVTRACE="$ROOT/$BUILD/kvtrace"
    export KVTRACE BUILD
    for t in "$ROOT/$BUILD"/tests/test_*; do
        [ -x "$t" ] || continue
        run_one "$BUILD/$(basename "$t")" "$t"
    done
    for s in "$ROOT"/tests/scripts/*.sh; do
        [ -f "$s" ] || continue
        run_one "$BUILD: $(basename "$s")" sh "$s"
    done
    for s in "$ROOT"/tests/scripts/*.py; do
        [ -f "$s" ] || continue
        run_one "$BUILD: $(basename "$s")" "$PY" "$s"
    done
done

# a short run of every fuzz harness (after its regression inputs)
secs=${FUZZ_SMOKE_SECONDS:-5}
for f in ${FUZZERS:-}; do
    fuzz_smoke() {
        if "$ROOT/tests/fuzz_run.sh" "$1" "$secs" "$LOG" >"$LOG/fuzz" 2>&1; then
            echo "ok 1 - fuzz_$1 ran $secs s clean: $(grep -o 'Done [0-9]* runs' "$LOG/fuzz")"
        else
            echo "not ok 1 - fuzz_$1 found a failure"
            tail -40 "$LOG/fuzz"
            cat "$LOG"/regressions_*.log 2>/dev/null | tail -20
        fi
    }
    run_one "fuzz_$f smoke ($secs s)" fuzz_smoke "$f"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
