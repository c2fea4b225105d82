#!/bin/sh
# make bench (eviction): peak RSS of `kvtrace capture` with eviction inside
# the run (--evict POLICY --budget 128 --chunk 32) against the same capture
# with the full cache, on stories260K over --tokens files of growing T. The
# evicting run's caches hold N + B rows whatever T (cache_rows and
# cache_peak_rows, the cache's own counter), and the policies' state follows
# the cache, so its peak RSS must be flat in T up to the O(T) that any run
# keeps: the token ids and the RoPE table (D floats per position), and the
# HDF5 chunk index of the trace it writes (bounded by the writer's metadata
# cache). Fails when it grows by more than 1/8 of what the full KV cache adds
# per token (2 L K D floats).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KV="$ROOT/build/kvtrace"
MODELS=${KVTRACE_MODEL_DIR:-$ROOT/../shared/models}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
N=128 B=32
KV_PER_TOKEN=$((2 * 5 * 4 * 8 * 4)) # stories260K: 2 L K D float32

printf '%-10s %7s %10s %11s %16s %10s\n' run T rss_MiB cache_rows cache_peak_rows tokens/s
one() { # label T args...
    label=$1 T=$2
    shift 2
    echo "$T" | awk '{for (i = 0; i < $1; i++) printf "%d ", (i == 0 ? 1 : 3 + (i * 7919) % 250)}' >"$TMP/tokens"
    /usr/bin/time -f '%M' -o "$TMP/rss" "$KV" capture --quiet --stats --model "$MODELS/stories260K.gguf" \
        --tokens "$TMP/tokens" --chunk "$B" --attention none --force -o "$TMP/t.h5" "$@" 2>"$TMP/stats"
    rss=$(tail -1 "$TMP/rss")
    grep capture-stats "$TMP/stats" | awk -v l="$label" -v T="$T" -v rss="$rss" '{
        for (i = 2; i < NF; i += 2) v[$i] = $(i + 1)
        printf "%-10s %7d %10.1f %11d %16d %10.1f\n", l, T, rss / 1024, v["cache_rows"], v["cache_peak_rows"],
            v["tokens_per_s"] }'
    echo "$T $rss" >>"$TMP/all_$label"
}
per_token() { # file -> bytes of peak RSS per token between its first and last run
    awk 'NR == 1 {t0 = $1; r0 = $2} {t1 = $1; r1 = $2} END {printf "%d", (r1 - r0) * 1024 / (t1 - t0)}' "$1"
}
for T in 1024 4096 16384; do one full "$T"; done
fails=0
for P in keydiff h2o; do
    for T in 16384 131072; do one "$P" "$T" --evict "$P" --budget "$N"; done
    g=$(per_token "$TMP/all_$P")
    echo "  $P: peak RSS grows $g bytes per token (the full KV cache adds $KV_PER_TOKEN)"
    [ "$g" -le $((KV_PER_TOKEN / 8)) ] || fails=$((fails + 1))
done
echo "  full cache: peak RSS grows $(per_token "$TMP/all_full") bytes per token"
if [ "$fails" -gt 0 ]; then
    echo "FAIL: an evicting run's peak RSS grew with T at fixed N (more than 1/8 of the KV cache's growth)"
    exit 1
fi
echo "ok: peak RSS of the evicting runs is flat in T at N = $N, B = $B (KV memory: N + B rows per layer and kv head)"
