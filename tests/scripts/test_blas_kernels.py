"""Results that do not depend on the thread count or the number of MPI ranks, under whichever
OpenBLAS kernel runs (docs/reproducibility.md), TAP. tests/run_all.sh runs this script, and every
script tagged `blas`, once more under OPENBLAS_CORETYPE Haswell, SkylakeX (where the CPU has
avx512f), Sandybridge, each with OPENBLAS_NUM_THREADS 1 and 2; the normal leg runs it under the
kernel OpenBLAS picks. Under the kernel in force:

- a dim-256 model (4 heads on 2 kv heads, FFN 688, vocabulary 4096; written here with numpy) whose
  projections and attention are large enough for the CPU kernels to split them over threads
  (model/backend_cpu.c), captured with --threads 1, 2 and 3 over 320 tokens in chunks of 64: the
  traces are identical, provenance aside;
- sim of that trace (keydiff, tova, snapkv; two budgets) with --threads 1 and 2: results identical;
- capture --prompts of three prompts (token ids) under mpirun -n 2, with --threads 1 and 2, against
  one process with --threads 2: index.jsonl and the traces identical;
- sim of the study under mpirun -n 2 against one process: identical;
- the trace against a float64 numpy forward pass of the same weights (tests/lib/hfmodel.py): keys
  and logits within a float32 sum's rounding of their scale (dim terms per product, times the
  layers it passes through).

    KVTRACE=build/kvtrace /usr/bin/python3 tests/scripts/test_blas_kernels.py"""
# tags: blas
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import hfmodel  # noqa: E402
from datacmp import dir_diff, h5_diff  # noqa: E402
from kvrun import KVTRACE, run, write_tokens  # noqa: E402
from tap import check, finish, scaled_diff, skip, sum_tol  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
CFG = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=256, intermediate_size=688,
           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=4096,
           max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
           hidden_act="silu")
T, CHUNK = 320, 64
# under mpirun (as root in CI): LeakSanitizer off, for MPI's own allocations (as test_mpi.py)
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
SIM = ["--policies", "keydiff,tova,snapkv", "--budgets", "64,128", "--chunks", "64", "--quiet"]


def kernel():
    return os.environ.get("OPENBLAS_CORETYPE", "") or "auto", os.environ.get("OPENBLAS_NUM_THREADS", "unset")


def has_mpi():
    try:
        with open(os.path.join(BUILD, "obj", "core", "mpi_probe")) as f:
            return f.read().startswith("mpi=yes") and shutil.which("mpirun") is not None
    except OSError:
        return False


def captures(tmp, model, toks):
    out = {}
    for t in (1, 2, 3):
        out[t] = os.path.join(tmp, "t%d.h5" % t)
        r = run("capture", "--quiet", "--logits", "--model", model, "--tokens", toks, "--chunk", str(CHUNK),
                "--threads", str(t), "-o", out[t])
        if not check(r.returncode == 0, "capture --threads %d" % t, r.stderr):
            return None
    for t in (2, 3):
        d = h5_diff(out[1], out[t])
        check(not d, "capture: the trace with --threads %d is identical to --threads 1's" % t, "\n".join(d[:5]))
    return out[1]


def numpy_check(trace, w, ids):
    """Keys of every layer and the logits against a float64 forward pass of the same weights."""
    ref = hfmodel.forward_all(w, CFG, ids)
    with h5py.File(trace, "r") as f:
        keys, logits = f["keys"][()], f["logits"][()]
    L = CFG["num_hidden_layers"]
    tol = sum_tol(CFG["intermediate_size"]) * 4 * L   # the widest product's terms, each layer's error carried on
    ek = max(scaled_diff(ref["keys"][l], keys[l]) for l in range(L))
    el = scaled_diff(ref["logits"], logits)
    print("# against numpy float64: keys %.3g, logits %.3g of their scale (tolerance %.3g)" % (ek, el, tol))
    check(ek <= tol and el <= tol, "capture: keys and logits equal a float64 numpy forward pass within float32 "
          "rounding of their scale", "keys %.3g logits %.3g tolerance %.3g" % (ek, el, tol))


def sims(tmp, trace):
    out = {}
    for t in (1, 2):
        out[t] = os.path.join(tmp, "sim%d" % t)
        r = run("sim", trace, *SIM, "--threads", str(t), "-o", out[t])
        if not check(r.returncode == 0, "sim --threads %d" % t, r.stderr):
            return
    d = dir_diff(out[1], out[2], skip=("timing.csv",))  # timing.csv: wall times
    check(not d, "sim: results with --threads 2 identical to --threads 1's", "\n".join(d[:5]))


def study_diff(a, b):
    """index.jsonl line for line but its sha256 (of the whole file: the provenance records the command
    line), and each trace's data (datacmp.h5_diff: provenance aside)."""
    def index(d):
        with open(os.path.join(d, "index.jsonl")) as f:
            return [{k: v for k, v in json.loads(line).items() if k != "sha256"} for line in f]
    ia, ib = index(a), index(b)
    if ia != ib:
        return ["index.jsonl: %s vs %s" % (ia, ib)]
    return [d for e in ia for d in h5_diff(os.path.join(a, e["file"]), os.path.join(b, e["file"]))]


def mpi_study(tmp, model):
    if not has_mpi():
        return skip("capture --prompts and sim under mpirun", "this build has no MPI (make deps installs OpenMPI)")
    prompts = os.path.join(tmp, "p.jsonl")
    with open(prompts, "w") as f:
        for i, n in enumerate((200, 260, 230)):
            f.write(json.dumps({"id": "p%d" % i, "tokens": [(13 * j + 5 * i) % 4096 for j in range(n)]}) + "\n")
    cap = [KVTRACE, "capture", "--prompts", prompts, "--model", model, "--chunk", str(CHUNK), "--quiet"]
    one = os.path.join(tmp, "one")
    r = subprocess.run(cap + ["--threads", "2", "-o", one], capture_output=True, text=True, timeout=300)
    if not check(r.returncode == 0, "capture --prompts, one process", r.stderr):
        return
    for t in (1, 2):
        out = os.path.join(tmp, "mpi%d" % t)
        r = subprocess.run(["mpirun", "-n", "2", "--oversubscribe", *cap, "--threads", str(t), "-o", out],
                           capture_output=True, text=True, env=MPI_ENV, timeout=300)
        d = study_diff(one, out) if r.returncode == 0 else [r.stderr]
        check(not d, "capture --prompts under mpirun -n 2, --threads %d: index.jsonl and the traces identical to "
              "one process's (provenance aside)" % t, "\n".join(d[:5]))
    s1, s2 = os.path.join(tmp, "s1"), os.path.join(tmp, "s2")
    r = subprocess.run([KVTRACE, "sim", one, *SIM, "--threads", "2", "-o", s1], capture_output=True, text=True)
    if not check(r.returncode == 0, "sim of the study, one process", r.stderr):
        return
    r = subprocess.run(["mpirun", "-n", "2", "--oversubscribe", KVTRACE, "sim", one, *SIM, "--threads", "1",
                        "-o", s2], capture_output=True, text=True, env=MPI_ENV, timeout=300)
    d = dir_diff(s1, s2, skip=("timing.csv",)) if r.returncode == 0 else [r.stderr]  # timing: wall times
    check(not d, "sim of the study under mpirun -n 2 identical to one process's", "\n".join(d[:5]))


def main():
    if not KVTRACE:
        skip("blas kernels", "KVTRACE not set")
        return finish()
    print("# OPENBLAS_CORETYPE %s, OPENBLAS_NUM_THREADS %s" % kernel())
    tmp = tempfile.mkdtemp(prefix="kvtrace-blas-")
    try:
        w = hfmodel.random_weights(CFG, 11)
        model = os.path.join(tmp, "model")
        hfmodel.write_hf_dir(model, CFG, w, "F32")
        ids = [(7 * i + 3) % CFG["vocab_size"] for i in range(T)]
        trace = captures(tmp, model, write_tokens(tmp, "t.tokens", ids))
        if trace:
            numpy_check(trace, w, ids)
            sims(tmp, trace)
        mpi_study(tmp, model)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
