"""`kvtrace features` (docs/features.md) against numpy, written apart from the C.

On a synthetic trace (kvtrace synth) and a trace of the default model, every stream is replayed here
chunk by chunk from the file's own rows: the candidates of each eviction step must be the previous
step's kept rows (driver_keep) plus the chunk, and for every step each feature column is recomputed
from the trace (knorm = |k|, cos_anchor against the mean unit key, attn_* from the trace's queries by
softmax over the candidates each query sees, attn_acc summed over every chunk's queries), future_attn
as numpy's full-cache future attention mass, oracle_keep as numpy's top N (ties towards the later
position; disagreements only at near-ties). The driven cache is checked against sim's final kept sets
(results.h5 `retained`) for tova and keydiff and step by step against a numpy StreamingLLM. Also:
--threads 1 and 4 give identical datasets, sampling is seeded, whole-step, of the right fraction and a
subset of the full rows, --csv holds the h5's rows, and bad input is one line, exit 1/2/3, no file. TAP."""
# tags: blas
import csv
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from tap import check, finish, model_file, scaled_diff, skip, sum_tol, NO_MODEL  # noqa: E402

KV = os.environ.get("KVTRACE", "")
FEATS = ["knorm", "vnorm", "cos_anchor", "cos_anchor_raw", "cos_pairwise", "attn_last", "attn_window(32)",
         "attn_pooled(32,5)", "attn_acc", "attn_acc_norm", "pos", "age", "is_sink(4)", "recency_rank"]
DATASETS = ["features", "step", "layer", "kv_head", "position", "future_attn", "oracle_keep", "age", "driver_keep"]


def run(*args):
    return subprocess.run([KV, *args], capture_output=True, text=True)


def softmax(s):
    e = np.exp(s - s.max())
    return e / e.sum()


class Stream:
    """One (layer, kv head) of a trace in double: keys, values, the group's queries, full-cache attention."""

    def __init__(self, f, layer, kvh):
        H, K = f["/queries"].shape[1], f["/keys"].shape[1]
        g = H // K
        self.k = f["/keys"][layer, kvh].astype(np.float64)
        self.v = f["/values"][layer, kvh].astype(np.float64)
        self.q = f["/queries"][layer, kvh * g:(kvh + 1) * g].astype(np.float64)
        self.T, self.D = self.k.shape
        s = self.q @ self.k.T / np.sqrt(self.D)
        s[:, np.triu_indices(self.T, 1)[0], np.triu_indices(self.T, 1)[1]] = -np.inf
        a = np.exp(s - s.max(axis=2, keepdims=True))
        self.full = a / a.sum(axis=2, keepdims=True)          # [g, T, T]

    def attn(self, i, cand):
        """Query i's softmax over the candidates it sees (positions <= i), mean over the group; 0 elsewhere."""
        vis = cand <= i
        out = np.zeros(len(cand))
        if not vis.any():
            return out
        for h in range(self.q.shape[0]):
            out[vis] += softmax(self.q[h, i] @ self.k[cand[vis]].T / np.sqrt(self.D))
        return out / self.q.shape[0]

    def features(self, cand, now, acc):
        k, n = self.k[cand], len(cand)
        kn = np.linalg.norm(k, axis=1)
        unit = k / kn[:, None]
        mu, raw = unit.mean(axis=0), k.mean(axis=0)
        gram = unit @ unit.T
        win = sum(self.attn(i, cand) for i in range(max(0, now - 31), now + 1))
        pooled = np.array([sum(win[c + o] for o in range(-2, 3) if 0 <= c + o < n) / 5 for c in range(n)])
        a = acc[cand]
        return np.stack([kn, np.linalg.norm(self.v[cand], axis=1), unit @ mu / np.linalg.norm(mu),
                         k @ raw / (kn * np.linalg.norm(raw)),
                         (gram.sum(axis=1) - 1.0) / (n - 1) if n > 1 else np.zeros(n),
                         self.attn(now, cand), win, pooled, a, a / (now - cand + 1), cand.astype(float),
                         (now - cand).astype(float), (cand < 4).astype(float),
                         (n - 1 - np.arange(n)) / (n - 1)], axis=1)

    def future(self, cand, now):
        return self.full[:, now + 1:, :][:, :, cand].sum(axis=1).mean(axis=0)


def chunks(T, prompt_len, C):
    """(start, end) of each chunk: the prompt in chunks of C, then one token at a time."""
    out, p = [], 0
    while p < T:
        e = min(p + C, prompt_len) if p < prompt_len else p + 1
        out.append((p, e))
        p = e
    return out


def topn(score, cand, N):
    order = sorted(range(len(cand)), key=lambda c: (-score[c], -cand[c]))
    keep = np.zeros(len(cand), dtype=np.uint8)
    keep[order[:N]] = 1
    return keep, score[order[N - 1]] if N <= len(cand) else -np.inf


def replay(g, tr, layer, kvh, N, C, streaming=False, full_check=True):
    """Walks one stream's rows; returns (problems, final kept positions, steps checked)."""
    sel = (g["layer"][()] == layer) & (g["kv_head"][()] == kvh)
    pos, step, X = g["position"][()][sel], g["step"][()][sel], g["features"][()][sel]
    fut, ok, dk, age = g["future_attn"][()][sel], g["oracle_keep"][()][sel], g["driver_keep"][()][sel], g["age"][()][sel]
    st = Stream(tr, layer, kvh)
    T, P = st.T, int(tr.attrs.get("prompt_len", st.T))
    bad, kept, s, acc = [], np.zeros(0, dtype=np.int64), 0, np.zeros(T)
    for start, end in chunks(T, P, C):
        cand = np.union1d(kept, np.arange(start, end))
        now = end - 1
        for i in range(start, end):
            acc[cand] += st.attn(i, cand)
        if len(cand) <= N:
            kept = cand
            continue
        r = step == s
        if not np.array_equal(pos[r], cand):
            bad.append("step %d: candidates %s != replay %s" % (s, pos[r][:8], cand[:8]))
            return bad, kept, s
        if full_check:
            ref = st.features(cand, now, acc)
            got = X[r].astype(np.float64)
            err = np.abs(got - ref) > 2e-6 + 2e-4 * np.abs(ref)
            if err.any():
                j = np.argwhere(err)[0]
                bad.append("step %d col %s pos %d: %.9g vs numpy %.9g" % (s, FEATS[j[1]], cand[j[0]], got[tuple(j)],
                                                                             ref[tuple(j)]))
            f = st.future(cand, now)
            if (np.abs(fut[r] - f) > 1e-7 + 1e-5 * np.abs(f)).any():
                bad.append("step %d: future_attn differs from numpy" % s)
            want, nth = topn(f, cand, N)
            diff = want != ok[r]
            if diff.any() and (np.abs(f[diff] - nth) > 1e-5 * abs(nth) + 1e-9).any():
                bad.append("step %d: oracle_keep differs from numpy's top N away from a tie" % s)
            if not np.array_equal(age[r], now - cand):
                bad.append("step %d: age" % s)
        if streaming:
            want = ((cand < 4) | (cand >= cand[-(N - 4)])).astype(np.uint8)
            if not np.array_equal(dk[r], want):
                bad.append("step %d: driver_keep is not StreamingLLM's (sinks 4 + recent)" % s)
        if dk[r].sum() != N:
            bad.append("step %d: %d kept, not N" % (s, dk[r].sum()))
        kept = cand[dk[r] == 1]
        s += 1
    if s != (step.max() + 1 if len(step) else 0):
        bad.append("%d steps replayed, the file has %d" % (s, step.max() + 1))
    return bad, kept, s


def features_vs_numpy(tmp, trace, name, N, C, policy="oracle", streams=None):
    out = os.path.join(tmp, "f_%s_%s.h5" % (name, policy.replace(":", "_")))
    r = run("features", trace, "-o", out, "--budget", str(N), "--chunk", str(C), "--policy", policy, "--quiet",
            "--force")
    if not check(r.returncode == 0, "%s: features --policy %s runs" % (name, policy), r.stderr):
        return None
    with h5py.File(out, "r") as f, h5py.File(trace, "r") as tr:
        g = f["traces"][os.path.basename(trace)[:-3]]
        check(list(f.attrs["feature_names"]) == FEATS and list(g["features"].attrs["columns"]) == FEATS,
              "%s: feature_names and columns are the default features, named as expressions" % name,
              str(list(f.attrs["feature_names"])))
        check(f.attrs["format"] == "kvtrace-features" and f.attrs["format_version"] == 1 and
              f.attrs["budget"] == N and f.attrs["chunk"] == C and sorted(g) == sorted(DATASETS) and
              all(g[d].chunks and g[d].compression == "gzip" and len(g[d]) == g.attrs["n_rows"] for d in g) and
              g["features"].dtype == np.float32 and g["oracle_keep"].dtype == np.uint8 and g["step"].dtype == np.int32,
              "%s: format attributes; every dataset chunked, deflated, n_rows long, of the documented type" % name)
        L, K = tr["/keys"].shape[:2]
        bad, steps = [], 0
        for layer, kvh in streams or [(l, k) for l in range(L) for k in range(K)]:
            b, _, s = replay(g, tr, layer, kvh, N, C)
            bad += ["layer %d kv %d: %s" % (layer, kvh, x) for x in b]
            steps += s
        check(not bad and steps > 0, "%s (%s-driven, N=%d, C=%d): every feature, future_attn, oracle_keep and age "
              "equal numpy over %d steps" % (name, policy, N, C, steps), "\n".join(bad[:10]))
    return out


def driven_cache(tmp, trace, N, C):
    for pol in ("tova:scope=group", "keydiff"):
        out = features_vs_numpy(tmp, trace, "synth", N, C, pol, streams=[(0, 0)])
        res = os.path.join(tmp, "sim_" + pol.replace(":", "_"))
        r = run("sim", trace, "--policies", pol, "--budgets", str(N), "--chunk", str(C), "-o", res, "--quiet")
        if out is None or not check(r.returncode == 0, "sim --policies %s" % pol, r.stderr):
            continue
        with h5py.File(out, "r") as f, h5py.File(trace, "r") as tr, h5py.File(os.path.join(res, "results.h5")) as s:
            g = f["traces"][os.path.basename(trace)[:-3]]
            ret = list(s["runs"].values())[0]["retained"][()]
            bad = []
            for layer in range(ret.shape[0]):
                for kvh in range(ret.shape[1]):
                    b, kept, _ = replay(g, tr, layer, kvh, N, C, full_check=False)
                    want = ret[layer, kvh][ret[layer, kvh] >= 0]
                    if b or not np.array_equal(kept, want):
                        bad.append("layer %d kv %d: %s final %s vs sim %s" % (layer, kvh, b[:1], kept[:6], want[:6]))
            check(not bad, "%s-driven rows: each step's candidates are the last step's kept (driver_keep) plus the "
                  "chunk, and the final cache is sim's retained set" % pol, "\n".join(bad[:6]))
    out = os.path.join(tmp, "f_stream.h5")
    r = run("features", trace, "-o", out, "--budget", str(N), "--chunk", str(C), "--policy", "streaming",
            "--features", "knorm", "--quiet")
    if check(r.returncode == 0, "features --policy streaming --features knorm", r.stderr):
        with h5py.File(out, "r") as f, h5py.File(trace, "r") as tr:
            g = f["traces"][os.path.basename(trace)[:-3]]
            bad = sum((replay(g, tr, l, k, N, C, streaming=True, full_check=False)[0]
                       for l in range(2) for k in range(2)), [])
            check(not bad and g["features"].shape[1] == 1 and list(f.attrs["feature_names"]) == ["knorm"],
                  "streaming-driven: driver_keep is numpy's sinks + recent at every step; --features picks columns",
                  "\n".join(bad[:6]))


def study_and_expression(tmp, trace):
    """A study directory (index.jsonl) in, one group per prompt id with the file's sha256; a wrong sha256 in
    the index refused; an expression driver (--define) recorded by its definition, driving what sim's knorm
    keeps (-knorm restates it); /provenance present."""
    import hashlib
    import json
    import shutil
    d = os.path.join(tmp, "study")
    os.makedirs(d, exist_ok=True)
    lines = []
    for pid in ("p01", "p02"):
        shutil.copy(trace, os.path.join(d, pid + ".h5"))
        with open(os.path.join(d, pid + ".h5"), "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
        lines.append({"id": pid, "file": pid + ".h5", "tokens": 120, "sha256": sha})
    with open(os.path.join(d, "index.jsonl"), "w") as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines))
    out = os.path.join(tmp, "study.h5")
    r = run("features", d, "-o", out, "--budget", "40", "--chunk", "16", "--define", "ekn = -knorm", "--policy", "ekn",
            "--features", "knorm,pos", "--quiet")
    res = os.path.join(tmp, "sim_knorm")
    r2 = run("sim", trace, "--policies", "knorm", "--budgets", "40", "--chunk", "16", "-o", res, "--quiet")
    if check(r.returncode == 0 and r2.returncode == 0, "features on a study directory with a --define'd driver",
             r.stderr + r2.stderr):
        with h5py.File(out, "r") as f, h5py.File(trace, "r") as tr, h5py.File(os.path.join(res, "results.h5")) as s:
            check(sorted(f["traces"]) == ["p01", "p02"] and
                  [f["traces"][x].attrs["sha256"] for x in ("p01", "p02")] == [x["sha256"] for x in lines] and
                  f.attrs["driver"] == "ekn = -knorm" and "provenance" in f,
                  "a study: /traces/<prompt id> with each file's sha256; driver = the definition; /provenance",
                  str(dict(f.attrs)))
            ret = list(s["runs"].values())[0]["retained"][()]
            bad = []
            for l in range(2):
                for k in range(2):
                    b, kept, _ = replay(f["traces"]["p02"], tr, l, k, 40, 16, full_check=False)
                    if b or not np.array_equal(kept, ret[l, k][ret[l, k] >= 0]):
                        bad.append("layer %d kv %d: %s" % (l, k, b[:1]))
            check(not bad, "the --define'd driver (ekn = -knorm) drives the cache sim's knorm keeps", "\n".join(bad))
    lines[1]["sha256"] = "0" * 64
    with open(os.path.join(d, "index.jsonl"), "w") as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines))
    bad_out = os.path.join(tmp, "study_bad.h5")
    r = run("features", d, "-o", bad_out, "--quiet")
    check(r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1 and "sha256" in r.stderr and
          not os.path.exists(bad_out), "a study whose index has a wrong sha256: exit 3, one line, no file", r.stderr)


def read_all(path):
    with h5py.File(path, "r") as f:
        return {t: {d: g[d][()] for d in g} for t, g in f["traces"].items()}


def same(a, b):
    return a.keys() == b.keys() and all(a[t].keys() == b[t].keys() and all(np.array_equal(a[t][d], b[t][d])
                                                                            for d in a[t]) for t in a)


def threads_and_sampling(tmp, trace):
    base = ["--budget", "32", "--chunk", "8", "--quiet", "--policy", "tova:scope=group"]
    outs = {}
    for name, extra in (("t1", ["--threads", "1"]), ("t4", ["--threads", "4"]),
                        ("s1", ["--threads", "1", "--sample-steps", "0.5", "--seed", "7"]),
                        ("s4", ["--threads", "4", "--sample-steps", "0.5", "--seed", "7"]),
                        ("s8", ["--sample-steps", "0.5", "--seed", "8"]),
                        ("c1", ["--threads", "1", "--sample-candidates", "0.3", "--seed", "7"]),
                        ("c4", ["--threads", "3", "--sample-candidates", "0.3", "--seed", "7"])):
        outs[name] = os.path.join(tmp, name + ".h5")
        r = run("features", trace, "-o", outs[name], *base, *extra)
        check(r.returncode == 0, "features %s" % " ".join(extra), r.stderr)
    d = {k: read_all(v) for k, v in outs.items()}
    check(same(d["t1"], d["t4"]), "--threads 1 and 4: identical datasets")
    check(same(d["s1"], d["s4"]) and same(d["c1"], d["c4"]), "sampling: the same seed gives the same rows whatever "
          "--threads")
    full, s1, s8, c1 = (list(d[k].values())[0] for k in ("t1", "s1", "s8", "c1"))
    key = lambda g: set(zip(g["layer"].tolist(), g["kv_head"].tolist(), g["step"].tolist()))  # noqa: E731
    kf, k1, k8 = key(full), key(s1), key(s8)
    frac = len(k1) / len(kf)
    print("# --sample-steps 0.5: %d of %d steps (%.3f)" % (len(k1), len(kf), frac))
    check(abs(frac - 0.5) < 4 * np.sqrt(0.25 / len(kf)) and k1 <= kf and k1 != k8,
          "--sample-steps 0.5 keeps about half the steps (%.3f of %d), a subset; another seed others" % (frac, len(kf)))
    rows = lambda g: {(a, b, c, p): i for i, (a, b, c, p) in enumerate(zip(  # noqa: E731
        g["layer"].tolist(), g["kv_head"].tolist(), g["step"].tolist(), g["position"].tolist()))}
    rf, r1 = rows(full), rows(s1)
    per_step = all(sum(1 for x in rf if x[:3] == k) == sum(1 for x in r1 if x[:3] == k) for k in list(k1)[:20])
    idx = np.array([rf[x] for x in r1])
    # future_attn comes from the oracle's sgemm of the queries against the candidates that joined since
    # it last scored: sampling changes which candidates share a call, and some OpenBLAS kernels (Haswell)
    # round an element by its place in the call. Equal within a T-term float32 sum's rounding of the
    # column's scale; every other column is exact (docs/reproducibility.md).
    fa = scaled_diff(full["future_attn"][idx], s1["future_attn"])
    print("# --sample-steps: future_attn within %.3g of its scale of the full run's" % fa)
    check(per_step and set(r1) <= set(rf) and fa <= sum_tol(400) and
          all(np.array_equal(full[ds][idx], s1[ds]) for ds in DATASETS if ds != "future_attn"),
          "--sample-steps keeps whole steps, their rows identical to the full run's (future_attn within "
          "float32 rounding)", "future_attn %.3g of its scale" % fa)
    rc = rows(c1)
    fc = len(rc) / len(rf)
    idx = np.array([rf[x] for x in rc])
    print("# --sample-candidates 0.3: %d of %d rows (%.3f)" % (len(rc), len(rf), fc))
    check(abs(fc - 0.3) < 4 * np.sqrt(0.21 / len(rf)) and all(np.array_equal(full[ds][idx], c1[ds]) for ds in DATASETS),
          "--sample-candidates 0.3 keeps about 30%% of the rows (%.3f), each identical to the full run's (oracle_keep "
          "still of the whole step)" % fc)
    with h5py.File(outs["s1"], "r") as f:
        check(f.attrs["sample_steps"] == 0.5 and f.attrs["seed"] == 7 and f.attrs["sample_candidates"] == 1.0,
              "the file records sample_steps, sample_candidates and seed")


def csv_equals_h5(tmp, trace):
    h5, cs = os.path.join(tmp, "c.h5"), os.path.join(tmp, "c.csv")
    for out, extra in ((h5, []), (cs, ["--csv"])):
        r = run("features", trace, "-o", out, "--budget", "40", "--chunk", "16", "--quiet", "--features",
                "knorm,attn_window(8),attn_pooled(16,3),is_sink", *extra)
        check(r.returncode == 0, "features %s" % " ".join(extra), r.stderr)
    with open(cs, newline="") as f:
        rows = list(csv.reader(f))
    cols = ["knorm", "attn_window(8)", "attn_pooled(16,3)", "is_sink(4)"]
    head = ["trace", "layer", "kv_head", "step", "position", *cols, "future_attn", "oracle_keep", "age"]
    check(rows[0] == head, "--csv header: trace,layer,kv_head,step,position,<features>,future_attn,oracle_keep,age",
          str(rows[0]))
    g = list(read_all(h5).values())[0]
    body = np.array([[float(x) for x in r[1:]] for r in rows[1:]])
    ref = np.column_stack([g["layer"], g["kv_head"], g["step"], g["position"], g["features"], g["future_attn"],
                           g["oracle_keep"], g["age"]]).astype(np.float64)
    check(body.shape == ref.shape and np.array_equal(body.astype(np.float32), ref.astype(np.float32)) and
          all(r[0] == "s" for r in rows[1:]), "--csv holds the h5's rows exactly (floats as %.9g), in order")


def bad_input(tmp, trace):
    out = os.path.join(tmp, "bad.h5")
    cases = [(["missing.h5"], (1,), "missing trace (exit 1, as sim: a file that cannot be opened)"),
             ([trace, "--features", "knorm,attn_ac"], (2,), "unknown feature"),
             ([trace, "--features", "future_attn"], (2,), "future_attn as a feature"),
             ([trace, "--features", "knorm*2"], (2,), "an expression that is not one feature"),
             ([trace, "--sample-steps", "0"], (2,), "--sample-steps 0"),
             ([trace, "--sample-candidates", "1.5"], (2,), "--sample-candidates 1.5"),
             ([trace, "--policy", "nosuch"], (2,), "unknown policy"),
             ([trace, "--policy", "full"], (2,), "a policy that never evicts"),
             ([trace, "-o", os.path.join(tmp, "nodir", "x.h5")], (1, 2, 3), "unwritable output")]
    for args, codes, what in cases:
        o = [] if "-o" in args else ["-o", out]
        r = run("features", *args, *o, "--quiet")
        lines = r.stderr.strip().splitlines()
        check(r.returncode in codes and len(lines) == 1 and lines[0].startswith("kvtrace: error: ") and
              not os.path.exists(out) and not [x for x in os.listdir(tmp) if x.startswith(".bad.h5")],
              "bad input (%s): exit %d, one line, no file" % (what, r.returncode), r.stderr)


def demo_trace(tmp):
    model = model_file()
    if model is None:
        skip("features on the default model's trace", NO_MODEL)
        return
    trace = os.path.join(tmp, "demo.h5")
    r = run("capture", "--model", model, "--prompt", "Once upon a time there was a little cat who liked to play",
            "--generate", "24", "--quiet", "-o", trace)
    if check(r.returncode == 0, "capture a trace of the default model", r.stderr):
        features_vs_numpy(tmp, trace, "stories260K", 20, 8)
        features_vs_numpy(tmp, trace, "stories260K", 20, 8, policy="h2o", streams=[(0, 0), (1, 0)])


def main():
    if not KV:
        skip("features", "KVTRACE not set")
        return finish()
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "s.h5")
        subprocess.run([KV, "synth", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
                        "--tokens", "120", "--seed", "3", "--quiet", "-o", trace], check=True)
        features_vs_numpy(tmp, trace, "synth", 40, 16)
        features_vs_numpy(tmp, trace, "synth", 40, 16, policy="keydiff")
        driven_cache(tmp, trace, 40, 16)
        big = os.path.join(tmp, "big.h5")
        subprocess.run([KV, "synth", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16",
                        "--tokens", "400", "--seed", "5", "--quiet", "-o", big], check=True)
        threads_and_sampling(tmp, big)
        csv_equals_h5(tmp, trace)
        study_and_expression(tmp, trace)
        bad_input(tmp, trace)
        demo_trace(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
