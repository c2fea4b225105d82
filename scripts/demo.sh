#!/bin/sh
# make demo: `kvtrace demo --model smollm2-135m` into out/demo (replacing an earlier one):
# the whole pipeline on SmolLM2-135M-Instruct (KVTRACE_DEMO_MODEL names another model,
# stories260k the tests' default). The model comes from $KVTRACE_MODEL_DIR or
# ~/.cache/kvtrace, where kvtrace fetches it (sha256 checked) if absent (docs/models.md).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/out/demo}
if [ -z "${KVTRACE_MODEL_DIR:-}" ] && [ -d "$ROOT/../shared/models" ]; then
    KVTRACE_MODEL_DIR=$(cd "$ROOT/../shared/models" && pwd)
    export KVTRACE_MODEL_DIR
fi
mkdir -p "$(dirname "$OUT")"
exec "$ROOT/build/kvtrace" demo --model "${KVTRACE_DEMO_MODEL:-smollm2-135m}" --force -o "$OUT"
