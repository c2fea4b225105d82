"""Fixtures: the C tool (KVTRACE, else <repo>/build/kvtrace; a test fails without it, it is never
skipped) and the files it writes, made once per session in a temporary directory from small
synthetic traces: one trace, its sim results and analysis; a study of three traces with spans, its
results over two chunks and its study analysis."""
import hashlib
import json
import os
import subprocess

import h5py
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))

SHAPE = dict(L=2, H=4, K=2, D=8)
POLICIES = "keydiff,tova,streaming,full"


@pytest.fixture(scope="session")
def kvtrace_bin():
    path = os.environ.get("KVTRACE") or os.path.join(REPO, "build", "kvtrace")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail("the kvtrace binary %s does not exist: build it (make build/kvtrace) or set KVTRACE" % path)
    return path


@pytest.fixture(scope="session")
def run_kvtrace(kvtrace_bin):
    """run_kvtrace(*args, ok=True): runs the C tool; with ok, asserts it exited 0. Returns the CompletedProcess."""

    def run(*args, ok=True, cwd=None):
        p = subprocess.run([kvtrace_bin, *map(str, args)], capture_output=True, text=True, cwd=cwd)
        if ok:
            assert p.returncode == 0, "kvtrace %s: exit %d\n%s" % (" ".join(map(str, args)), p.returncode, p.stderr)
        return p

    return run


def synth(run_kvtrace, path, T, P, seed, dtype="f32"):
    run_kvtrace("synth", "--layers", SHAPE["L"], "--heads", SHAPE["H"], "--kv-heads", SHAPE["K"], "--head-dim",
            SHAPE["D"], "--tokens", T, "--prompt-len", P, "--vocab", 100, "--seed", seed, "--dtype", dtype,
            "--threads", 1, "--quiet", "-o", path)
    return str(path)


def add_spans(path, spans):
    """Adds /spans to a trace as capture --prompts writes it (names variable-length UTF-8, starts/ends int64)."""
    with h5py.File(path, "a") as f:
        g = f.create_group("spans")
        g.create_dataset("names", data=[n for n, _, _ in spans], dtype=h5py.string_dtype("utf-8"))
        g["starts"] = [a for _, a, _ in spans]
        g["ends"] = [b for _, _, b in spans]


def write_index(d, ids):
    with open(os.path.join(d, "index.jsonl"), "w") as idx:
        for i in ids:
            p = os.path.join(d, i + ".h5")
            with open(p, "rb") as f:
                h = hashlib.sha256(f.read()).hexdigest()
            with h5py.File(p, "r") as f:
                T = int(f.attrs["n_tokens"])
            idx.write(json.dumps(dict(id=i, file=i + ".h5", tokens=T, sha256=h)) + "\n")


@pytest.fixture(scope="session")
def files(tmp_path_factory, run_kvtrace):
    """Paths of everything the C tool wrote for the tests (a dict)."""
    d = tmp_path_factory.mktemp("kvtrace")
    out = {"dir": str(d)}
    out["trace"] = synth(run_kvtrace, d / "t.h5", 48, 40, 1)
    out["trace_f16"] = synth(run_kvtrace, d / "t16.h5", 40, 40, 2, dtype="f16")
    out["results"] = str(d / "res")
    run_kvtrace("sim", out["trace"], "--policies", POLICIES, "--budgets", "16,50%", "--allocators", "uniform,pyramid:window=8",
            "--chunk", 8, "--threads", 1, "--quiet", "-o", out["results"])
    out["analysis"] = str(d / "an")
    run_kvtrace("analyze", out["trace"], "--results", out["results"], "--threads", 1, "--quiet", "-o", out["analysis"])
    out["analysis_bare"] = str(d / "an0")
    run_kvtrace("analyze", out["trace"], "--threads", 1, "--quiet", "-o", out["analysis_bare"])

    study = d / "study"
    study.mkdir()
    ids = ["p0", "p1", "NA", "007"]   # valid prompt ids the loaders must read as written, not as NaN or 7
    for i, tid in enumerate(ids):
        T = 48 + 8 * i
        p = synth(run_kvtrace, study / (tid + ".h5"), T, T - 8, 10 + i)
        add_spans(p, [("needle", 5, 9), ("question", 20 + i, 30)])
    write_index(str(study), ids)
    out["study"], out["study_ids"] = str(study), ids
    out["study_results"] = str(d / "sres")
    run_kvtrace("sim", out["study"], "--policies", POLICIES, "--budgets", "16,24", "--chunks", "8,16", "--threads", 1,
            "--quiet", "-o", out["study_results"])
    out["study_analysis"] = str(d / "san")
    run_kvtrace("analyze", out["study"], "--results", out["study_results"], "--baseline", "streaming", "--threads", 1,
            "--quiet", "-o", out["study_analysis"])
    return out
