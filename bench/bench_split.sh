#!/bin/sh
# The cost of the fixed split (docs/reproducibility.md): each projection of SmolLM2-135M (dim 576,
# FFN 1536, vocabulary 49152) and of Llama-3.2-1B (2048, 8192, 128256) for a prompt chunk of 128
# rows and a decoding step of 1, on every core: kvtrace's split against OpenBLAS's own threads in the
# same run (bench_split). Prints one line per shape and the geometric mean of the ratios.
#   bench/bench_split.sh [BUILD]
set -eu
B=${1:-build}/bench_split
T=$(nproc)
echo "== the fixed split of the CPU products vs OpenBLAS's own threads ($T threads; ratio > 1: the split is faster)"
for m in 128 1; do
    for s in "576 576" "1536 576" "576 1536" "49152 576" "2048 2048" "8192 2048" "2048 8192" "128256 2048"; do
        set -- $s
        "$B" "$m" "$1" "$2" "$T" 0.5
    done
done | tee /tmp/kvtrace_bench_split.$$ | sed 's/^/  /'
awk '{ s += log($NF); n++ } END { printf "  geometric mean of the ratios: %.3f over %d shapes\n", exp(s / n), n }' \
    /tmp/kvtrace_bench_split.$$
rm -f /tmp/kvtrace_bench_split.$$
