#!/bin/sh
# make bench-gpu: capture on the GPU (docs/cuda.md). random:llama-3.1-8b with BF16
# weights at T = 8192 (every dataset: keys, values, queries, column sums) and
# T = 32768 (--dtype f16 --record keys,values), each with recording on and
# off (--dry-run: the same walk, nothing copied back or written), and the
# disk's write bandwidth measured in the same run. Prints tokens/s, peak
# device memory, the cost of recording (goal: at most 25% over the bare
# forward, or bound by the disk), and the attention kernels' rate as a
# fraction of the device's float32 peak. Skips without a usable GPU.
#   bench/bench_gpu.sh [BUILD_DIR]     (KVTRACE_BENCH_DIR: where traces go)
set -u
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KV="$ROOT/$BUILD/kvtrace"
LIB=${KVTRACE_CUDA_LIB:-$ROOT/build/libkvtrace_cuda.so}
export KVTRACE_CUDA_LIB="$LIB"
MODEL=${KVTRACE_BENCH_MODEL:-random:llama-3.1-8b}
T1=${KVTRACE_BENCH_T1:-8192}
T2=${KVTRACE_BENCH_T2:-32768}
VOCAB=${KVTRACE_BENCH_VOCAB:-128000}     # ids drawn below this (the model's vocabulary)
PEAK_F32=${KVTRACE_PEAK_F32_TFLOPS:-67} # H200 SXM datasheet, plain float32
if [ ! -e "$LIB" ]; then
    echo "bench-gpu: skipped: $LIB was not built (nvcc not found)"
    exit 0
fi
probe=$("$ROOT/$BUILD/gpu/test_cuda_kernels" --probe "$LIB" 2>&1) || {
    echo "bench-gpu: skipped: $probe"
    exit 0
}
echo "# $probe"
DIR=${KVTRACE_BENCH_DIR:-$ROOT/out/bench-gpu}
mkdir -p "$DIR"

# the disk the traces go to: 4 GiB written and synced
dd_out=$(dd if=/dev/zero of="$DIR/dd.bin" bs=16M count="${KVTRACE_BENCH_DD_COUNT:-256}" conv=fdatasync 2>&1 | tail -1)
rm -f "$DIR/dd.bin"
disk_bps=$(echo "$dd_out" | awk '{ for (i = 1; i < NF; i++) if ($(i+1) == "s,") s = $i; print $1 / s }')
echo "disk: $dd_out  => $(awk -v b="$disk_bps" 'BEGIN { printf "%.2f GB/s", b / 1e9 }')"

ids() { # T -> file of T random token ids
    awk -v n="$1" -v v="$VOCAB" 'BEGIN { srand(11); printf "1"; for (i = 1; i < n; i++) printf " %d", int(rand() * v); print "" }' \
        >"$DIR/ids$1.txt"
}
ids "$T1"
ids "$T2"

# run LABEL T ARGS... : one capture; prints its figures, keeps seconds in $DIR/LABEL.s
run() {
    label=$1 T=$2
    shift 2
    rm -f "$DIR/t.h5"
    if ! "$KV" capture --model "$MODEL" --weights bf16 --tokens "$DIR/ids$T.txt" --chunk 512 --device cuda --stats \
        --quiet --force -o "$DIR/t.h5" "$@" 2>"$DIR/$label.err"; then
        echo "$label: FAILED: $(tail -1 "$DIR/$label.err")"
        return
    fi
    bytes=$(stat -c %s "$DIR/t.h5" 2>/dev/null || echo 0)
    grep capture-stats "$DIR/$label.err" | awk -v l="$label" -v b="$bytes" -v p="$PEAK_F32" -v d="$disk_bps" '{
        for (i = 2; i < NF; i += 2) v[$i] = $(i + 1)
        printf "%-10s T %6d  %8.1f tokens/s  %7.2f s  peak device %6.2f GiB  trace %6.2f GB (disk alone %.1f s)  attention %.2f TFLOP/s = %.1f%% of %g\n",
               l, v["tokens"], v["tokens_per_s"], v["seconds"], v["device_peak_gib"], b / 1e9, b / d,
               v["attn_gflops"] / 1e3, v["attn_gflops"] / 1e3 / p * 100, p
        print v["seconds"] > "'"$DIR"'/" l ".s"
        print b / d > "'"$DIR"'/" l ".disk"
    }'
    rm -f "$DIR/t.h5"
}
run "T$T1-rec" "$T1" --record keys,values,queries --attention colsum
run "T$T1-bare" "$T1" --record keys,values,queries --attention colsum --dry-run
run "T$T2-rec" "$T2" --dtype f16 --record keys,values
run "T$T2-bare" "$T2" --dtype f16 --record keys,values --dry-run

verdict() { # on, off
    [ -f "$DIR/$1.s" ] && [ -f "$DIR/$2.s" ] || return
    awk -v on="$(cat "$DIR/$1.s")" -v off="$(cat "$DIR/$2.s")" -v disk="$(cat "$DIR/$1.disk")" -v l="$1" 'BEGIN {
        cost = (on - off) / off * 100
        bound = disk >= on * 0.75
        printf "%s: recording costs %.1f%% over the bare forward (%.2f s vs %.2f s); writing the trace alone takes %.2f s at the measured disk rate: %s\n",
               l, cost, on, off, disk, cost <= 25 ? "within the 25% goal" : bound ? "over 25%, bound by the disk" : "over 25% and NOT bound by the disk"
    }'
}
verdict "T$T1-rec" "T$T1-bare"
verdict "T$T2-rec" "T$T2-bare"
