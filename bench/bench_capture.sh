#!/bin/sh
# make bench (capture): throughput and peak RSS of `kvtrace capture` for
# stories260K and random:llama-3.2-1b at T = 1024 and 4096 (the latter also
# with --weights bf16, and the bf16/f32 ratios of both), with the GEMM
# phase's GFLOP/s next to OpenBLAS sgemm of the model's main shape, measured
# in the same run. Peak RSS must grow with the KV cache, never with T^2.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KV="$ROOT/build/kvtrace"
SGEMM="$ROOT/build/bench_sgemm"
MODELS=${KVTRACE_MODEL_DIR:-$ROOT/../shared/models}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
CHUNK=${BENCH_CHUNK:-128}

printf '%-22s %6s %10s %10s %12s %12s %8s %10s %10s %8s\n' model T tokens/s rss_MiB gemm_GF/s sgemm_GF/s ratio attn_GF/s kv_MiB load_s
bench_one() { # label model T dim kv_bytes_per_token [weights]
    label=$1 model=$2 T=$3 dim=$4 kvtok=$5 weights=${6:-f32}
    echo "$T" | awk '{for (i = 0; i < $1; i++) printf "%d ", (i == 0 ? 1 : 3 + (i * 7919) % 250)}' >"$TMP/tokens"
    /usr/bin/time -f '%M' -o "$TMP/rss" "$KV" capture --quiet --stats --model "$model" --tokens "$TMP/tokens" \
        --chunk "$CHUNK" --weights "$weights" --force -o "$TMP/t.h5" 2>"$TMP/stats"
    rss=$(tail -1 "$TMP/rss")
    stats=$(grep capture-stats "$TMP/stats")
    sg=$("$SGEMM" "$CHUNK" "$dim" "$dim" 1 | awk '{print $6}')
    echo "$stats" | awk -v l="$label" -v T="$T" -v rss="$rss" -v sg="$sg" -v kvtok="$kvtok" '{
        for (i = 2; i < NF; i += 2) v[$i] = $(i + 1)
        printf "%-22s %6d %10.1f %10.1f %12.2f %12.2f %8.2f %10.2f %10.1f %8.2f\n", l, T, v["tokens_per_s"],
            rss / 1024, v["gemm_gflops"], sg, v["gemm_gflops"] / sg, v["attn_gflops"], kvtok * T / 1048576,
            v["load_s"] }' | tee -a "$TMP/rows"
}
# 16-bit weights (docs/capture.md): the bf16 row of label/T against its f32 row, as ratios
ratio16() { # label T
    awk -v a="$1" -v b="$1/bf16" -v T="$2" '$2 == T && $1 == a { f = $3; r = $4; l = $10 }
        $2 == T && $1 == b { printf "%-22s %6d bf16/f32: tokens/s %.2fx, peak RSS %.2fx, load %.2fx\n", b, T,
            $3 / f, $4 / r, $10 / l }' "$TMP/rows"
}
# KV cache bytes per token: 2 (K and V) * L * K * D * 4
bench_one stories260K "$MODELS/stories260K.gguf" 1024 64 $((2 * 5 * 4 * 8 * 4))
bench_one stories260K "$MODELS/stories260K.gguf" 4096 64 $((2 * 5 * 4 * 8 * 4))
bench_one random:llama-3.2-1b random:llama-3.2-1b:1 1024 2048 $((2 * 16 * 8 * 64 * 4))
bench_one random:llama-3.2-1b random:llama-3.2-1b:1 4096 2048 $((2 * 16 * 8 * 64 * 4))
bench_one random:llama-3.2-1b/bf16 random:llama-3.2-1b:1 1024 2048 $((2 * 16 * 8 * 64 * 4)) bf16
bench_one random:llama-3.2-1b/bf16 random:llama-3.2-1b:1 4096 2048 $((2 * 16 * 8 * 64 * 4)) bf16
ratio16 random:llama-3.2-1b 1024
ratio16 random:llama-3.2-1b 4096
echo "(ratio = kvtrace's projection/FFN/logits GEMM rate / OpenBLAS sgemm of a [B x dim] . [dim x dim]^T product)"
