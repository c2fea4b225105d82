"""Score-expression features and language against numpy (docs/expressions.md), each computed
here from the trace's keys, values and queries without the C: a definition `e = EXPR` replayed in one chunk
that holds the whole trace scores every position once, so its final cache is the top N of EXPR (ties towards
the later position, NaN as -inf); the test compares it to numpy's top N of the same formula for every (layer,
kv head). Near-ties at the boundary (float attention against numpy's double) are allowed only within a
relative 1e-5. Covers vnorm, attn_window(W), attn_pooled(W, K) (snapkv's score), attn_acc_norm, age,
is_sink(k), recency_rank, cos_anchor_raw, cos_pairwise, future_attn (two chunks: the first step's top N
survives the second), the normalisers' edge cases (rank's averaged ties, z and minmax at sd = 0 / max = min),
comparisons, ?:, clamp/min/max, log/exp/sqrt/abs/^, protect = recent(f) / recent_n(k) / sinks(k); and
future_attn refused in-model (capture --evict) with one line. TAP."""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from tap import check, finish, model_file, skip, NO_MODEL  # noqa: E402

KV = os.environ.get("KVTRACE", "")
L, H, K, D, T = 2, 4, 2, 16, 96
TOL = 1e-5


class Stream:
    """One (layer, kv head): its keys, values and the group's causal attention, all in double."""

    def __init__(self, f, layer, kvh):
        self.k = f["/keys"][layer, kvh].astype(np.float64)
        self.v = f["/values"][layer, kvh].astype(np.float64)
        g = H // K
        q = f["/queries"][layer, kvh * g:(kvh + 1) * g].astype(np.float64)
        s = q @ self.k.T / np.sqrt(D)                         # [g, T, T]
        s[:, np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] = -np.inf
        a = np.exp(s - s.max(axis=2, keepdims=True))
        self.a = a / a.sum(axis=2, keepdims=True)            # a[h, i, j]: query i's weight on key j
        self.pos = np.arange(T, dtype=np.float64)

    def window(self, w):
        return self.a[:, T - w:, :].sum(axis=1).mean(axis=0)

    def pooled(self, w, kern):
        s, left = self.window(w), kern // 2
        return np.array([sum(s[c + o] for o in range(-left, kern - left) if 0 <= c + o < T) / kern
                         for c in range(T)])

    def cos(self, anchor):
        return self.k @ anchor / (np.linalg.norm(self.k, axis=1) * np.linalg.norm(anchor))


def features(st):
    kn = np.linalg.norm(st.k, axis=1)
    unit = st.k / kn[:, None]
    gram = unit @ unit.T
    acc = st.a.sum(axis=1).mean(axis=0)
    return {
        "knorm": kn, "vnorm": np.linalg.norm(st.v, axis=1),
        "cos_anchor_raw": st.cos(st.k.mean(axis=0)),
        "cos_pairwise": (gram.sum(axis=1) - np.diag(gram)) / (T - 1),
        "attn_last": st.a[:, T - 1, :].mean(axis=0),
        "attn_window(8)": st.window(8), "attn_window": st.window(32),
        "attn_pooled(8, 3)": st.pooled(8, 3), "attn_pooled": st.pooled(32, 5),
        "attn_acc": acc, "attn_acc_norm": acc / (T - 1 - st.pos + 1),
        "pos": st.pos, "age": T - 1 - st.pos,
        "is_sink(10)": (st.pos < 10).astype(float), "is_sink(30)": (st.pos < 30).astype(float),
        "is_sink": (st.pos < 4).astype(float),
        "recency_rank": (T - 1 - st.pos) / (T - 1),
    }


def avg_rank(x):
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x))
    for v in np.unique(x):
        r[x == v] = r[x == v].mean()
    return r / (len(x) - 1)


# name, definition, numpy score from the features F at budget N (protected positions: +inf)
CASES = [
    ("fv", "vnorm", lambda F, N: F["vnorm"]),
    ("fw", "attn_window(8)", lambda F, N: F["attn_window(8)"]),
    ("fwd", "attn_window", lambda F, N: F["attn_window"]),
    ("fp", "attn_pooled(8, 3)", lambda F, N: F["attn_pooled(8, 3)"]),
    ("fpd", "attn_pooled", lambda F, N: F["attn_pooled"]),
    ("fan", "attn_acc_norm", lambda F, N: F["attn_acc_norm"]),
    ("fage", "-age", lambda F, N: -F["age"]),
    ("fsink", "is_sink(10) - 0.001 * pos", lambda F, N: F["is_sink(10)"] - 0.001 * F["pos"]),
    ("fsd", "is_sink * 2 + knorm", lambda F, N: F["is_sink"] * 2 + F["knorm"]),
    ("frr", "recency_rank", lambda F, N: F["recency_rank"]),
    ("fcr", "-cos_anchor_raw", lambda F, N: -F["cos_anchor_raw"]),
    ("fcp", "cos_pairwise", lambda F, N: F["cos_pairwise"]),
    ("frank", "abs(rank(is_sink(10) + is_sink(30)) - 0.8) < 0.05 ? 1 : 0",
     lambda F, N: (abs(avg_rank(F["is_sink(10)"] + F["is_sink(30)"]) - 0.8) < 0.05).astype(float)),
    ("fz0", "z(pos * 0) == 0 ? -pos : pos", lambda F, N: -F["pos"]),
    ("fmm0", "minmax(vnorm * 0 + 3) == 0 ? -pos : pos", lambda F, N: -F["pos"]),
    ("fcmp", "knorm > vnorm ? knorm : -vnorm", lambda F, N: np.where(F["knorm"] > F["vnorm"], F["knorm"], -F["vnorm"])),
]
CASES2 = [
    ("fcl", "-clamp(pos, 10, 50)", lambda F, N: -np.clip(F["pos"], 10, 50)),
    ("fcu", "clamp(pos, 10, 50) - 0.01 * pos", lambda F, N: np.clip(F["pos"], 10, 50) - 0.01 * F["pos"]),
    ("fmn", "min(knorm, 2 * vnorm, 3.5)", lambda F, N: np.minimum(np.minimum(F["knorm"], 2 * F["vnorm"]), 3.5)),
    ("fmx", "max(-knorm, -vnorm)", lambda F, N: np.maximum(-F["knorm"], -F["vnorm"])),
    ("fle", "(age <= 40) * (age >= 20) + (pos != 7) * 0.5 - (pos == 9)",
     lambda F, N: (F["age"] <= 40) * (F["age"] >= 20) + (F["pos"] != 7) * 0.5 - (F["pos"] == 9)),
    ("fmath", "log(knorm) + exp(-vnorm) - sqrt(abs(cos_anchor_raw)) + 2 ^ -age ^ 0.5",
     lambda F, N: np.log(F["knorm"]) + np.exp(-F["vnorm"]) - np.sqrt(abs(F["cos_anchor_raw"]))
     + 2.0 ** (-F["age"] ** 0.5)),
    ("fnest", "pos < 30 ? (pos < 10 ? 3 : 1) : knorm > 4 ? 2 : 0",
     lambda F, N: np.where(F["pos"] < 30, np.where(F["pos"] < 10, 3, 1), np.where(F["knorm"] > 4, 2, 0))),
    ("fprn", "-pos; protect = recent_n(5)", lambda F, N: np.where(F["pos"] >= T - 5, np.inf, -F["pos"])),
    ("fprf", "-pos; protect = recent(0.3), sinks(2)",   # the newest floor(0.3 N) and positions 0, 1
     lambda F, N: np.where((F["pos"] >= T - int(0.3 * N)) | (F["pos"] < 2), np.inf, -F["pos"])),
    ("fps", "knorm; protect = sinks(6)", lambda F, N: np.where(F["pos"] < 6, np.inf, F["knorm"])),
]


def topn(score, n):
    """numpy's kept set: the n highest, ties towards the later position, NaN lowest."""
    s = np.where(np.isnan(score), -np.inf, score)
    return np.sort(np.lexsort((np.arange(len(s)), s))[len(s) - n:]), s


def same_set(got, score, n):
    """(equal, detail): numpy's top n exactly, or (float near-ties) every position scoring more than TOL above
    the n-th highest kept, every one more than TOL below dropped, and the band between not one exact tie (the
    later-position rule decides those exactly)."""
    want, s = topn(score, n)
    if np.array_equal(got, want):
        return True, ""
    nth = np.sort(s)[len(s) - n]
    scale = max(1.0, float(np.max(np.abs(s[np.isfinite(s)]))))
    band = np.abs(s - nth) <= TOL * scale
    kept = np.zeros(len(s), bool)
    kept[got] = True
    ok = (len(got) == n and kept[(s > nth) & ~band].all() and not kept[(s < nth) & ~band].any()
          and len(np.unique(s[band])) > 1)
    diff = np.setxor1d(got, want)
    return ok, f"kept {list(got)}\nnumpy {list(want)}\ndiffer at {list(diff)}: {list(s[diff])}, n-th {nth}"


def run(tmp, trace, tag, cases, budget, chunk, extra=()):
    out = os.path.join(tmp, tag)
    args = [a for n, d, _ in cases for a in ("--define", f"{n} = {d}")]
    r = subprocess.run([KV, "sim", trace, "--budgets", str(budget), "--chunk", str(chunk), "--quiet", "-o", out,
                        *args, *extra, "--policies", ",".join(n for n, _, _ in cases)], capture_output=True, text=True)
    check(r.returncode == 0, f"sim with {len(cases)} definitions ({tag})", r.stderr)
    if r.returncode:
        return None
    with h5py.File(os.path.join(out, "results.h5"), "r") as f:
        return {g.attrs["config"]: g["retained"][()] for g in f["runs"].values()}


def one_chunk(tmp, trace, streams):
    feats = {lh: features(st) for lh, st in streams.items()}
    for tag, cases in (("a", CASES), ("b", CASES2)):
        for budget in (20, 50):
            kept = run(tmp, trace, f"{tag}{budget}", cases, budget, T)
            if kept is None:
                continue
            for name, d, fn in cases:
                res = [same_set(kept[name][l, h][kept[name][l, h] >= 0], fn(feats[l, h], budget), budget)
                       for l in range(L) for h in range(K)]
                bad = [x[1] for x in res if not x[0]]
                check(not bad, f"'{d}' keeps numpy's top {budget} (every layer and kv head)", bad[0] if bad else "")


def future(tmp, trace, streams):
    """Two chunks of 48: the first step keeps the top N of future_attn (queries 48..95, full-cache attention,
    mean over the group); at the second every score is 0 (no future) for those and -1 for the chunk's."""
    kept = run(tmp, trace, "fut", [("ff", "pos < 48 ? future_attn : -1", None)], 20, 48)
    if kept is None:
        return
    bad = []
    for l in range(L):
        for h in range(K):
            a = streams[l, h].a
            s = a[:, 48:, :48].sum(axis=1).mean(axis=0)
            ok, why = same_set(kept["ff"][l, h][kept["ff"][l, h] >= 0], s, 20)
            bad += [] if ok else [why]
    check(not bad, "future_attn: the first step keeps numpy's top 20 of the future queries' attention",
          bad[0] if bad else "")


def in_model(tmp):
    model = model_file()
    if not model:
        skip("capture --evict refuses future_attn", NO_MODEL)
        return
    out = os.path.join(tmp, "c.h5")
    r = subprocess.run([KV, "capture", "--model", model, "--prompt", "Once upon a time", "--generate", "4",
                        "--evict", "fut", "--define", "fut = future_attn * knorm", "--budget", "4", "--quiet",
                        "-o", out], capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(lines) == 1 and "fut" in lines[0] and not os.path.exists(out),
          "capture --evict: an expression reading future_attn is refused, one line, exit 2", r.stderr)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "t.h5")
        subprocess.run([KV, "synth", "--layers", str(L), "--heads", str(H), "--kv-heads", str(K), "--head-dim",
                        str(D), "--tokens", str(T), "--seed", "5", "--quiet", "-o", trace], check=True)
        with h5py.File(trace, "r") as f:
            streams = {(l, h): Stream(f, l, h) for l in range(L) for h in range(K)}
        one_chunk(tmp, trace, streams)
        future(tmp, trace, streams)
        in_model(tmp)
    sys.exit(finish())


if __name__ == "__main__":
    main()
