"""make bench (MPI, docs/mpi.md): strong scaling of `kvtrace sim` over a study on this machine's
cores: the same study (8 synthetic traces, 4 layers, 8 heads, 4 kv heads, D = 64, T = 768) and
configurations (keydiff, snapkv, tova, streaming x budgets 64, 128, chunk 32) replayed by
`mpirun -n 1` and `mpirun -n 2`, one thread per rank. Prints each run's wall time, the speedup
and efficiency of 2 ranks, each rank's time in MPI calls (MPI_Wtime around them, sim
--rank-times) as a fraction of its wall time, each rank's peak RSS (/usr/bin/time), the seconds
per trace (the work unit) and the ESTIMATE of docs/mpi.md (a 64-rank study of 1,000 prompts).
Checks that the 2-rank outputs equal the 1-rank ones (results.csv). Skips without MPI."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
KV = os.path.join(ROOT, BUILD, "kvtrace")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
N_TRACES, L, H, K, D, T = 8, 4, 8, 4, 64, 768
ARGS = ["--policies", "keydiff,snapkv,tova,streaming", "--budgets", "64,128", "--chunk", "32", "--threads", "1",
        "--quiet", "--rank-times"]


def has_mpi():
    try:
        with open(os.path.join(ROOT, BUILD, "obj", "core", "mpi_probe")) as f:
            return f.read().startswith("mpi=yes") and shutil.which("mpirun")
    except OSError:
        return False


def run_ranks(traces, out, ranks):
    """One mpirun: wall seconds (mpirun's whole), per rank (wall, mpi, rss KiB)."""
    wrap = '/usr/bin/time -f "rss rank=$OMPI_COMM_WORLD_RANK %M" "$@"'
    cmd = ["mpirun", "-n", str(ranks), "--oversubscribe", "sh", "-c", wrap, "sh", KV, "sim", *traces, *ARGS,
           "-o", out]
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        sys.exit("mpi: mpirun -n %d failed: %s" % (ranks, p.stderr))
    ranks_seen = {}
    line = r"sim: rank (\d+) of \d+: \d+ of \d+ units, wall ([\d.]+) s, in MPI calls ([\d.]+) s"
    for m in re.finditer(line, p.stderr):
        ranks_seen[int(m.group(1))] = [float(m.group(2)), float(m.group(3)), 0]
    for m in re.finditer(r"rss rank=(\d+) (\d+)", p.stderr):
        ranks_seen[int(m.group(1))][2] = int(m.group(2))
    return ranks_seen


def main():
    if not has_mpi():
        print("mpi: skipped: this build has no MPI (no mpicc when it was built) or no mpirun")
        return 0
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-mpi-") as tmp:
        traces = []
        for i in range(N_TRACES):
            t = os.path.join(tmp, "t%d.h5" % i)
            subprocess.run([KV, "synth", "--layers", str(L), "--heads", str(H), "--kv-heads", str(K), "--head-dim",
                            str(D), "--tokens", str(T), "--seed", str(i), "--threads", "1", "--quiet", "-o", t],
                           check=True)
            traces.append(t)
        one = run_ranks(traces, os.path.join(tmp, "r1"), 1)
        two = run_ranks(traces, os.path.join(tmp, "r2"), 2)
        same = open(os.path.join(tmp, "r1", "results.csv"), "rb").read() == \
            open(os.path.join(tmp, "r2", "results.csv"), "rb").read()
    w1 = max(v[0] for v in one.values())
    w2 = max(v[0] for v in two.values())
    speedup = w1 / w2
    print("mpi: study of %d traces (L=%d H=%d K=%d D=%d T=%d), 8 configurations, --threads 1 per rank" %
          (N_TRACES, L, H, K, D, T))
    print("mpi: 1 rank %.2f s, 2 ranks %.2f s: speedup %.2f, efficiency %.2f (2 cores shared with other work)" %
          (w1, w2, speedup, speedup / 2))
    for n, res in ((1, one), (2, two)):
        for r in sorted(res):
            wall, mpi, rss = res[r]
            print("mpi: %d ranks: rank %d: wall %.2f s, in MPI calls %.3f s (%.1f%%), peak RSS %.1f MiB" %
                  (n, r, wall, mpi, 100 * mpi / wall if wall else 0, rss / 1024))
    per_unit = w1 / N_TRACES
    est = 1000 * per_unit / 64 / (speedup / 2)
    print("mpi: %.3f s per trace (one rank); ESTIMATE for 1,000 such prompts on 64 ranks at the 2-rank "
          "efficiency: %.1f s" % (per_unit, est))
    print("mpi: 2-rank results.csv %s the 1-rank one" % ("equals" if same else "DIFFERS FROM"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
