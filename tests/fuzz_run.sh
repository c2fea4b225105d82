#!/bin/sh
# Runs one libFuzzer harness from its seed corpus (after its regression inputs).
#   tests/fuzz_run.sh NAME SECONDS WORKDIR
# NAME: trace_validate (tests/fuzz), gguf, tokens, safetensors, hf_config, hf_tokenizer, csv
# (tests/fuzz_NAME); the binary is build-fuzz/fuzz_NAME. The harness's folder may hold
# regressions/ (inputs that once failed, replayed first), make_seeds.py (writes the seed
# corpus) and NAME.dict (a libFuzzer dictionary). Crash inputs land in WORKDIR; the corpus
# grows in WORKDIR/corpus_NAME. Exit 0 when clean.
# Extra libFuzzer flags come from FUZZ_ARGS (a long run: FUZZ_ARGS=-print_final_stats=1).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAME=$1 SECONDS_=$2 WORK=$3
BIN="$ROOT/build-fuzz/fuzz_$NAME"
PY=/usr/bin/python3
CORPUS="$WORK/corpus_$NAME"
case "$NAME" in
trace_validate) DIR="$ROOT/tests/fuzz" ;;
gguf|tokens|safetensors|hf_config|hf_tokenizer|csv) DIR="$ROOT/tests/fuzz_$NAME" ;;
*) echo "fuzz_run.sh: unknown fuzzer '$NAME'" >&2; exit 2 ;;
esac
mkdir -p "$CORPUS"
if [ -d "$DIR/regressions" ] && [ -n "$(ls "$DIR/regressions")" ]; then
    if ! "$BIN" "$DIR"/regressions/* >"$WORK/regressions_$NAME.log" 2>&1; then
        echo "fuzz_run.sh: a regression input of fuzz_$NAME fails again:" >&2
        tail -30 "$WORK/regressions_$NAME.log" >&2
        exit 1
    fi
fi
if [ -f "$DIR/make_seeds.py" ]; then "$PY" "$DIR/make_seeds.py" "$CORPUS" >/dev/null; fi
DICT=
if [ -f "$DIR/$NAME.dict" ]; then DICT="-dict=$DIR/$NAME.dict"; fi
if [ "$NAME" = tokens ]; then
    printf '\000\377\001[1, 403, 407]\n' >"$CORPUS/json"
    printf '\000\377\0011,2 3\n4, 5' >"$CORPUS/plain"
    printf '\002\000\000Once upon a time, the caf\303\251 \344\270\255\n' >"$CORPUS/text"
    # the real tokenizer as a seed when there is one: the run's test models
    # (tests/run_all.sh sets KVTRACE_MODEL_DIR), else those an earlier make test made
    for M in "${KVTRACE_MODEL_DIR:-/nonexistent}/derived/tok512.bin" "$ROOT"/build/testmodels/*/derived/tok512.bin; do
        if [ -f "$M" ]; then (printf '\001\000\002'; cat "$M") >"$CORPUS/tok512"; break; fi
    done
fi
exec "$BIN" -max_total_time="$SECONDS_" -rss_limit_mb=2048 -artifact_prefix="$WORK/" $DICT ${FUZZ_ARGS:-} "$CORPUS"
