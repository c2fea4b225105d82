"""make bench (sim wall vs T): how `kvtrace sim` time grows with T, with the full-cache
reference read from the trace (/attention/out, /attention/lse, which synth and capture record) and
recomputed (KVTRACE_SIM_REFERENCE=recompute: O(T²·D) per query head). Synthetic traces of
llama-3.2-1b's head shape (H = 32, K = 8, D = 64, rope_theta 500000; 2 layers, BENCH_SIMT_LAYERS
changes it: the costs are per layer) at T = 1024, 2048, 4096, 8192 (BENCH_SIMT_TS), keydiff, tova and
snapkv at N = 256, B = 64, --threads 1, both sides on the same trace in the same run. Times are
CPU seconds (user + system) of the sim process, best of BENCH_SIMT_REPEAT (2) runs: with one thread
that is its work, and unlike wall time it holds up on a machine other jobs load. Per T: each side's
CPU seconds, the reference's share (sim's own `full-cache reference` over its wall, the split of
one run: reading it, or computing it), the ratio recomputed / recorded; then the growth exponents,
the log-log slope log(t_last / t_first) / log(T_last / T_first), with the last doubling's beside it,
and the size the two datasets add to the trace. Run by `make bench` with Debian's python3; alone:
`/usr/bin/python3 bench/bench_simT.py` (KVTRACE names the binary)."""
import math
import os
import re
import resource
import subprocess
import sys
import tempfile

import h5py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, "build", "kvtrace")
TS = tuple(int(t) for t in os.environ.get("BENCH_SIMT_TS", "1024,2048,4096,8192").split(","))
LAYERS = os.environ.get("BENCH_SIMT_LAYERS", "2")
REPEAT = int(os.environ.get("BENCH_SIMT_REPEAT", "2"))
SIM = ["--policies", "keydiff,tova,snapkv", "--budgets", "256", "--chunk", "64", "--threads", "1", "--force"]
TIME_LINE = re.compile(r"time: ([\d.]+) s wall; trace reading ([\d.]+) s, full-cache reference ([\d.]+) s, "
                       r"replay ([\d.]+) s")


def run(cmd, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)


def cpu_seconds():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def sim(trace, out, recompute):
    """(CPU s, reference share of sim's wall), the run with the least CPU time."""
    env = dict(os.environ, KVTRACE_SIM_REFERENCE="recompute") if recompute else None
    best = None
    for _ in range(REPEAT):
        c0 = cpu_seconds()
        r = run([KV, "sim", trace, *SIM, "-o", out], env)
        cpu = cpu_seconds() - c0
        m = TIME_LINE.search(r.stdout)
        if not m:
            raise SystemExit("bench-simT: no time line in sim's output:\n" + r.stdout[-500:])
        wall, _, ref, _ = (float(x) for x in m.groups())
        if best is None or cpu < best[0]:
            best = (cpu, ref / wall)
    return best


def slope(ys):
    return math.log(ys[-1] / ys[0]) / math.log(TS[-1] / TS[0])


def last(ys):
    return math.log(ys[-1] / ys[-2]) / math.log(TS[-1] / TS[-2])


def reference_bytes(trace):
    with h5py.File(trace, "r") as f:
        return sum(f[n].id.get_storage_size() for n in ("attention/out", "attention/lse")), \
            sum(f[n].id.get_storage_size() for n in f["/"].keys() if isinstance(f[n], h5py.Dataset))


def main():
    rec, recomp, sizes = [], [], []
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-simT-") as tmp:
        for T in TS:
            t = os.path.join(tmp, "t%d.h5" % T)
            run([KV, "synth", "--layers", LAYERS, "--heads", "32", "--kv-heads", "8", "--head-dim", "64",
                 "--rope-theta", "500000", "--tokens", str(T), "--seed", "24", "--quiet", "-o", t])
            sizes.append((os.path.getsize(t), reference_bytes(t)[0]))
            rec.append(sim(t, os.path.join(tmp, "rec"), False))
            recomp.append(sim(t, os.path.join(tmp, "cmp"), True))
            os.remove(t)
    print("sim time vs T (llama-3.2-1b heads, %s layers; keydiff, tova, snapkv; N=256, B=64; --threads 1):" % LAYERS)
    print("  CPU seconds (best of %d), the reference's share of sim's wall:" % REPEAT)
    print("  %6s %12s %10s %13s %10s %8s" % ("T", "recorded_s", "ref_share", "recomputed_s", "ref_share", "ratio"))
    for T, a, b in zip(TS, rec, recomp):
        print("  %6d %12.2f %9.1f%% %13.2f %9.1f%% %7.2fx" % (T, a[0], 100 * a[1], b[0], 100 * b[1], b[0] / a[0]))
    if len(TS) > 1:
        rows = [("sim, reference recorded", [a[0] for a in rec]),
                ("sim, reference recomputed", [b[0] for b in recomp]),
                ("the reference alone (recomputed - recorded)", [max(b[0] - a[0], 1e-3) for a, b in zip(rec, recomp)])]
        for label, ys in rows:
            print("  exponent %-44s %.2f (last doubling %.2f)" % (label, slope(ys), last(ys)))
        e = slope([a[0] for a in rec])
        print("  (target: the whole sim grows like the replay, exponent <= 1.2: %s)" %
              ("met" if e <= 1.2 else "missed"))
    for T, (total, ref) in zip(TS, sizes):
        print("  trace size T=%d: %.1f MiB, of which /attention/out + /attention/lse %.1f MiB (+%.0f%% over the "
              "trace without them)" % (T, total / 2**20, ref / 2**20, 100 * ref / (total - ref)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
