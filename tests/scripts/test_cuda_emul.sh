#!/bin/sh
# The whole --device cuda path without a GPU: the walk on the CUDA kernel
# table, weights uploaded as F32/F16/BF16, recording through pinned buffers,
# fences and the writer thread, column sums brought back, the memory budget,
# driven through build/emul/libkvcuda_emul.so (a host emulation of the
# backend's ABI, tests/emul/) named by KVTRACE_CUDA_LIB. The GPU's own
# numbers are make test-gpu's; this checks everything around them.
# Without the model (KVTRACE_MODEL_DIR unset) it prints one TAP # SKIP line.
#   sh tests/scripts/test_cuda_emul.sh     (tests/run_all.sh sets KVTRACE, ROOT, BUILD, KVTRACE_MODEL_DIR)
set -u
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
KVTRACE=${KVTRACE:-$ROOT/build/kvtrace}
BUILD=${BUILD:-build}
MODELS=${KVTRACE_MODEL_DIR:-}
EMUL="$ROOT/$BUILD/emul/libkvcuda_emul.so"
CMP="$ROOT/build/gpu/trace_compare"
. "$ROOT/tests/lib/tap.sh" # n, failed; pass, fail, skip
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvtrace_emul.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
if [ ! -f "$EMUL" ] || [ ! -x "$CMP" ]; then
    fail "$EMUL and $CMP built (make tests)"
    echo "1..$n"
    exit 1
fi
if [ -z "$MODELS" ]; then
    skip "--device cuda on the host emulation" "no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)"
    echo "1..$n"
    exit 0
fi
export KVTRACE_CUDA_LIB="$EMUL"
M="$MODELS/stories260K.gguf"

# parity NAME REL ARGS...: the CPU and the emulated device give the same trace
parity() {
    name=$1 rel=$2
    shift 2
    if ! "$KVTRACE" capture --model "$M" "$@" --quiet -o "$TMP/$name.cpu.h5" 2>"$TMP/err" ||
       ! "$KVTRACE" capture --model "$M" "$@" --device cuda --quiet -o "$TMP/$name.dev.h5" 2>>"$TMP/err"; then
        fail "$name: both captures run" "$(cat "$TMP/err")"
        return
    fi
    if "$CMP" "$TMP/$name.cpu.h5" "$TMP/$name.dev.h5" "$rel" >"$TMP/cmp" 2>&1; then
        pass "$name: same tokens; keys, values, queries, column sums within $rel"
    else
        fail "$name: same tokens; keys, values, queries, column sums within $rel" "$(cat "$TMP/cmp")"
    fi
}
parity "prefill in chunks of 5, 30 generated" 1e-5 --prompt "Once upon a time" --generate 30 --chunk 5
# f16 storage: the emulation's attention (one call per head) and the CPU's (blocks of query rows) round
# differently, and a float32 difference of one rounding may move a stored value to the next float16:
# one float16 step, 2^-10 of the value (docs/reproducibility.md)
parity "one chunk, f16 storage, no queries" 1e-3 --prompt "Once upon a time there was" --chunk 64 --dtype f16 \
    --record keys,values
"$KVTRACE" capture --model "$M" --prompt "Once upon a time" --quiet -o "$TMP/a.h5" &&
    "$KVTRACE" capture --model "$M" --prompt "Once upon a time" --device cuda --weights bf16 --quiet -o "$TMP/b.h5" &&
    "$CMP" "$TMP/a.h5" "$TMP/b.h5" 3e-2 >"$TMP/cmp" 2>&1
if [ $? -eq 0 ]; then pass "bf16 weights: within 3e-2 of float32"; else fail "bf16 weights: within 3e-2" "$(cat "$TMP/cmp")"; fi

"$KVTRACE" capture --model "$M" --prompt "Once upon" --device cuda --dry-run --stats -o "$TMP/dry.h5" 2>"$TMP/err"
rc=$?
if [ $rc -eq 0 ] && [ ! -e "$TMP/dry.h5" ] && grep -q 'device_peak_gib' "$TMP/err"; then
    pass "--dry-run: runs, writes nothing, --stats gives the device's peak memory"
else
    fail "--dry-run: runs, writes nothing, --stats gives the device's peak memory" "exit $rc" "$(cat "$TMP/err")"
fi

expect() { # description, exit code, message pattern, args...
    d=$1 code=$2 pat=$3
    shift 3
    "$@" >/dev/null 2>"$TMP/err"
    rc=$?
    if [ $rc -eq "$code" ] && [ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q -- "$pat" "$TMP/err" && [ ! -e "$TMP/x.h5" ]; then
        pass "$d"
    else
        fail "$d" "exit $rc (want $code)" "$(cat "$TMP/err")"
    fi
}
expect "a device without room: refused with the numbers, exit 1" 1 'needs .* GiB of device memory (weights .* + KV cache' \
    env KVCUDA_EMUL_FREE_MIB=1 "$KVTRACE" capture --model "$M" --device cuda -o "$TMP/x.h5"
expect "--evict with --device cuda: exit 2" 2 'evict runs on the CPU only' \
    "$KVTRACE" capture --model "$M" --device cuda --evict keydiff --budget 8 -o "$TMP/x.h5"
expect "--attention full with --device cuda: exit 2" 2 'attention full is not available with --device cuda' \
    "$KVTRACE" capture --model "$M" --device cuda --attention full -o "$TMP/x.h5"
# the CPU holds 16-bit weights too (docs/capture.md; tests/scripts/test_weights16.py)
if "$KVTRACE" capture --quiet --model "$M" --weights bf16 -o "$TMP/cpu16.h5" 2>"$TMP/err"; then
    pass "--weights bf16 without --device cuda: the CPU runs it"
else
    fail "--weights bf16 without --device cuda: the CPU runs it" "$(cat "$TMP/err")"
fi
expect "--weights of another type: exit 2" 2 'weights must be f32, f16 or bf16' \
    "$KVTRACE" capture --model "$M" --device cuda --weights q8 -o "$TMP/x.h5"
echo "1..$n"
[ "$failed" -eq 0 ]
