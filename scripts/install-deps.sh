#!/bin/sh
# Installs the Debian packages kvtrace needs, only those missing. libpython3-dev with python3-numpy
# builds the Python policies (--plugin FILE.py, docs/python-policies.md); libopenmpi-dev with
# openmpi-bin builds and tests sim under mpirun (docs/mpi.md).
# apt-get update runs first when anything is missing; through sudo when not root.
set -eu
PKGS="build-essential pkg-config libhdf5-dev hdf5-tools libopenblas-dev liblapacke-dev \
gnuplot-nox libcmocka-dev libjansson-dev python3-h5py python3-numpy python3-pandas clang libclang-rt-14-dev \
libssl-dev curl libpcre2-dev libutf8proc-dev libpython3-dev libopenmpi-dev openmpi-bin"
# npm fetches the reference tokenizers of the tokenizer tests (tests/tokenizers/SOURCES.md);
# a machine with its own Node.js keeps it.
command -v npm >/dev/null 2>&1 || PKGS="$PKGS npm"

missing=""
for p in $PKGS; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$status" in
        *"install ok installed"*) ;;
        *) missing="$missing $p" ;;
    esac
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
echo "kvtrace: installing missing packages:$missing" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
