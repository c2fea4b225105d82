#!/bin/sh
# Runs every test program and script and ends with one combined count.
#   tests/run_all.sh BUILD_DIR
# Unit tests are cmocka programs in BUILD_DIR/tests (TAP output); scripts in
# tests/scripts/*.sh and tests/scripts/*.py print TAP lines too ("ok N - ...",
# "not ok N - ..."). A program that crashes or exits non-zero without a
# "not ok" line counts as one failure of its own.
set -u
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KVTRACE="$ROOT/$BUILD/kvtrace"
export KVTRACE BUILD ROOT
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

for t in "$ROOT/$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
for s in "$ROOT"/tests/scripts/*.sh; do
    [ -f "$s" ] || continue
    run_one "$(basename "$s")" sh "$s"
done
for s in "$ROOT"/tests/scripts/*.py; do
    [ -f "$s" ] || continue
    run_one "$(basename "$s")" "$PY" "$s"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
