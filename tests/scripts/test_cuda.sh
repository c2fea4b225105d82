#!/bin/sh
# The CUDA backend where CI runs (no GPU): build/libkvtrace_cuda.so is built
# when nvcc is found, holds sm_90 code and PTX, exports only kvcuda_get_api;
# kvtrace itself never links CUDA; `capture --device cuda` exits 1 with one
# clear line and leaves no output; a missing library is the same kind of
# error; `--device cpu` writes the very file a plain capture writes.
# Checks that cannot run here (no nvcc, a GPU present, no model) print TAP # SKIP lines.
#   sh tests/scripts/test_cuda.sh     (tests/run_all.sh sets KVTRACE, ROOT, KVTRACE_MODEL_DIR)
set -u
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
KVTRACE=${KVTRACE:-$ROOT/build/kvtrace}
MODELS=${KVTRACE_MODEL_DIR:-}
NO_MODEL="no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)"
. "$ROOT/tests/lib/tap.sh" # n, failed; pass, fail, skip
check() { # description, command...
    d=$1; shift
    if "$@" >/dev/null 2>&1; then pass "$d"; else fail "$d"; fi
}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvtrace_cuda.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
NVCC=$(ls /usr/local/cuda/bin/nvcc 2>/dev/null || command -v nvcc 2>/dev/null || true)
# the Makefile's rule: the backend needs cuBLAS, the toolkit's or the one make deps took from PyPI
# (scripts/fetch-cublas.sh; some machine images ship nvcc alone)
CUDA_HOME=$(dirname "$(dirname "$(readlink -f "${NVCC:-/nonexistent}")")")
CUBLAS=$(ls "$CUDA_HOME"/include/cublas_v2.h "$CUDA_HOME"/targets/*/include/cublas_v2.h \
    "$("$ROOT/scripts/fetch-cublas.sh" --home)"/include/cublas_v2.h 2>/dev/null | head -n 1)
SO="$ROOT/build/libkvtrace_cuda.so"
BIN_DIR=$(dirname "$KVTRACE")

if [ -n "$NVCC" ] && [ -z "$CUBLAS" ]; then
    # an image with nvcc alone: make leaves the backend out (Makefile) and kvtrace builds without it
    check "nvcc found ($NVCC) without cuBLAS: make leaves the CUDA backend out" test ! -e "$SO"
elif [ -n "$NVCC" ]; then
    check "nvcc found ($NVCC): $SO built" test -f "$SO"
    check "the backend beside $KVTRACE" test -e "$BIN_DIR/libkvtrace_cuda.so"
    syms=$(nm -D --defined-only "$SO" 2>/dev/null | awk '$2 == "T" { print $3 }' | grep -v '^_' | sort | tr '\n' ' ')
    if [ "$syms" = "kvcuda_get_api " ]; then pass "the library exports kvcuda_get_api alone"
    else fail "the library exports kvcuda_get_api alone" "exported: $syms"; fi
    CUOBJDUMP=$(dirname "$NVCC")/cuobjdump
    if [ -x "$CUOBJDUMP" ]; then
        elf=$("$CUOBJDUMP" --list-elf "$SO" 2>&1)
        ptx=$("$CUOBJDUMP" --list-ptx "$SO" 2>&1)
        if echo "$elf" | grep -q sm_90 && echo "$ptx" | grep -q sm_90; then pass "sm_90 machine code and PTX in the library"
        else fail "sm_90 machine code and PTX in the library" "$elf" "$ptx"; fi
    elif strings "$SO" | grep -q '^\.target sm_90'; then
        pass "PTX for sm_90 in the library (no cuobjdump here to list the machine code)"
    else
        fail "PTX for sm_90 in the library"
    fi
else
    skip "the CUDA backend library: built, exports, sm_90 code" "nvcc not found: the CUDA backend is not built here"
fi
if ldd "$KVTRACE" | grep -Eq 'libcuda|libcublas'; then fail "kvtrace does not link CUDA" "$(ldd "$KVTRACE")"
else pass "kvtrace does not link CUDA (the backend is opened only for --device cuda)"; fi

M="$MODELS/stories260K.gguf"
probe=$("$ROOT/build/gpu/test_cuda_kernels" --probe "$SO" 2>&1)
probe_rc=$?
if [ -f "$SO" ] && [ "$probe_rc" -eq 0 ] && echo "$probe" | grep -q '^device:'; then
    skip "--device cuda without a GPU: exit 1 with one clear line" \
        "a GPU is present ($probe): the no-GPU error is not expected here"
elif [ -z "$MODELS" ]; then
    skip "--device cuda without a GPU: exit 1 with one clear line" "$NO_MODEL"
else
    "$KVTRACE" capture --model "$M" --prompt "Once upon" --device cuda -o "$TMP/g.h5" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    lines=$(wc -l <"$TMP/err")
    if [ $rc -eq 1 ] && [ "$lines" -eq 1 ] && grep -q '^kvtrace: error: --device cuda: ' "$TMP/err" &&
        { grep -q 'no usable CUDA device' "$TMP/err" || grep -q 'cannot load the CUDA backend' "$TMP/err"; }; then
        pass "--device cuda without a GPU: exit 1, one line: $(cat "$TMP/err")"
    else
        fail "--device cuda without a GPU: exit 1 with one clear line" "exit $rc" "$(cat "$TMP/err")"
    fi
    check "no output left behind" test ! -e "$TMP/g.h5"
fi
if [ -z "$MODELS" ]; then
    skip "a missing backend library: exit 1 naming it" "$NO_MODEL"
else
    KVTRACE_CUDA_LIB=/nonexistent/libkvtrace_cuda.so "$KVTRACE" capture --model "$M" --device cuda -o "$TMP/g.h5" \
        2>"$TMP/err"
    rc=$?
    if [ $rc -eq 1 ] && grep -q 'cannot load the CUDA backend /nonexistent/libkvtrace_cuda.so' "$TMP/err"; then
        pass "a missing backend library: exit 1 naming it"
    else
        fail "a missing backend library: exit 1 naming it" "exit $rc" "$(cat "$TMP/err")"
    fi
fi

if [ -f "$SO" ] && [ "$probe_rc" -ne 0 ]; then
    for s in tests/gpu/run.sh bench/bench_gpu.sh; do
        out=$(KVTRACE_CUDA_LIB="$SO" sh "$ROOT/$s" build 2>&1)
        rc=$?
        if [ $rc -eq 0 ] && echo "$out" | grep -q 'skipped: --device cuda: '; then pass "$s without a GPU: skips, saying why"
        else fail "$s without a GPU: skips, saying why" "exit $rc" "$out"; fi
    done
fi
if [ -z "$MODELS" ]; then
    skip "--device cpu writes the same data as a plain capture" "$NO_MODEL"
else
    "$KVTRACE" capture --model "$M" --prompt "Once upon a time" --generate 8 --quiet -o "$TMP/plain.h5" &&
        "$KVTRACE" capture --model "$M" --prompt "Once upon a time" --generate 8 --device cpu --quiet -o "$TMP/cpu.h5"
    # the data: /provenance names the command, which differs by --device cpu (docs/provenance.md)
    check "--device cpu writes the same data as a plain capture" \
        /usr/bin/python3 "$ROOT/tests/lib/datacmp.py" "$TMP/plain.h5" "$TMP/cpu.h5"
fi
echo "1..$n"
[ "$failed" -eq 0 ]
