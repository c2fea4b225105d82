#!/bin/sh
# make demo: `kvtrace demo` into out/demo (replacing an earlier one). The
# default model comes from $KVTRACE_MODEL_DIR, a checkout's ../shared/models,
# or ~/.cache/kvtrace, where kvtrace downloads it (sha256 checked) if absent.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/out/demo}
if [ -z "${KVTRACE_MODEL_DIR:-}" ] && [ -d "$ROOT/../shared/models" ]; then
    KVTRACE_MODEL_DIR=$(cd "$ROOT/../shared/models" && pwd)
    export KVTRACE_MODEL_DIR
fi
mkdir -p "$(dirname "$OUT")"
exec "$ROOT/build/kvtrace" demo --force -o "$OUT"
