"""sim under mpirun (issue #22, docs/mpi.md): a study of three traces replayed by 1, 2 and 3
ranks equals the one-process run byte for byte in its data files (results.csv, summary.csv,
summary_by_trace.csv, and every dataset of results.h5; timing.csv and the provenance may
differ); a trace whose replay fails on rank 1 fails the whole run with exit 3, naming the rank and the cause, and leaves no
output directory. Skipped where the build has no MPI (no mpicc when it was built). TAP."""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import check, finish, skip  # noqa: E402
from test_study import write_trace  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
# under mpirun (as root in CI): LeakSanitizer off, for MPI's own allocations (the one-process run keeps it)
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
ARGS = ["--policies", "keydiff,tova,snapkv,streaming", "--budgets", "16,24", "--chunks", "8,16",
        "--threads", "1", "--quiet"]
DATA = ["results.csv", "summary.csv", "summary_by_trace.csv"]


def has_mpi():
    try:
        with open(os.path.join(BUILD, "obj", "sim", "mpi_probe")) as f:
            return f.read().startswith("mpi=yes")
    except OSError:
        return False


def sim(traces, out, ranks=None):
    cmd = [KVTRACE, "sim", *traces, *ARGS, "-o", out]
    if ranks:
        cmd = ["mpirun", "-n", str(ranks), "--oversubscribe", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=MPI_ENV if ranks else None, timeout=300)


def h5_same(a, b):
    """Every dataset of a equals b's, bytes and shapes (the provenance attributes aside)."""
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names = []
        fa.visit(lambda n: names.append(n) if isinstance(fa[n], h5py.Dataset) else None)
        other = []
        fb.visit(lambda n: other.append(n) if isinstance(fb[n], h5py.Dataset) else None)
        if names != other or not names:
            return False
        return all(fa[n].dtype == fb[n].dtype and fa[n].shape == fb[n].shape and
                   np.asarray(fa[n][()]).tobytes() == np.asarray(fb[n][()]).tobytes() for n in names)


def main():
    if not has_mpi():
        skip("sim under mpirun", "this build has no MPI (mpicc was not found when it was built)")
        return finish()
    with tempfile.TemporaryDirectory() as tmp:
        traces = [os.path.join(tmp, "p%d.h5" % i) for i in range(3)]
        for i, (t, T) in enumerate(zip(traces, [70, 90, 60])):
            write_trace(t, 40 + i, T_=T)
        one = os.path.join(tmp, "one")
        p = sim(traces, one)
        check(p.returncode == 0, "one process", p.stderr)
        for ranks in (1, 2, 3):
            out = os.path.join(tmp, "r%d" % ranks)
            p = sim(traces, out, ranks)
            check(p.returncode == 0, "mpirun -n %d: exit 0" % ranks, p.stderr)
            for name in DATA:
                a, b = os.path.join(one, name), os.path.join(out, name)
                same = os.path.exists(b) and open(a, "rb").read() == open(b, "rb").read()
                check(same, "mpirun -n %d: %s byte-identical to one process" % (ranks, name))
            check(os.path.exists(os.path.join(out, "results.h5")) and
                  h5_same(os.path.join(one, "results.h5"), os.path.join(out, "results.h5")),
                  "mpirun -n %d: results.h5 datasets identical to one process" % ranks)
        # a bad trace: the costliest goes to rank 0, so the second costliest (p0, T = 70) is rank 1's
        with h5py.File(traces[0], "r+") as f:   # finite, but its float32 scores overflow: found in the replay
            for name in ("queries", "keys"):
                x = f[name][()] * np.float32(1e20)
                del f[name]
                f[name] = x
        bad = os.path.join(tmp, "bad")
        p = sim(traces, bad, 2)
        check(p.returncode == 3 and "error: rank 1 of 2: " in p.stderr and "not finite" in p.stderr,
              "a bad trace on rank 1: exit 3, naming rank 1 and the cause",
              p.stderr)
        check(not os.path.exists(bad), "a bad trace on rank 1: no output directory")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
