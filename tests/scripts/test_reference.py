"""The recorded full-cache reference (/attention/out, /attention/lse, /attention/max; docs/sim.md#the-recorded-reference), TAP:

- synth and capture (the default model; CPU, and --device cuda on the host emulation) write them, float32, [L, H, T, D] and [L, H, T], chunked
  like the other per-head datasets; they equal a numpy recomputation (float64) from the trace's own
  /queries, /keys, /values (scale 1/sqrt(D), query head h on kv head h // (H/K)), /attention/max [L, H, T]
  the numpy row maximum of queries.keys/sqrt(D);
- capture leaves them out with --evict and without queries (--record keys,values);
- sim with the recorded reference and sim without it (an h5py copy without the two datasets, and
  KVTRACE_SIM_REFERENCE=recompute) give the same results.csv and summary.csv: text columns equal,
  each numeric column within docs/sim.md's tolerance (T x float32's unit roundoff, T the longest
  sum, relative to the column's largest magnitude, at least 1: the error metrics are ratios), on a
  synth trace and a captured one;
- `kvtrace info` lists them.

    KVTRACE=build/kvtrace /usr/bin/python3 tests/scripts/test_reference.py build"""
# tags: blas
import csv
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import NO_MODEL, check, close, finish, model_file, skip, sum_tol  # noqa: E402

KVTRACE = os.environ.get("KVTRACE") or os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")
PROMPT = "Once upon a time, a little girl named Lily found a shiny red ball in the park near her house."


def run(*args, env=None):
    return subprocess.run([KVTRACE] + [str(a) for a in args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})))


def numpy_reference(f, l, h):
    """out [T, D], lse [T] and the row max [T] of query head h of layer l, in float64 from the stored Q, K, V."""
    H, K, D = int(f.attrs["n_heads"]), int(f.attrs["n_kv_heads"]), int(f.attrs["head_dim"])
    g = h // (H // K)
    q = f["queries"][l, h].astype(np.float64)
    k = f["keys"][l, g].astype(np.float64)
    v = f["values"][l, g].astype(np.float64)
    s = q @ k.T / np.sqrt(D)
    s[np.triu_indices(len(q), 1)] = -np.inf
    m = s.max(axis=1, keepdims=True)
    e = np.exp(s - m)
    z = e.sum(axis=1, keepdims=True)
    return (e @ v) / z, (m + np.log(z))[:, 0], m[:, 0]


def check_datasets(name, path, out_tol, lse_tol, max_tol):
    with h5py.File(path, "r") as f:
        L, H, T, D = (int(f.attrs[a]) for a in ("n_layers", "n_heads", "n_tokens", "head_dim"))
        ok = "attention/out" in f and "attention/lse" in f
        check(ok, "%s: has /attention/out and /attention/lse" % name)
        if not ok:
            return
        o, s = f["attention/out"], f["attention/lse"]
        check(o.shape == (L, H, T, D) and s.shape == (L, H, T), "%s: shapes [L,H,T,D] and [L,H,T]" % name,
              "%s %s" % (o.shape, s.shape))
        check(o.dtype == np.float32 and s.dtype == np.float32, "%s: float32" % name, "%s %s" % (o.dtype, s.dtype))
        check(o.chunks[:2] == (1, 1) and s.chunks[:2] == (1, 1), "%s: chunked per (layer, head)" % name,
              "%s %s" % (o.chunks, s.chunks))
        check(bool(o.attrs.get("description")) and bool(s.attrs.get("description")), "%s: descriptions" % name)
        mx = f.get("attention/max")
        check(mx is not None and mx.shape == (L, H, T) and mx.dtype == np.float32 and mx.chunks[:2] == (1, 1) and
              bool(mx.attrs.get("description")), "%s: /attention/max float32 [L,H,T], chunked, described" % name)
        got_o, got_l, ref_o, ref_l, got_m, ref_m = [], [], [], [], [], []
        for l in range(L):
            for h in range(H):
                ro, rl, rm = numpy_reference(f, l, h)
                scale = np.abs(ro).max() or 1.0
                got_o.append(o[l, h] / scale), ref_o.append(ro / scale)
                got_l.append(s[l, h]), ref_l.append(rl)
                if mx is not None:
                    got_m.append(mx[l, h]), ref_m.append(rm)
        close("%s: /attention/out equals numpy's (relative to each head's largest)" % name,
              np.array(got_o), np.array(ref_o), out_tol, 0)
        close("%s: /attention/lse equals numpy's" % name, np.array(got_l), np.array(ref_l), lse_tol, 0)
        if mx is not None:
            close("%s: /attention/max equals numpy's max of queries.keys/sqrt(D)" % name, np.array(got_m),
                  np.array(ref_m), max_tol, max_tol)


def without_reference(src, dst):
    """An h5py copy of the trace without /attention/out, /attention/lse and /attention/max."""
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        del f["attention/out"], f["attention/lse"], f["attention/max"]


def rows(d, name):
    with open(os.path.join(d, name), newline="") as f:
        return list(csv.DictReader(f))


def number(s):
    try:
        return float(s)
    except ValueError:
        return None


def same_results(what, a, b, T):
    """Text columns equal; each numeric column within sum_tol(T) of its scale (max(1, its largest
    magnitude): out_rel_err and the recalls are ratios, whose absolute error is that of the sums)."""
    tol = sum_tol(T)
    for name in ("results.csv", "summary.csv"):
        ra, rb = rows(a, name), rows(b, name)
        bad, worst, where = [], 0.0, "-"
        if len(ra) != len(rb) or (ra and ra[0].keys() != rb[0].keys()):
            check(False, "%s: %s the same rows" % (what, name), "%d vs %d rows" % (len(ra), len(rb)))
            continue
        for k in (ra[0].keys() if ra else []):
            xs, ys = [number(x[k]) for x in ra], [number(y[k]) for y in rb]
            if any(v is None for v in xs + ys):
                bad += ["row %d %s: %r vs %r" % (i, k, x[k], y[k]) for i, (x, y) in enumerate(zip(ra, rb))
                        if x[k] != y[k]]
                continue
            xs, ys = np.array(xs), np.array(ys)
            if not np.array_equal(np.isnan(xs), np.isnan(ys)):
                bad.append("%s: NaN in different rows" % k)
                continue
            ok = ~np.isnan(xs)
            scale = max(1.0, float(np.abs(xs[ok]).max()) if ok.any() else 0.0)
            d = np.abs(xs[ok] - ys[ok]) / scale
            if d.size and d.max() > worst:
                worst, where = float(d.max()), k
            bad += ["row %d %s: %r vs %r (%.3g of the column's scale)" % (i, k, ra[i][k], rb[i][k], e)
                    for i, e in zip(np.flatnonzero(ok), d) if e > tol]
        print("# %s: %s largest difference %.3g of a column's scale (%s) over %d rows (tolerance %.3g)"
              % (what, name, worst, where, len(ra), tol))
        check(not bad, "%s: %s equal within %d x float32 rounding of each column's scale" % (what, name, T),
              "\n".join(bad[:10]))


def sim_both_ways(what, trace, tmp, *args):
    os.mkdir(os.path.join(tmp, "copy"))
    stripped = os.path.join(tmp, "copy", os.path.basename(trace))  # the same name: results name the trace
    without_reference(trace, stripped)
    outs = {}
    for label, path, env in (("recorded", trace, None), ("copy", stripped, None),
                             ("env", trace, {"KVTRACE_SIM_REFERENCE": "recompute"})):
        outs[label] = os.path.join(tmp, "sim_" + label)
        r = run("sim", path, "--quiet", "--threads", "2", "-o", outs[label], *args, env=env)
        if not check(r.returncode == 0, "%s: sim (%s reference) runs" % (what, label), r.stderr):
            return
    with h5py.File(trace, "r") as f:
        T = f["keys"].shape[2]
    same_results("%s: recorded vs h5py copy without it" % what, outs["recorded"], outs["copy"], T)
    same_results("%s: recorded vs KVTRACE_SIM_REFERENCE=recompute" % what, outs["recorded"], outs["env"], T)
    r = run("info", trace)
    check(r.returncode == 0 and "/attention/out" in r.stdout and "/attention/lse" in r.stdout,
          "%s: info lists /attention/out and /attention/lse" % what, r.stdout + r.stderr)


def synth_case(tmp):
    t = os.path.join(tmp, "synth.h5")
    r = run("synth", "--layers", 2, "--heads", 4, "--kv-heads", 2, "--head-dim", 16, "--tokens", 300,
            "--prompt-len", 240, "--seed", 3, "--quiet", "-o", t)
    if not check(r.returncode == 0, "synth writes a trace", r.stderr):
        return
    check_datasets("synth", t, 1e-6, 1e-6, 1e-6)  # double, rounded once
    d = os.path.join(tmp, "s")
    os.mkdir(d)
    sim_both_ways("synth", t, d, "--policies", "keydiff,tova,snapkv,h2o,oracle", "--budgets", "32,100",
                  "--chunk", 32)
    t16 = os.path.join(tmp, "synth16.h5")
    r = run("synth", "--layers", 1, "--heads", 2, "--kv-heads", 1, "--head-dim", 16, "--tokens", 64, "--dtype",
            "f16", "--quiet", "-o", t16)
    with h5py.File(t16, "r") as f:
        check(r.returncode == 0 and f["attention/out"].dtype == np.float32 and f["keys"].dtype == np.float16,
              "synth --dtype f16: the reference stays float32", r.stderr)


def capture_case(tmp, model):
    t = os.path.join(tmp, "cap.h5")
    r = run("capture", "--quiet", "--model", model, "--prompt", PROMPT, "--generate", 60, "--chunk", 16, "-o", t)
    if not check(r.returncode == 0, "capture (CPU, default model) writes a trace", r.stderr):
        return
    check_datasets("capture", t, 1e-5, 1e-4, 1e-5)  # float32 walk: scores and sums in float
    d = os.path.join(tmp, "c")
    os.mkdir(d)
    sim_both_ways("capture", t, d, "--policies", "keydiff,tova,snapkv,h2o,streaming", "--budgets", "16,40",
                  "--chunk", 16)
    h = os.path.join(tmp, "cap16.h5")
    r = run("capture", "--quiet", "--model", model, "--prompt", PROMPT, "--generate", 60, "--chunk", 16, "--dtype",
            "f16", "-o", h)
    if check(r.returncode == 0, "capture --dtype f16 writes a trace", r.stderr):
        with h5py.File(h, "r") as a, h5py.File(t, "r") as b:
            same = all(a["attention/" + n].dtype == np.float32 and np.array_equal(a["attention/" + n][...],
                                                                                  b["attention/" + n][...])
                       for n in ("out", "lse", "max"))
            check(same and a["keys"].dtype == np.float16,
                  "capture --dtype f16: the reference is float32 and the f32 run's own (from the unrounded keys)")
    emul = os.path.abspath(os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build", "emul", "libkvcuda_emul.so"))
    g = os.path.join(tmp, "cap_cuda.h5")
    r = run("capture", "--quiet", "--model", model, "--prompt", PROMPT, "--generate", 60, "--chunk", 16, "--device",
            "cuda", "-o", g, env={"KVTRACE_CUDA_LIB": emul})
    if check(r.returncode == 0, "capture --device cuda (the host emulation, tests/emul) writes a trace", r.stderr):
        check_datasets("capture --device cuda", g, 1e-5, 1e-4, 1e-5)  # row maxima and sums from the kernel
    for what, extra in (("--evict", ["--evict", "tova", "--budget", "24"]),
                        ("--record keys,values", ["--record", "keys,values"])):
        p = os.path.join(tmp, "no_ref.h5")
        r = run("capture", "--quiet", "--model", model, "--prompt", PROMPT, "--chunk", 16, "-o", p, "--force",
                *extra)
        with h5py.File(p, "r") as f:
            check(r.returncode == 0 and "attention/out" not in f and "attention/lse" not in f and
                  "attention/max" not in f,
                  "capture %s: no recorded reference" % what, r.stderr)


def main():
    model = model_file()
    with tempfile.TemporaryDirectory(prefix="kvref_") as tmp:
        synth_case(tmp)
        if model:
            capture_case(tmp, model)
    if not model:
        skip("capture: the recorded reference", NO_MODEL)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
