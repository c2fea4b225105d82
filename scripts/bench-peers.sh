#!/bin/sh
# make bench-peers: kvpress 0.5.5's own pipeline beside kvtrace's in-model eviction on SmolLM2-135M-Instruct
# (bench/peer_kvpress_pipeline.py; docs/findings.md, "kvpress's pipeline side by side"). The sub-grid: niah at
# BENCH_PEERS_LENGTH tokens (1024) with --chat, depths 0.1, 0.5, 0.9 x seeds 0, 1 (6 prompts); the full cache and
# six presses (knorm, keydiff, snapkv, tova, streaming, expected_attention) at compression ratios 0.5 and 0.875;
# 16 new tokens; both sides on the machine's CPUs, one after the other per configuration. Needs the test venv and
# the model (tests/lib/real_setup.sh makes or finds both). Writes OUT (out/bench-peers): prompts.jsonl,
# peer_kvpress.csv (per prompt and configuration), peer_kvpress_summary.csv; prints the table and the wall times.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
OUT=${OUT:-$ROOT/out/bench-peers}
LOG=$(mktemp -d)
trap 'rm -rf "$LOG"' EXIT
. "$ROOT/tests/lib/real_setup.sh"
if ! real_setup "$BUILD"; then
    echo "bench-peers: $REAL_WHY" >&2
    exit 1
fi
mkdir -p "$OUT"
"$ROOT/$BUILD/kvtrace" prompts niah --chat --model "$REAL_MODEL" --lengths "${BENCH_PEERS_LENGTH:-1024}" \
    --depths 0.1,0.5,0.9 --seeds 0,1 --force -o "$OUT/prompts.jsonl"
exec "$REAL_PY" "$ROOT/bench/peer_kvpress_pipeline.py" --kvtrace "$ROOT/$BUILD/kvtrace" --model "$REAL_MODEL" \
    --prompts "$OUT/prompts.jsonl" --ratios "${BENCH_PEERS_RATIOS:-0.5,0.875}" -o "$OUT"
