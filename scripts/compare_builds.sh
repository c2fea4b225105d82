#!/bin/sh
# Byte identity of two kvtrace builds on the demo's trace and a sweep of every policy under every
# allocator (sim), capture --evict under each allocator, and fidelity: the same machine, OpenBLAS
# kernel and thread count for both; timing and provenance left aside. A change that should alter
# no result (a refactor) must pass this.
#   scripts/compare_builds.sh OLD_KVTRACE NEW_KVTRACE MODEL.gguf [WORKDIR]
# Prints one line per compared output and "identical: N files" or the differing files (exit 1).
set -eu
old=$1 new=$2 model=$3
work=${4:-$(mktemp -d)}
mkdir -p "$work"
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
run() { # binary, where its outputs go: written in one folder for both builds (paths are recorded)
    bin=$1 out=$work/run
    rm -rf "$out" "$2" && mkdir -p "$out"
    "$bin" capture --model "$model" --prompt "Once upon a time" --generate 250 --chunk 32 \
        --record keys,values,queries,wo --kvzip -o "$out/trace.h5" --quiet
    pols=$("$bin" policies | sed '/^Allocators/q' | awk '/^[a-z_]+ /{print $1}' | grep -v '^compactor$' | paste -sd, -)
    "$bin" sim "$out/trace.h5" --policies "$pols" --allocators uniform,pyramid,adakv,duo,cake \
        --budgets 40,64 --chunks 16,32 -o "$out/sweep" --quiet --threads 2
    "$bin" sim "$out/trace.h5" --policies compactor,full --budgets 64 --chunk 32 -o "$out/compactor" --quiet
    "$bin" sim "$out/trace.h5" --policies h2o,tova,snapkv,oracle,random --allocators global --budgets 32 --chunk 16 \
        -o "$out/global" --quiet
    "$bin" analyze "$out/trace.h5" --results "$out/sweep" -o "$out/analysis" --quiet
    /usr/bin/python3 -c 'import h5py, sys
with h5py.File(sys.argv[1]) as f:
    L, K = int(f.attrs["n_layers"]), int(f.attrs["n_kv_heads"])
print("layer,kv_head,score")
for i in range(L * K): print("%d,%d,%g" % (i // K, i % K, 1 + (7 * i) % 5))' "$out/trace.h5" >"$out/heads.csv"
    "$bin" sim "$out/trace.h5" --policies keydiff,snapkv --allocators headkv,duo --budgets 32 --chunk 16 \
        --head-scores "$out/heads.csv" -o "$out/headkv" --quiet
    for a in uniform pyramid adakv cake; do
        "$bin" capture --model "$model" --prompt "Once upon a time" --generate 120 --chunk 16 \
            --evict snapkv --budget 32 --allocator "$a" --retained -o "$out/evict_$a.h5" --quiet
    done
    "$bin" fidelity --model "$model" --prompt "Once upon a time" --generate 120 --chunk 16 \
        --policies keydiff,snapkv,criticalkv --budgets 32 -o "$out/fidelity" --quiet
    mv "$out" "$2"
}
run "$old" "$work/old"
run "$new" "$work/new"
# HDF5 files compare by content (h5dump without the provenance and time attributes); others byte for byte
n=0 bad=0
for f in $(cd "$work/old" && find . -type f | sort); do
    case $f in *provenance.json|*timing.csv|*.svg|*.png|*.html|*.gp) continue ;; esac
    n=$((n + 1))
    case $f in
        *.h5)
            (cd "$work/old" && h5dump "$f") | grep -v -e provenance -e created -e elapsed -e _seconds -e kvtrace_ >"$work/a" || true
            (cd "$work/new" && h5dump "$f") | grep -v -e provenance -e created -e elapsed -e _seconds -e kvtrace_ >"$work/b" || true
            cmp -s "$work/a" "$work/b" || { echo "differs: $f"; bad=$((bad + 1)); } ;;
        *) cmp -s "$work/old/$f" "$work/new/$f" || { echo "differs: $f"; bad=$((bad + 1)); } ;;
    esac
done
echo "compared $n files: $bad differ"
[ "$bad" -eq 0 ]
