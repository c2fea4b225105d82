"""`kvtrace fit` (docs/policy-search.md) on synthetic feature files written here with h5py in the
format `kvtrace features` writes: (1) least squares recovers known coefficients and equals numpy's lstsq on
the per-step z-scores (computed here); (2) ridge equals numpy's closed form (intercept unpenalised) and
shrinks as lambda grows; (3) logistic equals a numpy IRLS written here; (4) rank recovers the direction of
the weights that made the oracle's kept sets; (5) the policy.defines expression, evaluated here in numpy,
reproduces fit --scores to 1e-9; (6) the --csv form fits the same; (7) a fit whose target is knorm's own
score gives an expression that keeps knorm's sets in sim on a synthetic trace; (8) bad feature files and
--features exit 3 with one line and write nothing. TAP."""
import csv
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from tap import check, close, finish  # noqa: E402
from kvrng import Rng  # noqa: E402

ROOT = os.environ.get("ROOT") or os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BUILD", "build")
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, BUILD, "kvtrace")
NAMES = ["knorm", "vnorm", "attn_window(8)", "pos"]


def zscore(x):
    """z() of docs/expressions.md: population sd, 0 when sd = 0 (written here, not read from the C)."""
    m = x.mean(axis=0)
    sd = np.sqrt(((x - m) ** 2).mean(axis=0))
    return np.where(sd > 0, (x - m) / np.where(sd > 0, sd, 1), 0.0)


def make_steps(rng, n_steps, F, lo=20, hi=60):
    """Raw features per step (each step its own scale and offset) and their z-scores."""
    steps = []
    for _ in range(n_steps):
        n = int(rng.integers(lo, hi))
        raw = (rng.normal(size=(n, F)) * rng.uniform(0.5, 3, F) + rng.normal(size=F) * 5).astype(np.float32)
        steps.append((raw, zscore(raw.astype(np.float64))))
    return steps


def write_h5(path, steps, attn, keep, names=NAMES, traces=2, fmt="kvtrace-features", drop=None, nan=False):
    """The feature file of `kvtrace features` (the task's format), the steps split over `traces` groups."""
    with h5py.File(path, "w") as f:
        f.attrs["format"] = fmt
        f.attrs["format_version"] = 1
        f.attrs["feature_names"] = np.array(names, dtype=h5py.string_dtype())
        per = np.array_split(np.arange(len(steps)), traces)
        for t, idx in enumerate(per):
            g = f.create_group("traces/p%02d" % t)
            g.attrs["model"] = "synthetic"
            rows = [(i, j) for i in idx for j in range(steps[i][0].shape[0])]
            feats = np.concatenate([steps[i][0] for i in idx]) if len(idx) else np.zeros((0, len(names)), np.float32)
            if nan and t == 0:
                feats[3, 1] = np.nan
            cols = {"features": feats, "step": np.array([i for i, _ in rows], np.int32),
                    "layer": np.zeros(len(rows), np.int32), "kv_head": np.zeros(len(rows), np.int32),
                    "position": np.array([j for _, j in rows], np.int32),
                    "future_attn": np.concatenate([attn[i] for i in idx]).astype(np.float32) if len(idx) else np.zeros(0, np.float32),
                    "oracle_keep": np.concatenate([keep[i] for i in idx]).astype(np.uint8) if len(idx) else np.zeros(0, np.uint8),
                    "age": np.zeros(len(rows), np.int32)}
            for k, v in cols.items():
                if k != drop:
                    g.create_dataset(k, data=v)
            g.attrs["n_rows"] = len(rows)


def write_csv(path, steps, attn, keep, names=NAMES, traces=2):
    per = np.array_split(np.arange(len(steps)), traces)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["trace", "layer", "kv_head", "step", "position"] + names + ["future_attn", "oracle_keep", "age"])
        for t, idx in enumerate(per):
            for i in idx:
                for j in range(steps[i][0].shape[0]):
                    w.writerow(["p%02d" % t, 0, 0, i, j] + [repr(float(x)) for x in steps[i][0][j]] +
                               [repr(float(np.float32(attn[i][j]))), int(keep[i][j]), 0])


def fit(files, out, *args):
    return subprocess.run([KV, "fit"] + list(files) + ["-o", out] + list(args), capture_output=True, text=True)


def fitted(out):
    with open(os.path.join(out, "fit.json")) as fh:
        j = json.load(fh)
    return np.array([j["coefficients"][n] for n in j["features"]]), j["intercept"], j


def design(steps):
    return np.concatenate([z for _, z in steps])


def test_ls_ridge(tmp, rng):
    F = len(NAMES)
    steps = make_steps(rng, 40, F)
    w_true = np.array([0.7, -0.3, 1.2, 0.05])
    attn = [0.3 + z @ w_true + 1e-3 * rng.normal(size=z.shape[0]) for _, z in steps]
    keep = [np.zeros(z.shape[0], np.uint8) for _, z in steps]
    path = os.path.join(tmp, "ls.h5")
    write_h5(path, steps, attn, keep)
    Z = design(steps)
    y = np.concatenate(attn).astype(np.float32).astype(np.float64)
    X = np.hstack([np.ones((Z.shape[0], 1)), Z])
    out = os.path.join(tmp, "ls")
    p = fit([path], out, "--scores")
    if not check(p.returncode == 0, "fit ls runs", p.stderr):
        return
    w, b, j = fitted(out)
    ref = np.linalg.lstsq(X, y, rcond=None)[0]
    close("ls weights = numpy lstsq on the step z-scores", w, ref[1:], 1e-9, 1e-8)
    close("ls intercept = numpy lstsq", [b], [ref[0]], 1e-9, 1e-8)
    close("ls recovers the generating weights (noise 1e-3)", w, w_true, 2e-3, 0)
    close("ls loss = numpy's mean squared residual", [j["loss"]], [np.mean((y - X @ ref) ** 2)], 1e-12, 1e-6)
    check(j["n_rows"] == Z.shape[0] and j["n_steps"] == 40, "fit.json counts rows and steps",
          (j["n_rows"], j["n_steps"]))
    check_expression(out, path, steps)
    norms = []
    for lam in (1.0, 100.0, 10000.0):
        o = os.path.join(tmp, "ridge%g" % lam)
        p = fit([path], o, "--objective", "ridge", "--lambda", repr(lam))
        if not check(p.returncode == 0, "fit ridge lambda %g runs" % lam, p.stderr):
            return
        w, b, _ = fitted(o)
        P = np.eye(F + 1) * lam
        P[0, 0] = 0
        ref = np.linalg.solve(X.T @ X + P, X.T @ y)
        close("ridge lambda %g = numpy closed form" % lam, np.r_[b, w], ref, 1e-9, 1e-7)
        norms.append(np.linalg.norm(w))
    check(norms[0] > norms[1] > norms[2], "ridge shrinks the weights as lambda grows", norms)
    csvp = os.path.join(tmp, "ls.csv")
    write_csv(csvp, steps, attn, keep)
    o = os.path.join(tmp, "lscsv")
    p = fit([csvp], o)
    if check(p.returncode == 0, "fit reads the --csv form", p.stderr):
        close("the --csv form fits the same weights as the HDF5 file", fitted(o)[0], fitted(out)[0], 1e-12, 1e-9)
    # a column name is written into policy.defines as z(NAME): only the features the language lists, once each
    for what, names in (("an injected expression", ["knorm)*0 + 1e9*pos + (knorm", "vnorm", "attn_window(8)", "pos"]),
                        ("a column twice", ["knorm", "knorm", "attn_window(8)", "pos"]),
                        ("a feature with too many arguments", ["knorm", "vnorm", "attn_window(8,3)", "pos"])):
        bad = os.path.join(tmp, "bad_names.csv")
        write_csv(bad, steps, attn, keep, names=names)
        o = os.path.join(tmp, "bad_names")
        p = fit([bad], o)
        check(p.returncode == 3 and len(p.stderr.strip().splitlines()) == 1 and "feature column" in p.stderr
              and not os.path.exists(o), "a feature file with %s in its columns: exit 3, one line, nothing written" % what,
              "rc %d: %s" % (p.returncode, p.stderr))


def check_expression(out, path, steps):
    """The policy.defines line evaluated here over the file's features reproduces scores.csv to 1e-9."""
    with open(os.path.join(out, "policy.defines")) as fh:
        lines = [l for l in fh if l.strip() and not l.startswith("#")]
    check(len(lines) == 1, "policy.defines holds one definition", lines)
    name, expr = lines[0].split("=", 1)
    terms = re.findall(r"([+-]?)\s*([0-9.eE+-]+)\*z\((.*?\)?)\)(?=\s*[+-]|\s*$)", expr.strip())
    coef = {t[2]: float(t[1]) * (-1 if t[0] == "-" else 1) for t in terms}
    check(sorted(coef) == sorted(NAMES), "the expression has one z() term per feature", expr)
    with h5py.File(path) as f:
        score = []
        for t in sorted(f["traces"]):
            g = f["traces"][t]
            x = g["features"][...].astype(np.float64)
            key = g["step"][...]
            for s in np.unique(key):
                z = zscore(x[key == s])
                acc = coef[NAMES[0]] * z[:, 0]
                for k in range(1, len(NAMES)):
                    acc = acc + coef[NAMES[k]] * z[:, k]
                score.append(acc)
    score = np.concatenate(score)
    with open(os.path.join(out, "scores.csv")) as fh:
        got = np.array([float(r["score"]) for r in csv.DictReader(fh)])
    close("the emitted expression reproduces fit's scores (numpy evaluation)", score, got, 1e-9, 0)
    with open(os.path.join(out, "fit.json")) as fh:
        rep = json.load(fh).get("reproduced_max_rel_diff")
    with open(os.path.join(out, "policy.defines")) as fh:
        said = [l for l in fh if "expression engine" in l]
    check(isinstance(rep, float) and 0 <= rep <= 1e-12 and len(said) == 1,
          "fit checked, before writing, that the expression engine reproduces the fitted scores to 1e-12 "
          "(fit.json reproduced_max_rel_diff %r, and a # line)" % rep, said)


def irls(X, y, lam, pen_mask, iters=100):
    """Newton's method on sum log-loss + lam/2 |w|^2 (written here, independently of the C)."""
    th = np.zeros(X.shape[1])
    for _ in range(iters):
        p = 1 / (1 + np.exp(-(X @ th)))
        g = X.T @ (y - p) - lam * pen_mask * th
        H = (X * (p * (1 - p))[:, None]).T @ X + lam * np.diag(pen_mask)
        d = np.linalg.solve(H, g)
        th = th + d
        if np.abs(d).max() < 1e-13:
            break
    return th


def test_logistic(tmp, rng):
    F = len(NAMES)
    steps = make_steps(rng, 30, F)
    w_true = np.array([1.5, -0.8, 0.4, 0.0])
    keep = [(rng.uniform(size=z.shape[0]) < 1 / (1 + np.exp(-(-0.2 + z @ w_true)))).astype(np.uint8) for _, z in steps]
    attn = [np.zeros(z.shape[0]) for _, z in steps]
    path = os.path.join(tmp, "lg.h5")
    write_h5(path, steps, attn, keep)
    out = os.path.join(tmp, "lg")
    p = fit([path], out, "--objective", "logistic", "--lambda", "0.01")
    if not check(p.returncode == 0, "fit logistic runs", p.stderr):
        return
    w, b, j = fitted(out)
    Z = design(steps)
    X = np.hstack([np.ones((Z.shape[0], 1)), Z])
    ref = irls(X, np.concatenate(keep).astype(float), 0.01, np.r_[0.0, np.ones(F)])
    close("logistic = a numpy IRLS (lambda 0.01)", np.r_[b, w], ref, 1e-7, 1e-6)
    check(j["converged"], "logistic converged", j)
    # separable: the oracle keeps exactly the candidates with z(knorm) > 0; the ridge keeps it finite
    keep2 = [(z[:, 0] > 0).astype(np.uint8) for _, z in steps]
    path2 = os.path.join(tmp, "sep.h5")
    write_h5(path2, steps, attn, keep2)
    out2 = os.path.join(tmp, "sep")
    p = fit([path2], out2, "--objective", "logistic")
    if check(p.returncode == 0, "fit logistic on separable data runs", p.stderr):
        w, b, j = fitted(out2)
        check(np.all(np.isfinite(w)) and w[0] > 0 and j["converged"] and j["recall"] == 1.0,
              "separable data: finite weights (small ridge), recall 1", j)


def test_rank(tmp, rng):
    F = len(NAMES)
    steps = make_steps(rng, 30, F)
    w_true = np.array([-1.0, 0.5, 2.0, 0.0])
    keep = []
    for _, z in steps:
        s = z @ w_true + 0.05 * rng.normal(size=z.shape[0])
        k = np.zeros(z.shape[0], np.uint8)
        k[np.argsort(-s)[: z.shape[0] // 3]] = 1
        keep.append(k)
    attn = [np.zeros(z.shape[0]) for _, z in steps]
    path = os.path.join(tmp, "rk.h5")
    write_h5(path, steps, attn, keep)
    out = os.path.join(tmp, "rk")
    p = fit([path], out, "--objective", "rank", "--seed", "7", "--pairs", "200")
    if not check(p.returncode == 0, "fit rank runs", p.stderr):
        return
    w, b, j = fitted(out)
    cos = w @ w_true / np.linalg.norm(w) / np.linalg.norm(w_true)
    check(cos > 0.95 and b == 0, "rank recovers the ordering direction (cosine %.4f)" % cos, w)
    check(j["recall"] > 0.9, "rank: the fitted score's top |kept| holds > 90%% of the kept (%.3f)" % j["recall"], j)
    o2 = os.path.join(tmp, "rk2")
    fit([path], o2, "--objective", "rank", "--seed", "7", "--pairs", "200")
    check(np.array_equal(fitted(o2)[0], w), "rank is deterministic for one seed", "")


def one_line_exit3(p, what, out):
    lines = p.stderr.strip().splitlines()
    check(p.returncode == 3 and len(lines) == 1 and lines[0].startswith("kvtrace: error: ") and not os.path.exists(out),
          what, "rc %d, stderr %r, out exists %s" % (p.returncode, p.stderr, os.path.exists(out)))


def test_bad(tmp, rng):
    steps = make_steps(rng, 6, len(NAMES))
    attn = [np.zeros(z.shape[0]) for _, z in steps]
    keep = [np.zeros(z.shape[0], np.uint8) for _, z in steps]
    cases = [("the wrong format attribute", dict(fmt="kvtrace-trace")),
             ("a missing column (oracle_keep)", dict(drop="oracle_keep")),
             ("a NaN feature", dict(nan=True)),
             ("no rows", dict(traces=1)),
             ("feature_names of a different count than the matrix", dict(names=NAMES[:3]))]
    for what, kw in cases:
        path = os.path.join(tmp, "bad.h5")
        st = [] if what == "no rows" else steps
        write_h5(path, st, attn[: len(st)], keep[: len(st)], **kw)
        out = os.path.join(tmp, "badout")
        one_line_exit3(fit([path], out), "bad file: %s exits 3, one line, nothing written" % what, out)
    path = os.path.join(tmp, "len.h5")
    write_h5(path, steps, attn, keep)
    with h5py.File(path, "a") as f:
        del f["traces/p00/age"]
        f["traces/p00/age"] = np.zeros(3, np.int32)
    out = os.path.join(tmp, "badout")
    one_line_exit3(fit([path], out), "bad file: columns of mismatched lengths exit 3", out)
    good = os.path.join(tmp, "good.h5")
    write_h5(good, steps, attn, keep)
    one_line_exit3(fit([good], out, "--features", "knorm,nosuch"), "an unknown --features name exits 3", out)
    path = os.path.join(tmp, "unk.h5")
    write_h5(path, steps, attn, keep, names=["knorm", "vnorm", "attn_window(8)", "nosuch"])
    one_line_exit3(fit([path], out), "a column the expression language does not know exits 3", out)
    p = fit([good], out, "--name", "bad name")
    check(p.returncode == 2 and not os.path.exists(out), "a bad --name is a usage error, nothing written", p.stderr)
    with open(os.path.join(tmp, "bad.csv"), "w") as fh:
        fh.write("trace,layer,kv_head,step,position,knorm,future_attn,oracle_keep,age\np,0,0,0,0,nan,0,0,0\n")
    one_line_exit3(fit([os.path.join(tmp, "bad.csv")], out), "a NaN in the --csv form exits 3", out)


def kept(out):
    with h5py.File(os.path.join(out, "results.h5"), "r") as f:
        return {(g.attrs["policy"], int(g.attrs["budget"]), g.attrs.get("trace", "")): g["retained"][()]
                for g in f["runs"].values()}


def synth_study(tmp, n):
    """n synthetic traces and the index.jsonl of a study over them (sha256 computed here)."""
    d = os.path.join(tmp, "study")
    os.makedirs(d)
    with open(os.path.join(d, "index.jsonl"), "w") as idx:
        for i in range(n):
            name = "p%02d.h5" % i
            subprocess.run([KV, "synth", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--head-dim", "16",
                            "--tokens", "80", "--seed", str(i), "--quiet", "-o", os.path.join(d, name)], check=True,
                           capture_output=True)
            with open(os.path.join(d, name), "rb") as fh:
                sha = hashlib.sha256(fh.read()).hexdigest()
            idx.write(json.dumps({"id": "p%02d" % i, "file": name, "tokens": 80, "sha256": sha}) + "\n")
    return d


def test_builtin(tmp, rng, study):
    """Target -z(knorm): the fitted expression keeps knorm's sets when sim replays it."""
    steps = make_steps(rng, 20, len(NAMES))
    attn = [-z[:, 0] for _, z in steps]
    keep = [np.zeros(z.shape[0], np.uint8) for _, z in steps]
    path = os.path.join(tmp, "kn.h5")
    write_h5(path, steps, attn, keep)
    out = os.path.join(tmp, "kn")
    p = fit([path], out, "--name", "fitkn")
    if not check(p.returncode == 0, "fit on the target -z(knorm) runs", p.stderr):
        return
    w = fitted(out)[0]
    close("the fit on -z(knorm) recovers weight -1 on z(knorm), 0 elsewhere", w, [-1, 0, 0, 0], 1e-6, 0)
    res = os.path.join(tmp, "knsim")
    p = subprocess.run([KV, "sim", study, "--defines", os.path.join(out, "policy.defines"), "--policies",
                        "fitkn,knorm", "--budgets", "16,40", "--chunk", "16", "--quiet", "-o", res],
                       capture_output=True, text=True)
    if not check(p.returncode == 0, "sim replays the fitted policy.defines beside knorm", p.stderr):
        return
    k = kept(res)
    pairs = [(key, k[("knorm",) + key[1:]]) for key in k if key[0] == "fitkn"]
    check(len(pairs) == 2 * 6 and all(np.array_equal(k[a], b) for a, b in pairs),
          "the fitted policy keeps exactly knorm's sets (6 traces, N = 16, 40)", len(pairs))


def test_heldout(tmp, rng, study):
    """--study S --split: the split is a seeded partition, only the training prompts are fitted, the table is
    sim's summary.csv over the test prompts, and the figure is drawn."""
    ids = ["p%02d" % i for i in range(6)]
    steps = make_steps(rng, 24, len(NAMES))
    attn = [z @ np.array([-1.0, 0.2, 0.5, 0.1]) for _, z in steps]
    keep = [np.zeros(z.shape[0], np.uint8) for _, z in steps]
    path = os.path.join(tmp, "ho.h5")
    write_h5(path, steps, attn, keep, traces=6)
    with h5py.File(path, "a") as f:
        for i, n in enumerate(sorted(f["traces"])):
            f.move("traces/" + n, "traces/" + ids[i])
    rows = {}
    with h5py.File(path) as f:
        for i in ids:
            rows[i] = f["traces"][i]["features"].shape[0]
    out = os.path.join(tmp, "ho")
    args = ["--study", study, "--split", "0.5", "--split-seed", "4", "--budgets", "16,40", "--chunk", "16",
            "--baselines", "keydiff,tova,oracle"]
    p = fit([path], out, *args)
    if not check(p.returncode == 0, "fit --study --split runs the held-out sim", p.stderr):
        return
    with open(os.path.join(out, "split.json")) as fh:
        sp = json.load(fh)
    check(sorted(sp["train"] + sp["test"]) == ids and len(sp["train"]) == 3 and not set(sp["train"]) & set(sp["test"]),
          "split.json: a partition of the study's prompts, half training", sp)
    j = fitted(out)[2]
    check(j["n_rows"] == sum(rows[i] for i in sp["train"]), "only the training prompts' rows are fitted",
          (j["n_rows"], sp))
    with open(os.path.join(out, "heldout.csv")) as fh:
        ho = list(csv.DictReader(fh))
    with open(os.path.join(out, "heldout", "summary.csv")) as fh:
        sm = [r for r in csv.DictReader(fh) if r["phase"] == "all"]
    check(len(ho) == 8 and [r["policy"] for r in ho[::2]] == ["fitted", "keydiff", "tova", "oracle"],
          "heldout.csv: one row per policy and budget, the fitted policy first", [r["policy"] for r in ho])
    same = all(abs(float(a["out_rel_err_mean"]) - float(b["out_rel_err_mean"])) <= 1e-8 * abs(float(b["out_rel_err_mean"])) and
               float(a["attn_recall_ci_lo"]) == float("%.9g" % float(b["attn_recall_mean_ci_lo"])) and
               int(a["n_traces"]) == 3 for a, b in zip(ho, sm))
    check(same, "heldout.csv's means and intervals are sim's over the 3 test prompts", ho[:2])
    with h5py.File(os.path.join(out, "heldout", "results.h5")) as f:
        traces = sorted({g.attrs["trace"] for g in f["runs"].values()})
    check(traces == sorted(sp["test"]), "the held-out sim ran on the test prompts only", traces)
    md = open(os.path.join(out, "heldout.md")).read()
    check("Fit on synthetic, tested on" in md and "N = 16" in md and "N = 40" in md,
          "heldout.md names the models and gives each budget's verdict", md[:300])
    check(os.path.getsize(os.path.join(out, "heldout.svg")) > 1000, "the figure heldout.svg is drawn")
    # the verdict: the paired difference against the best baseline, bootstrapped here (core/rng.c restated)
    with open(os.path.join(out, "heldout", "summary_by_trace.csv")) as fh:
        bt = [r for r in csv.DictReader(fh) if r["phase"] == "all"]
    with open(os.path.join(out, "heldout_verdict.csv")) as fh:
        ver = list(csv.DictReader(fh))
    n = len(sp["test"])
    r = Rng(21, n, 0, 0)
    idx = np.array([r.below(n) for _ in range(2000 * n)], dtype=np.int64).reshape(2000, n)
    ok = len(ver) == 2
    for v in ver:
        B = int(v["budget"])
        best = min((r for r in ho if int(r["budget"]) == B and r["policy"] not in ("fitted", "oracle")),
                   key=lambda r: float(r["out_rel_err_mean"]))["policy"]
        err = {(r["policy"], r["trace"]): float(r["out_rel_err_mean"]) for r in bt if int(r["budget"]) == B}
        d = np.array([err[("fitted", t)] - err[(best, t)] for t in sp["test"]])
        means = d[idx].mean(axis=1)
        lo, hi = np.percentile(means, [2.5, 97.5])
        want = "win" if hi < 0 else "loss" if lo > 0 else "unclear"
        ok = ok and v["baseline"] == best and v["verdict"] == want and all(
            abs(float(v[k]) - x) <= 1e-8 * max(1e-3, abs(x)) for k, x in (("diff_mean", d.mean()), ("diff_ci_lo", lo),
                                                                          ("diff_ci_hi", hi)))
    check(ok, "heldout_verdict.csv: the paired difference and its bootstrap interval equal numpy's", ver)
    out2 = os.path.join(tmp, "ho2")
    fit([path], out2, *args)
    check(json.load(open(os.path.join(out2, "split.json"))) == sp, "the split is the same for the same seed")
    bad = os.path.join(tmp, "ho3")
    p = fit([path], bad, "--study", study, "--budgets", "16", "--chunk", "16")
    check(p.returncode == 2 and not os.path.exists(bad), "--study without --split is a usage error", p.stderr)


def main():
    rng = np.random.default_rng(23)
    with tempfile.TemporaryDirectory(prefix="kvfit.") as tmp:
        test_ls_ridge(tmp, rng)
        test_logistic(tmp, rng)
        test_rank(tmp, rng)
        test_bad(tmp, rng)
        study = synth_study(tmp, 6)
        test_builtin(tmp, rng, study)
        test_heldout(tmp, rng, study)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
