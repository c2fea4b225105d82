#!/bin/sh
# Builds here and packs what the GPU machine needs into one xz tarball,
# device/kvtrace-device.tar.xz (git ignores device/), which must stay under
# 64 MiB: kvtrace, the CUDA backend, the GPU test programs, the shared
# libraries ldd lists for them except the C library, the loader and CUDA's
# own (the device machine has those), their headers (to rebuild there if the
# binary will not start), the test model, and the scripts that run there.
#   scripts/device-bundle.sh        (KVTRACE_MODEL_DIR: default ../shared/models)
# Then, on the device (one call; see docs/cuda.md):
#   sh scripts/device-run.sh device/kvtrace-device.tar.xz   with carry ["device"]
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
MODELS=${KVTRACE_MODEL_DIR:-$ROOT/../shared/models}
LIMIT=$((64 * 1024 * 1024))
[ -f "$MODELS/stories260K.gguf" ] || { echo "device-bundle: no $MODELS/stories260K.gguf (set KVTRACE_MODEL_DIR)" >&2; exit 1; }
make -j2 all build/gpu/test_cuda_kernels build/gpu/trace_compare >/dev/null
[ -f build/libkvtrace_cuda.so ] || { echo "device-bundle: build/libkvtrace_cuda.so was not built (no nvcc?)" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvtrace_bundle.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
S="$WORK/kvtrace-device"
mkdir -p "$S/build/gpu" "$S/lib" "$S/models" "$S/tests/gpu" "$S/bench" "$S/scripts" "$S/include"
cp build/kvtrace build/libkvtrace_cuda.so "$S/build/"
cp build/gpu/test_cuda_kernels build/gpu/trace_compare "$S/build/gpu/"
cp tests/gpu/run.sh "$S/tests/gpu/"
cp bench/bench_gpu.sh "$S/bench/"
cp scripts/device-run.sh "$S/scripts/"
cp "$MODELS/stories260K.gguf" "$S/models/"

# shared libraries: everything ldd resolves, less glibc, the loader and CUDA's
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libutil|libcuda|libcudart|libcublas|libnvidia|libnvJitLink)'
for bin in build/kvtrace build/libkvtrace_cuda.so build/gpu/test_cuda_kernels build/gpu/trace_compare; do
    ldd "$bin" | awk '/=>/ && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
    echo "$name" | grep -Eq "$skip" && continue
    cp -L "$path" "$S/lib/$name"
done
# headers and link names, for building there (scripts/device-run.sh falls back to it)
for d in /usr/include/hdf5/serial /usr/include/x86_64-linux-gnu/openblas-pthread; do
    [ -d "$d" ] && cp -r "$d/." "$S/include/"
done
cp /usr/include/lapacke*.h /usr/include/jansson*.h "$S/include/" 2>/dev/null || true
for l in hdf5_serial:libhdf5_serial.so.103 openblas:libopenblas.so.0 lapacke:liblapacke.so.3 jansson:libjansson.so.4 \
         crypto:libcrypto.so.3; do
    [ -f "$S/lib/${l#*:}" ] && ln -sf "${l#*:}" "$S/lib/lib${l%%:*}.so"
done

mkdir -p device
tar -C "$WORK" -cJf device/kvtrace-device.tar.xz kvtrace-device
size=$(stat -c %s device/kvtrace-device.tar.xz)
echo "device/kvtrace-device.tar.xz: $size bytes ($(ls "$S/lib" | wc -l) libraries carried)"
if [ "$size" -ge "$LIMIT" ]; then
    echo "device-bundle: the tarball is over 64 MiB" >&2
    exit 1
fi
