#!/bin/sh
# The test runner's own rules: tests/lib/tap_count.awk counts passes, failures
# and TAP # SKIP lines (cmocka's "not ok N # SKIP name" after "# skip: REASON",
# the scripts' "ok N - what # SKIP REASON", a "1..0 # SKIP" plan) with each
# skip's reason; tests/lib/find_model.sh finds the model as the demo does
# ($KVTRACE_MODEL_DIR, ../shared/models beside the checkout, the user cache, the
# checked download, here from a fake curl) or says in one line what to put
# where; tests/run_all.sh without the model fails with that one line.
#   sh tests/scripts/test_run_all.sh   (tests/run_all.sh sets ROOT, KVTRACE, KVTRACE_MODEL_DIR)
set -u
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
KVTRACE=${KVTRACE:-$ROOT/build/kvtrace}
MODELS=${KVTRACE_MODEL_DIR:-}
. "$ROOT/tests/lib/tap.sh" # n, failed; pass, fail, skip
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvtrace_runall.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT

# ---- counting
count() { # TAP text (a printf format), expected "P F S", expected reasons (one per line), description
    printf "$1" >"$TMP/tap"
    shift
    : >"$TMP/skips"
    got=$(awk -v name=prog -v skips="$TMP/skips" -f "$ROOT/tests/lib/tap_count.awk" "$TMP/tap")
    reasons=$(cut -f1 "$TMP/skips")
    if [ "$got" = "$1" ] && [ "$reasons" = "$2" ]; then pass "$3"
    else fail "$3" "counts '$got' (want '$1')" "reasons: $reasons" "want: $2"; fi
}
count 'ok 1 - a\nnot ok 2 - b\nok 3 - skips, saying why\n1..3\n' "2 1 0" "" \
    "ok and not ok lines count as passed and failed; the word skip alone is no directive"
count 'ok 1 - a\n# skip: no test model\nnot ok 2 # SKIP stories_bitwise\nok 3 - c\n' "2 0 1" "no test model" \
    "cmocka's skip() line ('not ok N', SKIP directive, test name) is skipped, not failed; its reason is the line before"
count 'ok 1 - x # SKIP nvcc not found\nok 2 - y # skip lower case\n' "0 0 2" "nvcc not found
lower case" "a script's 'ok N - what' with a SKIP directive and reason is skipped, not passed, in any case"
count '1..0 # SKIP nothing to do here\n' "0 0 1" "nothing to do here" "a '1..0' plan with a SKIP directive is one skip"
count '# skip: stale\nok 1 - a\nok 2 - b # SKIP fresh\n' "1 0 1" "fresh" \
    "a reason line (skip:) applies only to the result right after it"

# ---- finding the model
mkdir -p "$TMP/bin" "$TMP/nocurl" "$TMP/root" "$TMP/home" "$TMP/empty"
cat >"$TMP/bin/curl" <<'SH'
#!/bin/sh
out=
while [ $# -gt 0 ]; do [ "$1" = "-o" ] && { out=$2; shift; }; shift; done
[ -n "${FAKE_SRC:-}" ] || exit 6
cat "$FAKE_SRC" >"$out"
SH
chmod +x "$TMP/bin/curl"
for t in sh cat; do ln -s "$(command -v $t)" "$TMP/nocurl/$t"; done
find_in() { # env assignments...: runs find_model there; prints rc, MODEL_GGUF, KVTRACE_MODEL_DIR, MODEL_WHY
    env -u KVTRACE_MODEL_DIR -u XDG_CACHE_HOME HOME="$TMP/home" PATH="$TMP/nocurl" "$@" \
        FM="$ROOT/tests/lib/find_model.sh" KV="$KVTRACE" /bin/sh -c \
        '. "$FM"; find_model "$KV" >/dev/null; echo "$?"; echo "$MODEL_GGUF"; echo "${KVTRACE_MODEL_DIR:-}"
         echo "$MODEL_WHY"'
}
if [ -z "$MODELS" ]; then
    skip "find_model: KVTRACE_MODEL_DIR, ../shared/models, the cache, the checked download, in that order" \
        "no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)"
else
    G="$MODELS/stories260K.gguf"
    mkdir -p "$TMP/a" "$TMP/shared/models" "$TMP/xdg/kvtrace" "$TMP/home/.cache/kvtrace"
    cp "$G" "$TMP/a/" && cp "$G" "$TMP/shared/models/" && cp "$G" "$TMP/xdg/kvtrace/"
    out=$(find_in ROOT="$TMP/root" KVTRACE_MODEL_DIR="$TMP/a" XDG_CACHE_HOME="$TMP/xdg")
    if [ "$(echo "$out" | sed -n 1,2p | tr '\n' ' ')" = "0 $TMP/a/stories260K.gguf " ]; then
        pass "find_model: \$KVTRACE_MODEL_DIR first"
    else fail "find_model: \$KVTRACE_MODEL_DIR first" "$out"; fi
    out=$(find_in ROOT="$TMP/root" XDG_CACHE_HOME="$TMP/xdg")
    if [ "$(echo "$out" | sed -n 1,3p | tr '\n' ' ')" = "0 $TMP/shared/models/stories260K.gguf $TMP/shared/models " ]
    then pass "find_model: then ../shared/models beside the checkout, exported as KVTRACE_MODEL_DIR"
    else fail "find_model: then ../shared/models beside the checkout" "$out"; fi
    out=$(find_in ROOT="$TMP/nowhere" XDG_CACHE_HOME="$TMP/xdg")
    if [ "$(echo "$out" | sed -n 1,2p | tr '\n' ' ')" = "0 $TMP/xdg/kvtrace/stories260K.gguf " ]; then
        pass "find_model: then the user cache (\$XDG_CACHE_HOME/kvtrace)"
    else fail "find_model: then the user cache" "$out"; fi
    out=$(find_in ROOT="$TMP/nowhere" PATH="$TMP/bin:$PATH" FAKE_SRC="$G")
    if [ "$(echo "$out" | sed -n 1,2p | tr '\n' ' ')" = "0 $TMP/home/.cache/kvtrace/stories260K.gguf " ] &&
        cmp -s "$G" "$TMP/home/.cache/kvtrace/stories260K.gguf"; then
        pass "find_model: then kvtrace's checked download into ~/.cache/kvtrace"
    else fail "find_model: then kvtrace's checked download" "$out"; fi
fi
rm -rf "$TMP/home/.cache"
out=$(find_in ROOT="$TMP/nowhere" KVTRACE_MODEL_DIR="$TMP/empty" PATH="$TMP/bin:$PATH")
why=$(echo "$out" | sed -n '4,$p')
want="not in \$KVTRACE_MODEL_DIR ($TMP/empty) or $TMP/home/.cache/kvtrace and the download failed (offline?);"
want="$want download it from https://.* into $TMP/home/.cache/kvtrace\$"
if [ "$(echo "$out" | head -n 1)" = 1 ] && [ "$(echo "$why" | wc -l)" -eq 1 ] && echo "$why" | grep -q "$want"; then
    pass "find_model offline: one line saying what to put where"
else fail "find_model offline: one line saying what to put where" "$out"; fi

# ---- the runner without the model (curl fails: offline)
env -u SKIP_MODEL_TESTS KVTRACE_MODEL_DIR="$TMP/empty" XDG_CACHE_HOME="$TMP/xdg-empty" PATH="$TMP/bin:$PATH" \
    "$ROOT/tests/run_all.sh" "${BUILD:-build}" >"$TMP/out" 2>"$TMP/err"
rc=$?
want="^make test: .*download failed (offline?); download it from .* into $TMP/xdg-empty/kvtrace;"
want="$want or run make test SKIP_MODEL_TESTS=1"
if [ $rc -eq 1 ] && [ ! -s "$TMP/out" ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "$want" "$TMP/err"; then
    pass "run_all.sh without the model: exit 1 before any test, one line: the file, where it goes, SKIP_MODEL_TESTS=1"
else
    fail "run_all.sh without the model: exit 1, one line" "exit $rc" "$(cat "$TMP/out" "$TMP/err")"
fi
echo "1..$n"
[ "$failed" -eq 0 ]
