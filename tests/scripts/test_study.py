"""Studies (issue #21): `sim --chunks` sweeps prefill chunks in one run, each chunk's rows
and summary equal to a separate `sim --chunk B` run's; usage errors of the sweep. TAP."""
import csv
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402
from tracefile import write_root_attrs  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
L, H, K, D, T, P = 2, 4, 2, 8, 70, 50


def write_trace(path, seed, T_=T, P_=P, model="brute"):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        write_root_attrs(f, "test_study", L, H, K, D, T_, P_)
        f.attrs["model_name"] = model
        f["tokens"] = rng.integers(0, 100, T_).astype(np.int32)
        f["keys"] = (rng.normal(size=D) + 0.6 * rng.normal(size=(L, K, T_, D))).astype(np.float32)
        f["values"] = rng.normal(size=(L, K, T_, D)).astype(np.float32)
        f["queries"] = (1.5 * rng.normal(size=(L, H, T_, D))).astype(np.float32)


def run(*args):
    return subprocess.run([KVTRACE, *args], capture_output=True, text=True)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


POLICIES = "keydiff,tova,snapkv,streaming,full"


def sim_args(trace, out, *extra, policies=POLICIES):
    return ["sim", trace, "--policies", policies, "--budgets", "16,24", "--threads", "2", "--quiet", "-o", out,
            *extra]


def key(r):
    return (r["config"], r["allocator"], r["budget"], r.get("layer"), r.get("q_head"), r["phase"])


def chunk_sweep(tmp):
    tr = os.path.join(tmp, "t.h5")
    write_trace(tr, 3)
    sweep = os.path.join(tmp, "sweep")
    p = run(*sim_args(tr, sweep, "--chunks", "8,32,5", "--allocators", "uniform,adakv"))
    if not check(p.returncode == 0, "sim --chunks 8,32,5 runs", p.stderr):
        return
    for name in ("results.csv", "summary.csv", "timing.csv"):
        got = rows(os.path.join(sweep, name))
        chunks = sorted({r["chunk"] for r in got}, key=int)
        check(chunks == ["5", "8", "32"], "%s: a chunk column holding every swept chunk" % name, chunks)
    order = [r["chunk"] for r in rows(os.path.join(sweep, "summary.csv"))]
    firsts = list(dict.fromkeys(order))
    check(firsts == ["8", "32", "5"], "summary.csv: chunks in the order given (policy, allocator, chunk, budget)",
          firsts)
    for B in (8, 32, 5):
        one = os.path.join(tmp, "one%d" % B)
        q = run(*sim_args(tr, one, "--chunk", str(B), "--allocators", "uniform,adakv"))
        if not check(q.returncode == 0, "sim --chunk %d runs" % B, q.stderr):
            continue
        for name in ("results.csv", "summary.csv"):
            a = [r for r in rows(os.path.join(sweep, name)) if r["chunk"] == str(B)]
            b = rows(os.path.join(one, name))
            check(len(a) == len(b) and all(x == y for x, y in zip(a, b)),
                  "%s: chunk %d's rows equal a separate --chunk %d run's" % (name, B, B),
                  lambda: "%d vs %d rows; first differing: %s" % (
                      len(a), len(b), next(((x, y) for x, y in zip(a, b) if x != y), None)))
        with h5py.File(os.path.join(sweep, "results.h5"), "r") as fa, \
                h5py.File(os.path.join(one, "results.h5"), "r") as fb:
            ra = [g for g in fa["runs"].values() if int(g.attrs["chunk"]) == B]
            rb = list(fb["runs"].values())
            same = len(ra) == len(rb) and all(
                np.array_equal(x["retained"][()], y["retained"][()]) for x, y in zip(ra, rb))
            check(same, "results.h5: chunk %d's runs keep the same sets as the separate run's" % B)
    # the grid runs with a model-wide allocator too (lock-step pass, one chunk per configuration)
    g = os.path.join(tmp, "global")
    p = run(*sim_args(tr, g, "--chunks", "8,32", "--allocators", "global", policies="tova,snapkv"))
    q = run(*sim_args(tr, g + "1", "--chunk", "32", "--allocators", "global", policies="tova,snapkv"))
    ok = p.returncode == 0 and q.returncode == 0
    if check(ok, "--chunks with a model-wide allocator (global) runs", p.stderr + q.stderr):
        a = [r for r in rows(os.path.join(g, "results.csv")) if r["chunk"] == "32"]
        check(a == rows(os.path.join(g + "1", "results.csv")), "global: chunk 32's rows equal a --chunk 32 run's")


def chunk_usage(tmp):
    tr = os.path.join(tmp, "u.h5")
    write_trace(tr, 4)
    for extra, what in ((["--chunks", "8,16", "--chunk", "8"], "--chunk and --chunks together"),
                        (["--chunks", "8,08"], "a chunk named twice"),
                        (["--chunks", "8,0"], "a chunk below 1"),
                        (["--chunks", "8,16", "--step-counts"], "--step-counts with several chunks"),
                        ([], "neither --chunk nor --chunks")):
        out = os.path.join(tmp, "bad")
        p = run(*sim_args(tr, out, *extra))
        lines = p.stderr.strip().splitlines()
        check(p.returncode == 2 and len(lines) == 1 and lines[0].startswith("kvtrace: error:")
              and not os.path.exists(out), "usage error (exit 2, one line, nothing written): " + what,
              "rc %d: %s" % (p.returncode, p.stderr))
    out = os.path.join(tmp, "one")
    p = run(*sim_args(tr, out, "--chunks", "16", "--step-counts"))
    check(p.returncode == 0, "--chunks with one chunk takes --step-counts", p.stderr)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        chunk_sweep(tmp)
        chunk_usage(tmp)
    sys.exit(finish())


if __name__ == "__main__":
    main()
