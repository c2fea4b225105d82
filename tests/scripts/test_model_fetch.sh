#!/bin/sh
# The default model's download (model/model_fetch.c), without a network: a
# fake curl on PATH serves a local file. Checked: a good file lands in the user
# cache and capture runs on it; a corrupted one is refused by its sha256 and
# nothing is left behind; no curl, and a failing curl, are one clear error
# that says where to put the file; $KVTRACE_MODEL_DIR is looked at first.
#
#   sh tests/scripts/test_model_fetch.sh   (tests/run_all.sh sets KVTRACE, KVTRACE_MODEL_DIR)
set -u
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
KVTRACE=${KVTRACE:-$ROOT/build/kvtrace}
MODELS=${KVTRACE_MODEL_DIR:-}
unset KVTRACE_MODEL_DIR XDG_CACHE_HOME

. "$ROOT/tests/lib/tap.sh" # n, failed; pass, fail, skip
check() { # description, condition-command...
    d=$1; shift
    if "$@"; then pass "$d"; else fail "$d" "stderr: $(cat "$TMP/err" 2>/dev/null)"; fi
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvtrace_fetch.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/bin" "$TMP/nocurl"
# fake curl: copies $FAKE_SRC to the -o argument, or exits $FAKE_RC
cat >"$TMP/bin/curl" <<'SH'
#!/bin/sh
out=
while [ $# -gt 0 ]; do [ "$1" = "-o" ] && { out=$2; shift; }; shift; done
[ -n "${FAKE_RC:-}" ] && exit "$FAKE_RC"
cat "$FAKE_SRC" >"$out"
SH
chmod +x "$TMP/bin/curl"
for t in sh cat; do ln -s "$(command -v $t)" "$TMP/nocurl/$t"; done

capture() { # HOME, PATH, extra env...: capture with no --model
    h=$1; p=$2; shift 2
    env HOME="$h" PATH="$p" "$@" "$KVTRACE" capture --prompt "Once" --generate 2 --chunk 4 --quiet \
        -o "$h/t.h5" >/dev/null 2>"$TMP/err"
}
leftovers() { find "$1/.cache" -name '.*tmp*' 2>/dev/null | grep -q . && return 1; return 0; }

# no curl at all
mkdir -p "$TMP/h1"
capture "$TMP/h1" "$TMP/nocurl"; rc=$?
check "no curl: exit 1" [ $rc -eq 1 ]
check "no curl: the error names curl, the origin, the sha256 and the directory" \
    grep -q "curl is not installed.*huggingface.co.*270cba1b.*h1/.cache/kvtrace" "$TMP/err"
check "no curl: one error line" [ "$(grep -c '^kvtrace: error:' "$TMP/err")" -eq 1 ]

# curl fails (offline)
capture "$TMP/h1" "$TMP/bin:$PATH" FAKE_RC=6; rc=$?
check "offline: exit 1 and says so" sh -c "[ $rc -eq 1 ] && grep -q 'download failed (offline?)' '$TMP/err'"
check "offline: nothing left in the cache" leftovers "$TMP/h1"

if [ -n "$MODELS" ]; then
    # a corrupted download
    cp "$MODELS/stories260K.gguf" "$TMP/bad.gguf"
    printf 'X' | dd of="$TMP/bad.gguf" bs=1 seek=20000 conv=notrunc 2>/dev/null
    capture "$TMP/h1" "$TMP/bin:$PATH" FAKE_SRC="$TMP/bad.gguf"; rc=$?
    check "corrupted download: exit 1, sha256 named" sh -c "[ $rc -eq 1 ] && grep -q 'sha256 differs' '$TMP/err'"
    check "corrupted download: no model and no temporary file kept" \
        sh -c "[ ! -e '$TMP/h1/.cache/kvtrace/stories260K.gguf' ] && [ ! -e '$TMP/h1/t.h5' ]"
    check "corrupted download: no leftovers" leftovers "$TMP/h1"
    # a good download
    capture "$TMP/h1" "$TMP/bin:$PATH" FAKE_SRC="$MODELS/stories260K.gguf"; rc=$?
    check "good download: capture runs on it" sh -c "[ $rc -eq 0 ] && [ -s '$TMP/h1/t.h5' ]"
    check "good download: kept in the user cache, byte for byte" \
        cmp -s "$TMP/h1/.cache/kvtrace/stories260K.gguf" "$MODELS/stories260K.gguf"
    # found in the cache next time: curl is not needed
    rm -f "$TMP/h1/t.h5"
    capture "$TMP/h1" "$TMP/nocurl"; rc=$?
    check "cached: no download the second time" [ $rc -eq 0 ]
    # XDG_CACHE_HOME and KVTRACE_MODEL_DIR come first
    mkdir -p "$TMP/h2"
    capture "$TMP/h2" "$TMP/nocurl" KVTRACE_MODEL_DIR="$MODELS"; rc=$?
    check "KVTRACE_MODEL_DIR is looked at first" [ $rc -eq 0 ]
    mkdir -p "$TMP/h3" "$TMP/xdg/kvtrace" && cp "$MODELS/stories260K.gguf" "$TMP/xdg/kvtrace/"
    capture "$TMP/h3" "$TMP/nocurl" XDG_CACHE_HOME="$TMP/xdg"; rc=$?
    check "XDG_CACHE_HOME/kvtrace is the user cache when set" [ $rc -eq 0 ]
else
    skip "the download checks with the real model: corrupted, good, cached, KVTRACE_MODEL_DIR and XDG_CACHE_HOME" \
        "no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)"
fi
echo "1..$n"
[ "$failed" -eq 0 ]
