"""criticalkv against numpy written from kvpress's criticalkv_press.py (not from policies/criticalkv.c):
(1) one chunk holding the whole prompt, no decode: sim keeps what CriticalKVPress keeps over a base (knorm,
keydiff: docs/policies.md's scores; snapkv: test_sim.py's numpy), with the trace's /wo; (2) a trace without /wo:
the fallback ‖v‖₁, labelled wo=absent in results.csv; (3) chunked replay with decode against numpy's replay,
and 1 and 2 threads agree; (4) refusals: a /wo of the wrong shape (exit 3), a configuration given twice once
relabelled (exit 2); (5) capture --record wo on stories260K writes the model's attn_output weights, and
capture --evict criticalkv runs in the model. TAP."""
import csv
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402
import ggufio  # noqa: E402
import policy_trace as pt  # noqa: E402
from policy_trace import run_sim  # noqa: E402
import test_policy_chunkkv as ck  # noqa: E402  (its numpy base scores; D = 8 there and here)

L, H, K, D, DIM = 2, 4, 2, 8, 12
G = H // K


def write_trace(path, T, P, seed, wo=True):
    rng = np.random.default_rng(seed)
    keys = rng.normal(size=D) + rng.normal(size=(L, K, T, D)) * rng.uniform(0.2, 2, size=(L, K, T, 1))
    values = rng.normal(size=(L, K, T, D)) * rng.uniform(0.3, 2, size=(L, K, T, 1))
    pt.write_trace(path, keys, values, 1.5 * rng.normal(size=(L, H, T, D)), P, creator="test_criticalkv")
    W = rng.normal(size=(L, DIM, H * D)) * rng.uniform(0.1, 3, size=(L, 1, H * D))  # columns of unequal weight
    if wo:
        with h5py.File(path, "a") as f:
            f["wo"] = W.astype(np.float32)
    return W.astype(np.float32).astype(np.float64)


def base_scores(base, q, k, C, now):
    """The bases' scores on their kvpress presses' scale, which CriticalKVPress's epsilon is added to:
    test_policy_chunkkv's numpy (docs/policies.md's knorm and keydiff, test_sim's snapkv); snapkv_press.py
    averages over its window's queries (attn_weights.mean(dim=-2)) where test_sim's snapkv sums them."""
    b = ck.base_scores(base, q, k, C, now, len(q))
    return b / min(32, now + 1) if base == "snapkv" else b


def vwl1norm(vals, W, g):
    """criticalkv_press.py's vwl1norm: per query head h of group g, ‖W_o[:, hD:(h+1)D] v‖₁, mean over the group;
    W None: ‖v‖₁ (kvtrace's fallback)."""
    if W is None:
        return np.abs(vals).sum(1)
    return np.mean([np.abs(vals @ W[:, h * D:(h + 1) * D].T).sum(1) for h in range(g * G, (g + 1) * G)], axis=0)


def source_scores(b, vals, W, g, N, first=0.5, eps=1e-4):
    """CriticalKVPress.score: the top int(N·first) by the base protected, the rest (b + eps)·vwl1norm."""
    top = np.argsort(-b, kind="stable")[:int(N * first)]
    s = (b + eps) * vwl1norm(vals, W, g)
    s[top] = np.inf
    return s


def select(scores, pos, N):
    order = sorted(range(len(pos)), key=lambda i: (-scores[i], -pos[i]))
    return np.sort(np.array(order[:N]))


def label(out, policy):
    with open(os.path.join(out, "results.csv")) as f:
        return sorted({r["params"] for r in csv.DictReader(f) if r["policy"] == policy})


def source_case(tmp, wo):
    """The bases with the default eps, and snapkv with an eps of the size of its mean scores (1/T), where
    eps's scale decides the order (SnapKVPress's mean, not kvtrace snapkv's window sum)."""
    T = 48
    trace = os.path.join(tmp, "one_%d.h5" % wo)
    W = write_trace(trace, T, T, 1, wo)
    out = os.path.join(tmp, "one_%d" % wo)
    cases, budgets = [("knorm", 1e-4), ("keydiff", 1e-4), ("snapkv", 1e-4), ("snapkv", 0.02)], [9, 20, 31, 36, 42]
    r = run_sim(trace, out, ["criticalkv:base=%s:eps=%g" % c for c in cases], budgets, 64, 1)
    what = "with /wo" if wo else "without /wo"
    check(r.returncode == 0, "sim runs criticalkv (one chunk, %s)" % what, r.stderr)
    if r.returncode:
        return
    tag = "model" if wo else "absent"
    params = {c: "base=%s:eps=%s:first=0.5:wo=%s" % (c[0], "0.0001" if c[1] == 1e-4 else "0.02", tag) for c in cases}
    check(label(out, "criticalkv") == sorted(params.values()), "results.csv labels the runs wo=%s (%s)" % (tag, what),
          str(label(out, "criticalkv")))
    q, k, v = pt.load(trace)
    bad = []
    for base, eps in cases:
        for N in budgets:
            got = pt.kept(out, "criticalkv", params[(base, eps)], N)
            for l in range(L):
                for g in range(K):
                    b = base_scores(base, q[l, g * G:(g + 1) * G], k[l, g], np.arange(T), T - 1)
                    s = source_scores(b, v[l, g], W[l] if wo else None, g, N, eps=eps)
                    want = select(s, np.arange(T), N)
                    if list(want) != got[l][g]:
                        bad.append((base, eps, N, l, g, list(want), got[l][g]))
    check(not bad, "one chunk = the whole prompt: criticalkv keeps what CriticalKVPress keeps (%s; knorm, keydiff, "
          "snapkv bases; snapkv with eps 0.02 too)" % what, "\n".join(map(str, bad[:3])))


def chunked_case(tmp):
    T, P, B, dc = 61, 40, 7, 3
    trace = os.path.join(tmp, "c.h5")
    W = write_trace(trace, T, P, 5)
    out = os.path.join(tmp, "c")
    pols, budgets = ["criticalkv:base=knorm", "criticalkv:base=snapkv:first=0.25"], [8, 19]
    r = run_sim(trace, out, pols, budgets, B, dc)
    check(r.returncode == 0, "sim runs criticalkv (chunks of 7, decode chunks of 3)", r.stderr)
    if r.returncode:
        return
    q, k, v = pt.load(trace)
    bad = []
    for base, first in (("knorm", 0.5), ("snapkv", 0.25)):
        for N in budgets:
            got = pt.kept(out, "criticalkv", "base=%s:eps=0.0001:first=%g:wo=model" % (base, first), N)
            for l in range(L):
                for g in range(K):
                    qg = q[l, g * G:(g + 1) * G]
                    S, p0 = np.array([], dtype=np.int64), 0
                    while p0 < T:
                        p1 = min(p0 + B, P) if p0 < P else min(p0 + dc, T)
                        C = np.concatenate([S, np.arange(p0, p1)])
                        if len(C) > N:
                            s = source_scores(base_scores(base, qg, k[l, g], C, p1 - 1), v[l, g][C], W[l], g, N,
                                              first=first)
                            C = C[select(s, C, N)]
                        S, p0 = C, p1
                    if list(S) != got[l][g]:
                        bad.append((base, N, l, g, list(S), got[l][g]))
    check(not bad, "criticalkv kept sets equal numpy's chunked replay (knorm, snapkv first=0.25)",
          "\n".join(map(str, bad[:3])))
    same, msg = pt.one_thread_same(trace, out, pols, budgets, B, dc)
    check(same, "criticalkv: results.csv equal for 1 and 2 threads", msg)


def refusal_cases(tmp):
    trace = os.path.join(tmp, "r.h5")
    write_trace(trace, 20, 20, 7, wo=False)
    r = run_sim(trace, os.path.join(tmp, "r"), ["criticalkv", "criticalkv:wo=absent"], [8], 4, 1)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(lines) == 1 and "no /wo" in lines[0] and not os.path.exists(os.path.join(tmp, "r")),
          "criticalkv and criticalkv:wo=absent on a trace without /wo: exit 2, one line", r.stderr)
    with h5py.File(trace, "a") as f:
        f["wo"] = np.zeros((L, DIM, H * D + 1), dtype=np.float32)
    r = run_sim(trace, os.path.join(tmp, "r2"), ["knorm"], [8], 4, 1)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 3 and len(lines) == 1 and "/wo" in lines[0], "a /wo of the wrong shape: exit 3, one line",
          r.stderr)
    with h5py.File(trace, "a") as f:
        del f["wo"]
        w = np.zeros((L, DIM, H * D), dtype=np.float32)
        w[1, 3, 5] = np.nan
        f["wo"] = w
    r = run_sim(trace, os.path.join(tmp, "r3"), ["criticalkv"], [8], 4, 1)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 3 and len(lines) == 1 and "/wo[1, 3, 5]" in lines[0],
          "a non-finite /wo value: exit 3, one line naming it", r.stderr)


def model_cases(tmp):
    model = model_file()
    if not model:
        skip("capture --record wo on stories260K", NO_MODEL)
        return
    out = os.path.join(tmp, "m.h5")
    r = subprocess.run([os.environ["KVTRACE"], "capture", "--quiet", "--model", model, "--prompt", "Once upon a time",
                        "--generate", "20", "--record", "keys,values,queries,wo", "-o", out],
                       capture_output=True, text=True)
    check(r.returncode == 0, "capture --record wo", r.stderr)
    if r.returncode:
        return
    _, tensors = ggufio.read(model)
    with h5py.File(out, "r") as f:
        wo = f["wo"][:]
        ok = wo.shape[0] == f.attrs["n_layers"] and all(
            np.array_equal(wo[l], tensors["blk.%d.attn_output.weight" % l]) for l in range(wo.shape[0]))
    check(ok, "/wo holds each layer's attn_output.weight [dim, H*D]", str(wo.shape))
    res = os.path.join(tmp, "m")
    r = run_sim(out, res, ["criticalkv:base=knorm"], [12], 8, 1)
    check(r.returncode == 0 and label(res, "criticalkv") == ["base=knorm:eps=0.0001:first=0.5:wo=model"],
          "sim reads the captured /wo (wo=model)", r.stderr)
    r = subprocess.run([os.environ["KVTRACE"], "capture", "--quiet", "--model", model, "--prompt", "Once upon a time",
                        "--generate", "20", "--evict", "criticalkv:base=knorm", "--budget", "12", "--chunk", "8",
                        "-o", os.path.join(tmp, "e.h5")], capture_output=True, text=True)
    check(r.returncode == 0, "capture --evict criticalkv runs in the model (its own W_o)", r.stderr)


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-criticalkv-")
    try:
        source_case(tmp, True)
        source_case(tmp, False)
        chunked_case(tmp)
        refusal_cases(tmp)
        model_cases(tmp)
    finally:
        shutil.rmtree(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
