#!/bin/sh
# Quantised weights kept in memory (decoded a tile at a time inside the products) against the same
# weights widened to float32 on load (--weights f32), in the same run: capture's prefill and decode
# rates and peak memory, per ggml type of random:llama-3.2-1b:TYPE (docs/capture.md), and for the
# SmolLM2-135M-Instruct Q4_1 GGUF when it is in the cache. Prints one line per type: tokens/s kept and
# widened, their ratio, and the peak RSS of each (VmHWM, --stats' peak_rss_kib).
#   bench/bench_quant.sh [BUILD]
set -eu
K=${1:-build}/kvtrace
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
/usr/bin/python3 -c "import random; random.seed(1); print([random.randrange(32000) for _ in range(128)])" >"$TMP/p.json"
stat() { # key, stats line
    echo "$2" | tr ' ' '\n' | sed -n "/^$1\$/{n;p;}"
}
one() { # model, label: prefill 128 tokens (chunk 128), then decode 16, kept and widened
    for w in kept f32; do
        extra=; [ $w = f32 ] && extra="--weights f32"
        line=$("$K" capture --model "$1" --tokens "$TMP/p.json" --attention none --dry-run --stats --quiet $extra -o "$TMP/x.h5" 2>&1 | grep capture-stats)
        dec=$("$K" capture --model "$1" --tokens "$TMP/p.json" --generate 16 --attention none --dry-run --stats --quiet $extra -o "$TMP/x.h5" 2>&1 | grep capture-stats)
        eval "pre_$w=$(stat tokens_per_s "$line") rss_$w=$(stat peak_rss_kib "$line") all_$w=$(stat seconds "$dec") one_$w=$(stat seconds "$line")"
    done
    awk -v l="$2" -v pk="$pre_kept" -v pf="$pre_f32" -v ak="$all_kept" -v af="$all_f32" -v ok="$one_kept" -v of="$one_f32" \
        -v rk="$rss_kept" -v rf="$rss_f32" 'BEGIN {
        dk = 16 / (ak - ok); df = 16 / (af - of);
        printf "  %-28s prefill %7.1f vs %7.1f tok/s (%.2fx)  decode %6.2f vs %6.2f tok/s (%.2fx)  peak RSS %6.0f vs %6.0f MiB\n",
               l, pk, pf, pk / pf, dk, df, dk / df, rk / 1024, rf / 1024 }'
}
echo "bench_quant: kept quantised vs widened to float32 on load (capture, 128-token prefill, 16 decoded; 2 threads)"
for t in q8_0 q4_0 q4_k q6_k; do
    one "random:llama-3.2-1b:1:$t" "llama-3.2-1b $t"
done
S=${XDG_CACHE_HOME:-$HOME/.cache}/kvtrace/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$S" ] && one "$S" "SmolLM2-135M Q4_1 (file)"
exit 0
