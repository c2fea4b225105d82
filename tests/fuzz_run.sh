#!/bin/sh
# Runs one libFuzzer harness from its seed corpus (after its regression inputs).
#   tests/fuzz_run.sh NAME SECONDS WORKDIR
# NAME: trace_validate (tests/fuzz), gguf (tests/fuzz_gguf), tokens (tests/fuzz_tokens),
# safetensors (tests/fuzz_safetensors);
# the binary is build-fuzz/fuzz_NAME. Crash inputs land in WORKDIR. Exit 0 when clean.
# Extra libFuzzer flags come from FUZZ_ARGS (a long run: FUZZ_ARGS=-print_final_stats=1).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAME=$1 SECONDS_=$2 WORK=$3
BIN="$ROOT/build-fuzz/fuzz_$NAME"
PY=/usr/bin/python3
CORPUS="$WORK/corpus_$NAME"
mkdir -p "$CORPUS"
case "$NAME" in
trace_validate)
    "$BIN" "$ROOT"/tests/fuzz/regressions/* >"$WORK/regressions_$NAME.log" 2>&1
    "$PY" "$ROOT/tests/fuzz/make_seeds.py" "$CORPUS" >/dev/null ;;
gguf)
    "$PY" "$ROOT/tests/fuzz_gguf/make_seeds.py" "$CORPUS" >/dev/null ;;
tokens)
    printf '\000\377\001[1, 403, 407]\n' >"$CORPUS/json"
    printf '\000\377\0011,2 3\n4, 5' >"$CORPUS/plain"
    printf '\002\000\000Once upon a time, the caf\303\251 \344\270\255\n' >"$CORPUS/text"
    # the real tokenizer as a seed when there is one: the run's test models
    # (tests/run_all.sh sets KVTRACE_MODEL_DIR), else those an earlier make test made
    for M in "${KVTRACE_MODEL_DIR:-/nonexistent}/derived/tok512.bin" "$ROOT"/build/testmodels/*/derived/tok512.bin; do
        if [ -f "$M" ]; then (printf '\001\000\002'; cat "$M") >"$CORPUS/tok512"; break; fi
    done ;;
safetensors)
    "$BIN" "$ROOT"/tests/fuzz_safetensors/regressions/* >"$WORK/regressions_$NAME.log" 2>&1
    "$PY" "$ROOT/tests/fuzz_safetensors/make_seeds.py" "$CORPUS" >/dev/null ;;
*) echo "fuzz_run.sh: unknown fuzzer '$NAME'" >&2; exit 2 ;;
esac
exec "$BIN" -max_total_time="$SECONDS_" -rss_limit_mb=2048 -artifact_prefix="$WORK/" ${FUZZ_ARGS:-} "$CORPUS"
