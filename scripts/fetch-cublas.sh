#!/bin/sh
# cuBLAS for a CUDA toolkit that ships without it (some machine images have nvcc alone): PyPI's
# nvidia-cublas wheel of the toolkit's major version, its headers and libraries taken out into the
# user cache, ${XDG_CACHE_HOME:-~/.cache}/kvtrace/cublas-VERSION/{include,lib}, where the Makefile
# looks (CUBLAS_HOME). Run by make deps when nvcc is found without cublas_v2.h; does nothing when the
# toolkit has cuBLAS, when there is no nvcc, or when it is already there. Offline: one line, exit 0
# (make then builds without the CUDA backend, and its tests say so).
#   scripts/fetch-cublas.sh          prints nothing on success
#   scripts/fetch-cublas.sh --home   prints where it goes (the Makefile and tests/scripts/test_cuda.sh ask)
set -eu
VERSION=13.10.0.20
DEST=${XDG_CACHE_HOME:-$HOME/.cache}/kvtrace/cublas-$VERSION
if [ "${1:-}" = --home ]; then echo "$DEST"; exit 0; fi
NVCC=$(ls /usr/local/cuda/bin/nvcc 2>/dev/null || command -v nvcc 2>/dev/null || true)
[ -n "$NVCC" ] || exit 0
HOME_CUDA=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
ls "$HOME_CUDA"/include/cublas_v2.h "$HOME_CUDA"/targets/*/include/cublas_v2.h >/dev/null 2>&1 && exit 0
major=$("$NVCC" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
[ "$major" = 13 ] || { echo "kvtrace: nvcc $major.x has no cuBLAS and only CUDA 13's is pinned (scripts/fetch-cublas.sh): building without the CUDA backend" >&2; exit 0; }
[ -f "$DEST/include/cublas_v2.h" ] && [ -f "$DEST/lib/libcublas.so.13" ] && exit 0
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "kvtrace: $NVCC has no cuBLAS: taking nvidia-cublas==$VERSION from PyPI into $DEST" >&2
if ! python3 -m pip download --no-deps --disable-pip-version-check -q "nvidia-cublas==$VERSION" -d "$TMP" >"$TMP/log" 2>&1; then
    echo "kvtrace: cannot download nvidia-cublas==$VERSION ($(grep -v WARNING "$TMP/log" | tail -n 1)): building without the CUDA backend" >&2
    exit 0
fi
mkdir -p "$DEST.tmp"
python3 - "$TMP"/nvidia_cublas-*.whl "$DEST.tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in z.namelist():
        if n.startswith("nvidia/cu13/include/") or n.startswith("nvidia/cu13/lib/lib"):
            part = n.split("/", 2)[2]
            dst = sys.argv[2] + "/" + part
            import os
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with z.open(n) as f, open(dst, "wb") as o:
                o.write(f.read())
PY
rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
