#!/bin/sh
# The one prepared script a device call runs (the GPU machine has CUDA 13 and
# its driver but no HDF5/OpenBLAS/LAPACKE and no ../shared): unpacks the
# bundle from scripts/device-bundle.sh, puts its libraries on
# LD_LIBRARY_PATH, runs test-gpu then bench-gpu, and leaves the logs in $OUT.
#   sh scripts/device-run.sh [device/kvtrace-device.tar.xz]
# Budget: about 9 minutes in all (test-gpu at most 180 s, bench-gpu 330 s).
set -u
TARBALL=${1:-device/kvtrace-device.tar.xz}
OUT=${OUT:-/tmp/kvtrace-out}
W=/tmp/kvtrace-device
mkdir -p "$OUT" && rm -rf "$W"
# tar -J needs the xz program; Python's lzma module is the fallback
tar -C /tmp -xJf "$TARBALL" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall("/tmp")' "$TARBALL" ||
    { echo "cannot unpack $TARBALL"; exit 1; }
# CUDA's libraries: the toolkit's, or the ones PyTorch's packages carry
CUDALIB=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
         $(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null); do
    [ -d "$d" ] && CUDALIB="$CUDALIB:$d"
done
export LD_LIBRARY_PATH="$W/lib$CUDALIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# KVTRACE_REHEARSAL_LIB: another backend (tests/emul) to rehearse this script without a GPU
export KVTRACE_MODEL_DIR="$W/models" KVTRACE_CUDA_LIB="${KVTRACE_REHEARSAL_LIB:-$W/build/libkvtrace_cuda.so}"
export KVTRACE_BENCH_DIR=/tmp/kvtrace-bench KVTRACE_GPU_OUT=/tmp/kvtrace-gpu
{ nvidia-smi; uname -a; ldd "$W/build/kvtrace" "$KVTRACE_CUDA_LIB"; } >"$OUT/machine.txt" 2>&1
if ! "$W/build/kvtrace" --version >/dev/null 2>&1; then
    # the binary will not start here: build it from this checkout against the carried headers and libraries
    echo "# kvtrace does not start here ($("$W/build/kvtrace" --version 2>&1 | head -1)): building" | tee "$OUT/build.log"
    make -j16 all build/gpu/test_cuda_kernels build/gpu/trace_compare PKG_CFLAGS="-I$W/include" \
        PKG_LIBS="-L$W/lib -lhdf5_serial -lopenblas -llapacke -ljansson -lcrypto" >>"$OUT/build.log" 2>&1 &&
        cp build/kvtrace build/libkvtrace_cuda.so "$W/build/" && cp build/gpu/* "$W/build/gpu/"
fi
cd "$W" || exit 1
timeout 180 sh tests/gpu/run.sh build 2>&1 | tee "$OUT/test-gpu.log"
timeout 330 sh bench/bench_gpu.sh build 2>&1 | tee "$OUT/bench-gpu.log"
echo "device-run: done; logs in $OUT"
