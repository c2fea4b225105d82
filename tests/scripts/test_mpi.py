"""sim under mpirun (docs/mpi.md): a study of three traces replayed by 1, 2 and 3
ranks equals the one-process run byte for byte in its data files (results.csv, summary.csv,
summary_by_trace.csv, and every dataset of results.h5; timing.csv and the provenance may
differ); a layer whose replay fails on rank 1 fails the whole run with exit 3, naming the rank and the cause, and
leaves no output directory. The work unit is trace x layer x allocator (trace x all layers under a model-wide
allocator). Faults (each under mpirun -n 2, then --resume without the fault): rank 1 killed by
SIGKILL after its first unit, rank 1 seeing a bad copy of a trace (a node with another file), rank 1
out of memory (a trace whose layers' queries take 2.3 MiB, and rank 1's address space limited to 2 MiB
more than it maps before its first unit by a test hook; under ASan, whose shadow memory makes that limit
meaningless, ASan's allocator told to fail rank 1's allocations over 2 MiB: see oom): each exits non-zero
naming rank 1 and the cause,
leaves no output directory, keeps the finished units' results in OUT.work/, and --resume replays only
the units without one (counted from its line and checked by the work folder's files), giving outputs
byte-identical to the one-process run; a work folder of another command is refused with one line.
finer_units: 2 traces of 4 layers under -n 1, 2, 3 with uniform, adakv and cake: 288 units, every rank
replaying some (--rank-times), byte-identical; killed mid-run, --resume replays exactly the missing units.
Skipped where the build has no MPI (no mpicc when it was built). TAP."""
import csv
import os
import re
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import NO_MODEL, check, finish, model_file, sanitized, skip  # noqa: E402
from test_study import L, write_trace  # noqa: E402
from tracefile import write_root_attrs  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BUILD", "build")   # run_all exports BUILD
# under mpirun (as root in CI): LeakSanitizer off, for MPI's own allocations (the one-process run keeps it)
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
ARGS = ["--policies", "keydiff,tova,snapkv,streaming", "--budgets", "16,24", "--chunks", "8,16",
        "--threads", "1", "--quiet"]
DATA = ["results.csv", "summary.csv", "summary_by_trace.csv"]
NP = 4 * 2 * 2   # ARGS's configurations (policies x budgets x chunks): a unit is trace x layer x configuration


def has_mpi():
    try:
        with open(os.path.join(BUILD, "obj", "core", "mpi_probe")) as f:
            return f.read().startswith("mpi=yes")
    except OSError:
        return False


def sim(traces, out, ranks=None, extra=(), env=None, wrap=(), cwd=None):
    cmd = [*wrap, KVTRACE, "sim", *traces, *ARGS, *extra, "-o", out]
    if ranks:
        cmd = ["mpirun", "-n", str(ranks), "--oversubscribe", *cmd]
    e = dict(MPI_ENV if ranks else os.environ, **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=120, cwd=cwd)


def same_data(one, out):
    """The data files of out equal one's, byte for byte (results.h5: its datasets)."""
    return all(os.path.exists(os.path.join(out, n)) and
               open(os.path.join(one, n), "rb").read() == open(os.path.join(out, n), "rb").read() for n in DATA) \
        and h5_same(os.path.join(one, "results.h5"), os.path.join(out, "results.h5"))


def units(out):
    d = out + ".work/units"
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def error_lines(stderr):
    return [x for x in stderr.splitlines() if x.startswith("kvtrace: error:")]


def fault_then_resume(tmp, one, names, what, p, out, cause):
    """A failed run (p) names rank 1 and its cause in one line, leaves no output but the finished units'
    results (a unit: trace x layer x configuration); --resume (no fault) replays only the others and equals
    the one-process run."""
    kept, total = units(out), len(names) * L * NP
    check(p.returncode != 0 and "rank 1" in p.stderr and cause in p.stderr, "%s: exit %d, naming rank 1 and the "
          "cause" % (what, p.returncode), p.stderr)
    check(not os.path.exists(out) and 0 < len(kept) < total, "%s: no output directory; %d of %d units' "
          "results kept in the work folder" % (what, len(kept), total), str(kept))
    killed = cause == "signal 9"   # then mpirun names the rank and the signal; kvtrace says nothing
    check(len(error_lines(p.stderr)) == (0 if killed else 1), "%s: %s" %
          (what, "no kvtrace error line (mpirun's)" if killed else "one error line"), p.stderr)
    r = sim(names, out, 2, extra=["--resume"], cwd=tmp)
    line = "--resume: %d of %d units have their results in %s.work; replaying %d" % (
        len(kept), total, out, total - len(kept))
    check(r.returncode == 0 and line in r.stderr, "%s: --resume replays only the %d missing units" %
          (what, total - len(kept)), r.stderr)
    check(same_data(one, out) and not os.path.exists(out + ".work"),
          "%s: --resume: data files byte-identical to one process, the work folder removed" % what)


def h5_same(a, b):
    """Every dataset of a equals b's, bytes and shapes (the provenance attributes aside)."""
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names = []
        fa.visit(lambda n: names.append(n) if isinstance(fa[n], h5py.Dataset) else None)
        other = []
        fb.visit(lambda n: other.append(n) if isinstance(fb[n], h5py.Dataset) else None)
        if names != other or not names:
            return False
        return all(fa[n].dtype == fb[n].dtype and fa[n].shape == fb[n].shape and same_values(fa[n][()], fb[n][()])
                   for n in names)


def same_values(x, y):
    """Bytes equal; a compound table (results.h5's /index, variable-length strings) field by field."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype.names:
        return all(same_values(x[f], y[f]) for f in x.dtype.names)
    if x.dtype.kind == "O":
        return x.tolist() == y.tolist()
    return x.tobytes() == y.tobytes()


def concurrent(tmp, traces, one):
    """Two mpirun ... sim --force into one output at once: each succeeds or is refused cleanly (exit 2, one
    line naming the other run); one succeeds; the output is the one-process result; no work folder or
    lock is left (the second once deleted OUT.work/ under the first)."""
    out = os.path.join(tmp, "together")
    for attempt in range(3):
        cmd = ["mpirun", "-n", "2", "--oversubscribe", KVTRACE, "sim", *traces, *ARGS, "--force", "-o", out]
        procs = []
        for k in range(2):   # each mpirun its own session folder (two starting at once race in OpenMPI's own)
            base = os.path.join(tmp, "ompi%d" % k)
            os.makedirs(base, exist_ok=True)
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          env=dict(MPI_ENV, OMPI_MCA_orte_tmpdir_base=base, TMPDIR=base)))
        res = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        clean = all(rc == 0 or (rc == 2 and len(error_lines(err)) == 1 and "another kvtrace sim" in err)
                    for rc, err in res)
        check(clean and any(rc == 0 for rc, _ in res) and same_data(one, out) and not os.path.exists(out + ".work")
              and not os.path.exists(out + ".work.lock"),
              "two concurrent mpirun sim --force into one output (try %d): each succeeds or is refused cleanly, "
              "the output is whole, nothing left behind" % (attempt + 1), repr(res))


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
        concurrent(tmp, traces, one)
        # a bad layer: units (trace x layer) go costliest first to the least-loaded rank, the lower on a tie:
        # p1 (T = 90) layers 0, 1 to ranks 0, 1, then p0 (T = 70) layers 0, 1 to ranks 0, 1: p0's layer 1 is rank 1's
        with h5py.File(traces[0], "r+") as f:   # finite, but its float32 scores overflow: found in the replay
            for name in ("queries", "keys"):
                x = f[name][()]
                x[1] *= np.float32(1e20)
                del f[name]
                f[name] = x
        bad = os.path.join(tmp, "bad")
        p = sim(traces, bad, 2)
        check(p.returncode == 3 and "error: rank 1 of 2: " in p.stderr and "layer 1, head 0" in p.stderr and
              "not finite" in p.stderr, "a bad layer on rank 1: exit 3, naming rank 1 and the cause",
              p.stderr)
        check(not os.path.exists(bad), "a bad layer on rank 1: no output directory")
        check(len(error_lines(p.stderr)) == 1, "a bad layer on rank 1: one error line", p.stderr)
        faults(tmp)
        finer_units(tmp)
        fidelity(tmp)
        done_when(tmp)
    return finish()


def done_when(tmp):
    """The end-to-end check: a needle study of the default model (6 prompts) replayed by
    mpirun -n 2 equals the one-process run byte for byte; capture --prompts under mpirun -n 2 (the
    prompts split across the ranks, one model each) writes the same traces and index.jsonl, byte for byte."""
    model = model_file()
    if not model:
        return skip("the done-when study", NO_MODEL)
    hay = os.path.join(tmp, "hay.txt")
    with open(hay, "w") as f:
        f.write("Tom had a dog. The dog was big and brown. It liked to run in the sun with Lily.\n")
    prompts = os.path.join(tmp, "needle.jsonl")
    p = subprocess.run([KVTRACE, "prompts", "needle", "--haystack", hay, "--needle", "The secret code is 4721.",
                        "--question", "What is the code?", "--answer", "4721", "--depths", "0,0.5,1",
                        "--lengths", "128,256", "--model", model, "-o", prompts], capture_output=True, text=True)
    study = os.path.join(tmp, "study")
    cap = [KVTRACE, "capture", "--prompts", prompts, "--model", model, "--quiet", "-o", study]
    if p.returncode == 0:   # one process first, moved aside: the same -o (the provenance records it)
        p = subprocess.run(cap, capture_output=True, text=True, timeout=300)
    if not check(p.returncode == 0, "the needle study: 6 prompts captured by one process", p.stderr):
        return
    os.rename(study, study + "_one")
    p = subprocess.run(["mpirun", "-n", "2", "--oversubscribe", *cap], capture_output=True, text=True, env=MPI_ENV,
                       timeout=300)
    files = sorted(os.listdir(study + "_one")) if p.returncode == 0 else []
    check(len(files) == 7 and files == sorted(os.listdir(study)) and
          all(open(os.path.join(study, f), "rb").read() == open(os.path.join(study + "_one", f), "rb").read()
              for f in files),
          "capture --prompts under mpirun -n 2: index.jsonl and the 6 traces byte-identical to one process",
          p.stderr)
    args = ["--policies", "keydiff,snapkv,tova,streaming", "--budgets", "32,64", "--chunks", "16,32",
            "--threads", "1", "--quiet"]
    one, two = os.path.join(tmp, "res1"), os.path.join(tmp, "res2")
    a = subprocess.run([KVTRACE, "sim", study, *args, "-o", one], capture_output=True, text=True, timeout=300)
    b = subprocess.run(["mpirun", "-n", "2", "--oversubscribe", KVTRACE, "sim", study, *args, "-o", two],
                       capture_output=True, text=True, env=MPI_ENV, timeout=300)
    check(a.returncode == 0 and b.returncode == 0 and same_data(one, two) and
          open(os.path.join(one, "spans_summary.csv"), "rb").read() == open(os.path.join(two, "spans_summary.csv"),
                                                                            "rb").read(),
          "the done-when: mpirun -n 2 sim of the needle study (4 policies, budgets 32,64, chunks 16,32) equals one "
          "process byte for byte (results, summaries, spans, results.h5)", a.stderr + b.stderr)


def rank_units(stderr):
    """Each rank's units from its --rank-times line ("sim: rank R of N: U of M units, ..."): {R: (U, M)}."""
    out = {}
    for x in stderr.splitlines():
        w = x.split()
        if x.startswith("sim: rank ") and len(w) > 8 and w[8] == "units,":
            out[int(w[2])] = (int(w[5]), int(w[7]))
    return out


def finer_units(tmp):
    """2 traces of 4 layers under mpirun -n 3, a per-layer (uniform), a layer-wide (adakv) and a model-wide
    (cake) allocator: units of trace x layer x configuration (cake's: trace x all layers), 2 x 16 x (4 + 4 + 1)
    = 288,
    more than traces, every rank replaying some; byte-identical to one process for -n 1, 2, 3; rank 1 killed
    after 2 units, --resume under -n 3 replays exactly the units without a result file."""
    names = [os.path.join(tmp, "d%d.h5" % i) for i in range(2)]
    for i, T in enumerate([80, 64]):
        write_trace(names[i], 90 + i, T_=T, L_=4)   # 4 layers (test_study's default is 2)
    extra = ["--allocators", "uniform,adakv,cake", "--rank-times"]
    one = os.path.join(tmp, "d_one")
    p = sim(names, one, extra=extra)
    check(p.returncode == 0, "units: one process", p.stderr)
    total = 2 * NP * (4 + 4 + 1)
    for ranks in (1, 2, 3):
        out = os.path.join(tmp, "d_r%d" % ranks)
        p = sim(names, out, ranks, extra=extra)
        got = rank_units(p.stderr)
        check(p.returncode == 0 and same_data(one, out), "units: mpirun -n %d: data files byte-identical to one "
              "process" % ranks, p.stderr)
        check(sorted(got) == list(range(ranks)) and all(t == total for _, t in got.values()) and
              sum(u for u, _ in got.values()) == total and all(u > 0 for u, _ in got.values()),
              "units: mpirun -n %d: %d units of 2 traces, each rank replays some (%s)" %
              (ranks, total, sorted(got.items())), p.stderr)
    out = os.path.join(tmp, "d_kill")
    p = sim(names, out, 3, extra=extra, env={"KVTRACE_TEST_FAULT": "1:2:kill"})
    kept = units(out)
    check(p.returncode != 0 and not os.path.exists(out) and 2 <= len(kept) < total,
          "units: rank 1 of 3 killed after 2 units: no output, %d of %d units kept" % (len(kept), total), p.stderr)
    r = sim(names, out, 3, extra=["--resume", *extra])
    got = rank_units(r.stderr)
    line = "--resume: %d of %d units have their results in %s.work; replaying %d" % (
        len(kept), total, out, total - len(kept))
    check(r.returncode == 0 and line in r.stderr and sum(u for u, _ in got.values()) == total - len(kept),
          "units: --resume -n 3 replays only the %d missing units (the ranks' counts: %s)" %
          (total - len(kept), sorted(got.items())), r.stderr)
    check(same_data(one, out) and not os.path.exists(out + ".work"),
          "units: --resume: byte-identical to one process, the work folder removed")
    # one layer: cake's unit (trace x all layers) is still the lock-step pass's, not a per-layer one
    flat = os.path.join(tmp, "d_flat.h5")
    write_trace(flat, 97, T_=64, L_=1)
    extra = ["--allocators", "uniform,cake", "--rank-times"]
    one, two = os.path.join(tmp, "d1_one"), os.path.join(tmp, "d1_two")
    a, b = sim([flat], one, extra=extra), sim([flat], two, 2, extra=extra)
    with open(os.path.join(one, "results.csv")) as f:   # cake replayed: queries counted, rows kept
        rows = [r for r in csv.DictReader(f) if r["allocator"].startswith("cake")]
    check(a.returncode == 0 and b.returncode == 0 and same_data(one, two) and rows and
          all(int(r["n_queries"]) > 0 and int(r["head_budget"]) > 0 for r in rows) and
          sum(u for u, _ in rank_units(b.stderr).values()) == 2 * NP,
          "units: a one-layer trace with uniform and cake: %d units over 2 ranks, byte-identical to one process" %
          (2 * NP),
          a.stderr + b.stderr)


def fidelity(tmp):
    """fidelity under mpirun: refused in one line over several ranks; -n 1 finishes (MPI shut down)."""
    if not os.path.isdir(os.environ.get("KVTRACE_MODEL_DIR", "")):
        return skip("fidelity under mpirun", "no KVTRACE_MODEL_DIR (the default model)")
    run = ["fidelity", "--prompt", "Once upon a time", "--policies", "streaming", "--budgets", "4", "--quiet"]
    p = subprocess.run(["mpirun", "-n", "2", "--oversubscribe", KVTRACE, *run, "-o", os.path.join(tmp, "fid2")],
                       capture_output=True, text=True, env=MPI_ENV, timeout=120)
    check(p.returncode == 2 and len(error_lines(p.stderr)) == 1 and "runs as one process" in p.stderr and
          not os.path.exists(os.path.join(tmp, "fid2")), "mpirun -n 2 fidelity: refused in one line, exit 2",
          p.stderr)
    p = subprocess.run(["mpirun", "-n", "1", KVTRACE, *run, "-o", os.path.join(tmp, "fid1")],
                       capture_output=True, text=True, env=MPI_ENV, timeout=120)
    check(p.returncode == 0 and os.path.exists(os.path.join(tmp, "fid1", "fidelity.csv")),
          "mpirun -n 1 fidelity: finishes", p.stderr)


def oom_line(p, what):
    """The out-of-memory error as kv_calloc words it, moved to rank 0: exit 1."""
    lines = error_lines(p.stderr)
    check(p.returncode == 1 and len(lines) == 1 and lines[0].startswith("kvtrace: error: rank 1 of 2: ") and
          re.search(r": out of memory \(\d+ bytes\)$", lines[0]),
          "%s: exit 1, \"kvtrace: error: rank 1 of 2: WHAT: out of memory (N bytes)\"" % what, p.stderr)


def oom(tmp):
    """Rank 1 out of memory: each unit of this trace reads one layer's queries, H * T * D * 4 =
    16 * 300 * 128 * 4 = 2.3 MiB in one allocation, more than rank 1 is given: in the normal build
    its address space is limited to 2 MiB more than it maps before its first unit
    (KVTRACE_TEST_FAULT=1:oom:2, RLIMIT_AS: the headroom keeps HDF5's 1 MiB buffer, without which the
    failure was at times HDF5's, reported as a bad /tokens); under ASan, whose shadow memory makes
    an address-space limit meaningless, a wrapper gives rank 1 alone ASAN_OPTIONS that make every
    allocation over 2 MiB fail (allocator_may_return_null: malloc returns NULL, as on a full machine;
    its start-up allocates less, HDF5's largest buffer being 1 MiB + 8 bytes)."""
    name = "wide.h5"   # L = 2 layers of H = 16 heads (K = 2) of D = 128, T = 300
    rng = np.random.default_rng(70)
    Hw, Kw, Dw, Tw = 16, 2, 128, 300
    with h5py.File(os.path.join(tmp, name), "w") as f:
        write_root_attrs(f, "test_mpi", L, Hw, Kw, Dw, Tw, 50)
        f["tokens"] = rng.integers(0, 100, Tw).astype(np.int32)
        f["keys"] = (rng.normal(size=Dw) + 0.6 * rng.normal(size=(L, Kw, Tw, Dw))).astype(np.float32)
        f["values"] = rng.normal(size=(L, Kw, Tw, Dw)).astype(np.float32)
        f["queries"] = (1.5 * rng.normal(size=(L, Hw, Tw, Dw))).astype(np.float32)
    one = os.path.join(tmp, "w_one")
    what = "rank 1 out of memory" + (" (ASan)" if sanitized(KVTRACE) else "")
    check(sim([name], one, cwd=tmp).returncode == 0, "%s: one process" % what)
    out = os.path.join(tmp, "w_oom")
    if sanitized(KVTRACE):
        wrap = os.path.join(tmp, "oom1.sh")
        with open(wrap, "w") as f:
            f.write('#!/bin/sh\nif [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then\n'
                    '    ASAN_OPTIONS="$ASAN_OPTIONS:allocator_may_return_null=1:max_allocation_size_mb=2"\n'
                    '    export ASAN_OPTIONS\nfi\nexec "$@"\n')
        os.chmod(wrap, 0o755)
        p = sim([name], out, 2, wrap=[wrap], cwd=tmp)
    else:
        p = sim([name], out, 2, env={"KVTRACE_TEST_FAULT": "1:oom:2"}, cwd=tmp)
    oom_line(p, what)
    fault_then_resume(tmp, one, [name], what, p, out, "out of memory")


def faults(tmp):
    names = ["f%d.h5" % i for i in range(6)]   # relative: rank 1 may run in another directory
    for i, T in enumerate([70, 90, 60, 80, 50, 100]):
        write_trace(os.path.join(tmp, names[i]), 60 + i, T_=T)
    one = os.path.join(tmp, "f_one")
    check(sim(names, one, cwd=tmp).returncode == 0, "faults: one process")
    # rank 1 killed (SIGKILL) once it has written its first trace's results
    out = os.path.join(tmp, "f_kill")
    p = sim(names, out, 2, env={"KVTRACE_TEST_FAULT": "1:1:kill"}, cwd=tmp)
    fault_then_resume(tmp, one, names, "rank 1 killed", p, out, "signal 9")
    # rank 1 sees a bad copy of its trace (another directory: a node with another file)
    other = os.path.join(tmp, "node1")
    os.mkdir(other)
    for n in names:
        os.symlink(os.path.join(tmp, n), os.path.join(other, n))
    os.unlink(os.path.join(other, "f1.h5"))   # f1 (T = 90, the second costliest): its layer 1 is rank 1's
    write_trace(os.path.join(other, "f1.h5"), 61, T_=90)
    with h5py.File(os.path.join(other, "f1.h5"), "r+") as f:   # finite, but the float32 scores overflow
        for name in ("queries", "keys"):
            x = f[name][()] * np.float32(1e20)
            del f[name]
            f[name] = x
    wrap = os.path.join(tmp, "node1.sh")
    with open(wrap, "w") as f:
        f.write('#!/bin/sh\n[ "$OMPI_COMM_WORLD_RANK" = 1 ] && cd "%s"\nexec "$@"\n' % other)
    os.chmod(wrap, 0o755)
    out = os.path.join(tmp, "f_bad")
    p = sim(names, out, 2, wrap=[wrap], cwd=tmp)
    fault_then_resume(tmp, one, names, "a bad trace on rank 1 only", p, out, "not finite")
    # rank 1 out of memory: its address space limited to what it maps before its first replay
    oom(tmp)
    # one process, no MPI: --resume keeps the work folder too (killed after its second trace)
    out = os.path.join(tmp, "f_single")
    p = sim(names, out, extra=["--resume"], env={"KVTRACE_TEST_FAULT": "0:2:kill"}, cwd=tmp)
    check(p.returncode == -9 and not os.path.exists(out) and len(units(out)) == 2,
          "one process --resume killed after 2 units: no output, 2 results kept", str(p.returncode))
    p = sim(names, out, extra=["--resume"], cwd=tmp)
    check(p.returncode == 0 and "--resume: 2 of %d units" % (len(names) * L * NP) in p.stderr and same_data(one, out) and
          not os.path.exists(out + ".work"), "one process --resume: finishes the other units, byte-identical",
          p.stderr)
    # a work folder of another command is refused, in one line
    out = os.path.join(tmp, "f_other")
    p = sim(names, out, 2, env={"KVTRACE_TEST_FAULT": "1:1:kill"}, cwd=tmp)
    p = sim(names[:5], out, 2, extra=["--resume"], cwd=tmp)
    check(p.returncode == 2 and len(error_lines(p.stderr)) == 1 and "made by another command" in p.stderr,
          "--resume of another command's work folder: exit 2, one line", p.stderr)


if __name__ == "__main__":
    sys.exit(main())
