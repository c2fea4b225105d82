"""make bench (analyze): how `kvtrace analyze` time grows with T. Synthetic traces of
llama-3.2-1b's head shape (2 layers, H = 32, K = 8, D = 64) at T = 2048, 4096, 8192, 2 threads,
best of 2 runs each. Two rows: the trace as synth writes it (with /queries and the recorded
/attention/lse and /attention/max, as capture writes them) analysed with --results of a `kvtrace sim`
(keydiff, tova, snapkv at N = 256, B = 64) — the goal row, exponent <= 1.1: head importance comes from the
recorded statistics, O(T·(S+W)·D) — and the same trace without /queries (distinctiveness, log-det, PCA
alone). The exponent is log(t_8192 / t_2048) / log 4, printed as measured; the last doubling's exponent
beside it. Run by bench_table.py (make bench) with Debian's python3."""
import math
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KV = os.environ.get("KVTRACE", os.path.join(ROOT, "build", "kvtrace"))
TS = (2048, 4096, 8192)


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True)


def drop_queries(src, dst):
    import h5py
    with h5py.File(src, "r") as s, h5py.File(dst, "w") as d:
        for k, v in s.attrs.items():
            d.attrs[k] = v
        for name in s:
            if name != "queries":
                s.copy(s[name], d, name=name)


def analyze_seconds(trace, out, results=None):
    best = math.inf
    extra = ["--results", results] if results else []
    for _ in range(2):
        t0 = time.perf_counter()
        run([KV, "analyze", trace] + extra + ["--threads", "2", "--quiet", "--force", "-o", out])
        best = min(best, time.perf_counter() - t0)
    return best


def row(label, secs):
    e = math.log(secs[-1] / secs[0]) / math.log(TS[-1] / TS[0])
    last = math.log(secs[-1] / secs[-2]) / math.log(TS[-1] / TS[-2])
    print("  %-34s %s   exponent %.2f (last doubling %.2f)" %
          (label, "  ".join("%7.2f" % s for s in secs), e, last))
    return e


def main():
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-analyze-") as tmp:
        plain, full = [], []
        for T in TS:
            t = os.path.join(tmp, "q%d.h5" % T)
            run([KV, "synth", "--layers", "2", "--heads", "32", "--kv-heads", "8", "--head-dim", "64", "--tokens",
                 str(T), "--seed", "24", "--quiet", "-o", t])
            res = os.path.join(tmp, "sim%d" % T)
            run([KV, "sim", t, "--policies", "keydiff,tova,snapkv", "--budgets", "256", "--chunk", "64", "--threads",
                 "2", "--quiet", "--force", "-o", res])
            full.append(analyze_seconds(t, os.path.join(tmp, "out"), res))
            k = os.path.join(tmp, "k%d.h5" % T)
            drop_queries(t, k)
            plain.append(analyze_seconds(k, os.path.join(tmp, "out")))
            os.remove(t), os.remove(k)
        print("analyze time vs T (llama-3.2-1b heads, 2 layers, 2 threads), seconds at T = %s:" %
              ", ".join(map(str, TS)))
        e = row("with /queries and --results", full)
        row("keys + colsum (no /queries)", plain)
        print("  (target: exponent <= 1.1 with /queries and --results: %s)" % ("met" if e <= 1.1 else "missed"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
