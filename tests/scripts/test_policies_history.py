"""scissorhands, h2o:normalize=age and snapkv's presets
against numpy written here from the sources (KVCache-Factory
pyramidkv/scissorhands.py, kvpress ObservedAttentionPress, the SnapKV
paper / kvpress SnapKVPress): kept sets of a chunked replay with decode
(brute force, float64), the one-chunk-holds-the-prompt case against the
source's own selection rule, preset names, threads invariance. TAP."""
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
L, H, K, D = 2, 4, 2, 8
G = H // K


CANON = {  # each spec's canonical label: defaults filled, sorted by key, presets expanded
    "scissorhands": "scissorhands:decay=1:history=0:recent=32:sinks=0",
    "scissorhands:decay=0.5:history=3:recent=2:sinks=2": "scissorhands:decay=0.5:history=3:recent=2:sinks=2",
    "scissorhands:recent=0": "scissorhands:decay=1:history=0:recent=0:sinks=0",
    "scissorhands:history=8:recent=4:sinks=2": "scissorhands:decay=1:history=8:recent=4:sinks=2",
    "scissorhands:recent=6": "scissorhands:decay=1:history=0:recent=6:sinks=0",
    "scissorhands:recent=20:sinks=10": "scissorhands:decay=1:history=0:recent=20:sinks=10",
    "h2o:normalize=age": "h2o:normalize=age:recent=0.5",
    "h2o:normalize=age:recent=0": "h2o:normalize=age:recent=0",
    "snapkv:preset=paper": "snapkv:kernel=7:pool=max:window=32",
    "snapkv:preset=kvpress": "snapkv:kernel=5:pool=avg:window=64",
}


def write_trace(path, T, P, seed):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        write_root_attrs(f, "test_policies_history", L, H, K, D, T, P)
        f["tokens"] = rng.integers(0, 100, T).astype(np.int32)
        f["keys"] = (rng.normal(size=D) + 0.7 * rng.normal(size=(L, K, T, D))).astype(np.float32)
        f["values"] = rng.normal(size=(L, K, T, D)).astype(np.float32)
        f["queries"] = (1.5 * rng.normal(size=(L, H, T, D))).astype(np.float32)


def attn_rows(qs, kf, C, rows):
    """For each query position in rows: its softmax over the visible candidates C (<= i), mean over
    the stream's G query heads; zero for the candidates it cannot see. [len(rows), len(C)]."""
    out = np.zeros((len(rows), len(C)))
    for r, i in enumerate(rows):
        vis = C <= i
        if not vis.any():
            continue
        for j in range(G):
            s = kf[C[vis]] @ qs[j, i] / np.sqrt(D)
            e = np.exp(s - s.max())
            out[r, vis] += e / e.sum() / G
    return out


def top(scores, C, N):
    """Keep N: higher score first, ties to the later position; ascending positions."""
    order = sorted(range(len(C)), key=lambda x: (-scores[x], -C[x]))
    return np.sort(C[order[:N]])


def parse(spec):
    name, _, rest = spec.partition(":")
    return name, dict(kv.split("=") for kv in rest.split(":") if kv)


def brute(qs, kf, spec, N, T, P, B, dc):
    """Chunked replay of one kv head's stream: the final kept positions."""
    name, p = parse(spec)
    S = np.array([], dtype=np.int64)
    imp = {}  # importance / accumulated attention by position
    p0 = 0
    while p0 < T:
        p1 = min(p0 + B, P) if p0 < P else min(p0 + dc, T)
        C = np.concatenate([S, np.arange(p0, p1)])
        a = attn_rows(qs, kf, C, range(p0, p1))
        if name == "scissorhands":
            hist = int(p.get("history", 0))
            cur = a[-hist:].sum(0) if hist else a.sum(0)
            decay = float(p.get("decay", 1))
            imp = {int(c): decay * imp.get(int(c), 0.0) + cur[x] for x, c in enumerate(C)}
        else:  # h2o
            cur = a.sum(0)
            imp = {int(c): imp.get(int(c), 0.0) + cur[x] for x, c in enumerate(C)}
        if len(C) > N:
            s = np.array([imp[int(c)] for c in C])
            if name == "scissorhands":
                s[: int(p.get("sinks", 0))] = np.inf
                rec = min(int(p.get("recent", 32)), len(C))
                if rec:
                    s[len(C) - rec:] = np.inf
            else:
                if p.get("normalize") == "age":
                    s = s / (p1 - 1 - C + 1)
                rec = min(int(np.floor(float(p.get("recent", 0.5)) * N + 1e-9)), N)
                if rec:
                    s[len(C) - rec:] = np.inf
            C = top(s, C, N)
        S = C
        p0 = p1
    return S


def snapkv_one(qs, kf, C, now, window, kernel, pool):
    i0 = max(0, now - window + 1)
    tot = attn_rows(qs, kf, C, range(i0, now + 1)).sum(0)
    left = kernel // 2
    out = np.zeros(len(C))
    for c in range(len(C)):
        w = [tot[c + o] for o in range(-left, kernel - left) if 0 <= c + o < len(C)]
        out[c] = max(w) if pool == "max" else sum(w) / kernel
    return np.where(C >= i0, np.inf, out)


def snapkv_brute(qs, kf, spec, N, T, P, B, dc):
    p = {"window": 32, "kernel": 5, "pool": "avg"}
    p.update({"paper": dict(window=32, kernel=7, pool="max"), "kvpress": dict(window=64, kernel=5, pool="avg")}
             .get(parse(spec)[1].get("preset"), {}))
    S = np.array([], dtype=np.int64)
    p0 = 0
    while p0 < T:
        p1 = min(p0 + B, P) if p0 < P else min(p0 + dc, T)
        C = np.concatenate([S, np.arange(p0, p1)])
        if len(C) > N:
            C = top(snapkv_one(qs, kf, C, p1 - 1, int(p["window"]), int(p["kernel"]), p["pool"]), C, N)
        S = C
        p0 = p1
    return S


def source_scissorhands(qs, kf, T, N, history, recent, sinks):
    """pyramidkv/scissorhands.py over one prompt: reduce (sum over the last history_window queries),
    no previous importance, then select_scissorhands_tokens in topk mode."""
    a = attn_rows(qs, kf, np.arange(T), range(T))
    imp = a[-history:].sum(0) if history else a.sum(0)
    if N >= T:
        return np.arange(T)
    prot = sorted(set(range(min(T, sinks))) | set(range(T - min(T, recent), T)))
    if len(prot) >= N:
        return np.array(prot[-N:])
    cand = [x for x in range(T) if x not in prot]
    order = sorted(cand, key=lambda x: (-imp[x], -x))  # torch.topk's tie order is unspecified: ours
    return np.sort(np.array(order[: N - len(prot)] + prot))


def source_observed(qs, kf, T, N):
    """kvpress ObservedAttentionPress: attentions summed over the queries, divided by k_len - j."""
    a = attn_rows(qs, kf, np.arange(T), range(T))
    s = a.sum(0) / np.arange(T, 0, -1)
    return np.sort(np.argsort(-s, kind="stable")[:N])


def run_sim(trace, out, specs, budgets, B, dc, threads="2"):
    return subprocess.run([KVTRACE, "sim", trace, "--policies", ",".join(specs), "--budgets",
                           ",".join(map(str, budgets)), "--chunk", str(B), "--decode-chunk", str(dc),
                           "--threads", threads, "--quiet", "-o", out], capture_output=True, text=True)


def kept_of(out):
    with h5py.File(os.path.join(out, "results.h5"), "r") as rh:
        return {(g.attrs["config"], int(g.attrs["budget"])): g["retained"][:] for g in rh["runs"].values()}


def chunked(tmp):
    T, P = 61, 40
    tr = os.path.join(tmp, "t.h5")
    write_trace(tr, T, P, 3)
    specs = ["scissorhands", "scissorhands:decay=0.5:history=3:recent=2:sinks=2", "scissorhands:recent=0",
             "h2o:normalize=age", "h2o:normalize=age:recent=0", "snapkv:preset=paper", "snapkv:preset=kvpress"]
    budgets = [6, 19, 45]
    for B, dc in ((16, 3), (7, 1)):
        out = os.path.join(tmp, "r%d" % B)
        r = run_sim(tr, out, specs, budgets, B, dc)
        check(r.returncode == 0, "sim runs (B=%d)" % B, r.stderr)
        if r.returncode:
            continue
        got, bad = kept_of(out), []
        with h5py.File(tr, "r") as f:
            q, k = f["queries"][:].astype(np.float64), f["keys"][:].astype(np.float64)
        for spec in specs:
            label = CANON[spec]
            for N in budgets:
                keys = [m for m in got if m == (label, N)]
                if len(keys) != 1:
                    bad.append((spec, N, "label", sorted(got)[:3]))
                    continue
                for l in range(L):
                    for g in range(K):
                        qs, kf = q[l, g * G:(g + 1) * G], k[l, g]
                        want = (snapkv_brute if spec.startswith("snapkv") else brute)(qs, kf, spec, N, T, P, B, dc)
                        have = [y for y in got[keys[0]][l, g] if y >= 0]
                        if list(have) != list(want):
                            bad.append((spec, N, l, g, list(want), have))
        check(not bad, "kept sets equal the numpy replay (B=%d, decode %d)" % (B, dc), "\n".join(map(str, bad[:4])))
    outs = [os.path.join(tmp, "th%s" % th) for th in ("1", "2")]
    for o, th in zip(outs, ("1", "2")):
        run_sim(tr, o, specs[:4], [6, 19], 16, 3, th)
    a, b = kept_of(outs[0]), kept_of(outs[1])
    check(a.keys() == b.keys() and all((a[x] == b[x]).all() for x in a), "kept sets do not depend on --threads")


def one_chunk(tmp):
    T = 48
    tr = os.path.join(tmp, "one.h5")
    write_trace(tr, T, T, 11)
    cases = [("scissorhands:history=8:recent=4:sinks=2", dict(history=8, recent=4, sinks=2)),
             ("scissorhands:recent=6", dict(history=0, recent=6, sinks=0)),
             ("scissorhands:recent=20:sinks=10", dict(history=0, recent=20, sinks=10)),
             ("h2o:normalize=age:recent=0", None)]
    budgets = [5, 16, 29]
    out = os.path.join(tmp, "one")
    r = run_sim(tr, out, [c[0] for c in cases], budgets, T, 1)
    check(r.returncode == 0, "sim runs with one chunk holding the prompt", r.stderr)
    if r.returncode:
        return
    got, bad = kept_of(out), []
    with h5py.File(tr, "r") as f:
        q, k = f["queries"][:].astype(np.float64), f["keys"][:].astype(np.float64)
    for spec, p in cases:
        for N in budgets:
            key = [(CANON[spec], N)]
            for l in range(L):
                for g in range(K):
                    qs, kf = q[l, g * G:(g + 1) * G], k[l, g]
                    want = source_scissorhands(qs, kf, T, N, **p) if p else source_observed(qs, kf, T, N)
                    have = [y for y in got[key[0]][l, g] if y >= 0]
                    if list(have) != list(want):
                        bad.append((spec, N, l, g, list(want), have))
    check(not bad, "one chunk, no decode: keeps what the sources' own scoring keeps", "\n".join(map(str, bad[:4])))


def names():
    r = subprocess.run([KVTRACE, "policies", "snapkv", "scissorhands", "h2o"], capture_output=True, text=True)
    check(r.returncode == 0 and "preset=paper = kernel=7:pool=max:window=32" in r.stdout and
          "preset=kvpress = kernel=5:pool=avg:window=64" in r.stdout and "normalize" in r.stdout,
          "kvtrace policies lists the presets and normalize", r.stdout + r.stderr)
    for spec, msg in (("snapkv:preset=nope", "snapkv: unknown preset 'nope' (known: paper, kvpress)"),
                      ("h2o:preset=paper", "h2o: has no presets"),
                      ("snapkv:preset=paper:preset=kvpress", "parameter 'preset' given twice")):
        r = subprocess.run([KVTRACE, "sim", "x.h5", "--policies", spec, "--budgets", "4", "--chunk", "4", "-o",
                            "/nonexistent/o"], capture_output=True, text=True)
        check(r.returncode == 2 and msg in r.stderr and r.stderr.count("\n") == 1, "refused: " + spec, r.stderr)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        names()
        chunked(tmp)
        one_chunk(tmp)
    finish()


if __name__ == "__main__":
    main()
