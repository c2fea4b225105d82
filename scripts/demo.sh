#!/bin/sh
# The pipeline as far as it exists today: a synthetic trace in the shape of the
# default model (stories260K), described by `kvtrace info`. capture, sim,
# analyze and plot arrive with issues #3-#6; then this runs the whole pipeline
# on the real model.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/out/demo}
mkdir -p "$OUT"
"$ROOT/build/kvtrace" synth --like stories260k --tokens 512 --prompt-len 400 --seed 1 --force \
    -o "$OUT/synth-stories260k.h5"
"$ROOT/build/kvtrace" info "$OUT/synth-stories260k.h5"
echo "demo: wrote $OUT/synth-stories260k.h5 (capture/sim/analyze/plot: not implemented yet)"
