# Sourced (POSIX sh) by tests/run_all.sh and tests/gpu/run.sh: where the test
# model stories260K.gguf is, found as `make demo` finds the default model:
#   1. $KVTRACE_MODEL_DIR;
#   2. a checkout's ../shared/models (only when KVTRACE_MODEL_DIR is unset; it is
#      then exported as KVTRACE_MODEL_DIR, as scripts/demo.sh does);
#   3. the user cache ${XDG_CACHE_HOME:-$HOME/.cache}/kvtrace;
#   4. kvtrace's checked download into that cache (model/model_fetch.c), which a
#      one-token `capture --dry-run` without --model triggers (it writes nothing).
# find_model KVTRACE_BINARY: sets MODEL_GGUF to the file and returns 0, or sets
# MODEL_WHY to one line saying what to put where and returns 1. Needs ROOT.

model_cache_dir() { # as model_fetch.c: XDG_CACHE_HOME when absolute, else HOME/.cache
    case ${XDG_CACHE_HOME:-} in
    /*) echo "$XDG_CACHE_HOME/kvtrace" ;;
    *) [ -z "${HOME:-}" ] || echo "$HOME/.cache/kvtrace" ;;
    esac
}

model_look() { # sets MODEL_GGUF when the file is in $KVTRACE_MODEL_DIR or the cache
    for _d in "${KVTRACE_MODEL_DIR:-}" "$(model_cache_dir)"; do
        if [ -n "$_d" ] && [ -f "$_d/stories260K.gguf" ]; then
            MODEL_GGUF="$_d/stories260K.gguf"
            return 0
        fi
    done
    return 1
}

find_model() {
    MODEL_GGUF=
    MODEL_WHY=
    if [ -z "${KVTRACE_MODEL_DIR:-}" ] && [ -d "$ROOT/../shared/models" ]; then
        KVTRACE_MODEL_DIR=$(cd "$ROOT/../shared/models" && pwd)
        export KVTRACE_MODEL_DIR
    fi
    model_look && return 0
    if [ ! -x "$1" ]; then
        MODEL_WHY="stories260K.gguf is not in \$KVTRACE_MODEL_DIR or $(model_cache_dir),"
        MODEL_WHY="$MODEL_WHY and $1 (which would download it) is not built"
        return 1
    fi
    _tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvtrace_model.XXXXXX") || return 1
    "$1" capture --dry-run --quiet -o "$_tmp/none.h5" >/dev/null 2>"$_tmp/err"
    _rc=$?
    _err=$(grep '^kvtrace: error: ' "$_tmp/err" | tail -n 1)
    [ -n "$_err" ] || _err=$(tail -n 1 "$_tmp/err")
    rm -rf "$_tmp"
    if [ "$_rc" -eq 0 ] && model_look; then
        echo "# downloaded $MODEL_GGUF (sha256 checked)"
        return 0
    fi
    # kvtrace's line says what to put where; "$KVTRACE_MODEL_DIR" gets its value
    MODEL_WHY=$(printf '%s\n' "$_err" | awk -v dir="${KVTRACE_MODEL_DIR:-}" '{
        sub(/^kvtrace: error: /, ""); sub(/, or pass --model$/, "")
        if (dir != "" && (i = index($0, "$KVTRACE_MODEL_DIR")) > 0)
            $0 = substr($0, 1, i + 17) " (" dir ")" substr($0, i + 18)
        print }')
    [ -n "$MODEL_WHY" ] || MODEL_WHY="stories260K.gguf not found, and '$1 capture --dry-run' failed (exit $_rc)"
    return 1
}
