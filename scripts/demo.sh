#!/bin/sh
# The pipeline as far as it exists today: a capture of the default model
# (stories260K, from $KVTRACE_MODEL_DIR or ~/.cache/kvtrace), replayed by
# `kvtrace sim` under every attention-free policy, and a synthetic trace of
# the same shape. analyze and plot arrive with issue #6 (and the download of
# a missing model).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/out/demo}
KV="$ROOT/build/kvtrace"
if [ -z "${KVTRACE_MODEL_DIR:-}" ] && [ -d "$ROOT/../shared/models" ]; then
    KVTRACE_MODEL_DIR=$(cd "$ROOT/../shared/models" && pwd)
    export KVTRACE_MODEL_DIR
fi
mkdir -p "$OUT"
"$KV" capture --prompt "Once upon a time" --generate 400 --chunk 32 --print --force -o "$OUT/story.h5"
"$KV" info "$OUT/story.h5"
"$KV" sim "$OUT/story.h5" --policies full,keydiff,keydiff:window=0.2,knorm,streaming,random,primekv \
    --budgets 32,64,128 --chunk 32 --force -o "$OUT/sim"
"$KV" synth --like stories260k --tokens 512 --prompt-len 400 --seed 1 --force -o "$OUT/synth-stories260k.h5"
"$KV" info "$OUT/synth-stories260k.h5"
echo "demo: wrote $OUT/story.h5, $OUT/sim/ and $OUT/synth-stories260k.h5 (analyze/plot: not implemented yet)"
