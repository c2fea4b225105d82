"""make bench (allocators, docs/allocators.md): what a budget allocator costs in `kvtrace sim`, against the
`uniform` allocator on the same trace, policies and budget in the same run (these machines are
shared, so only the ratio means anything). A synthetic llama-3.2-1b trace (T = 1024, all 16
layers), snapkv and tova at N = 128, B = 64, 2 threads; each allocator alone, best of 2 wall
times. headkv reads a head-scores file made here (seeded uniform scores); duo ranks heads by the
trace's column sums. Run by `make bench` with Debian's python3."""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, "build", "kvtrace")
ALLOCATORS = ["uniform", "pyramid", "adakv", "headkv", "duo", "cake", "global"]
POLICIES, BUDGET, CHUNK, THREADS, T = "snapkv,tova", 128, 64, 2, 1024


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True)


def head_scores(path, L, K):
    r = np.random.default_rng(17)
    with open(path, "w") as f:
        f.write("layer,kv_head,score\n")
        for l in range(L):
            for k in range(K):
                f.write("%d,%d,%.6f\n" % (l, k, r.random()))


def best_wall(cmd, repeat=2):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        run(cmd)
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-alloc-") as tmp:
        trace = os.path.join(tmp, "t.h5")
        run([KV, "synth", "--like", "llama-3.2-1b", "--tokens", str(T), "--quiet", "-o", trace])
        scores = os.path.join(tmp, "scores.csv")
        head_scores(scores, 16, 8)
        base = None
        print("allocators: llama-3.2-1b T=%d (all 16 layers), %s at N=%d, B=%d, %d threads; best of 2"
              % (T, POLICIES, BUDGET, CHUNK, THREADS))
        for a in ALLOCATORS:
            cmd = [KV, "sim", trace, "--policies", POLICIES, "--allocators", a, "--budgets", str(BUDGET),
                   "--chunk", str(CHUNK), "--threads", str(THREADS), "--quiet", "--force", "-o",
                   os.path.join(tmp, "res")] + (["--head-scores", scores] if a == "headkv" else [])
            wall = best_wall(cmd)
            base = base or wall
            print("  %-8s %6.2f s wall  x%.2f of uniform" % (a, wall, wall / base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
