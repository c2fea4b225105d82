"""A small analysis directory per analysis_dir.md (what `kvtrace analyze`
writes), synthetic but plausible: keys around a mean direction with a sink
and a few distinctive keys, their attention, PCA, Spearman, and runs of
streaming, tova and keydiff (two variants) at three budgets with kept sets,
log-dets, summary, timing and budgets (every run under each allocator of
`allocs`: uniform, and "pyramid" with a made-up per-layer split summing to
L·K·N, for figure 8). Used by test_plot.py; run it directly to
write one: /usr/bin/python3 tests/lib/plot_fixture.py DIR."""
import json
import os
import sys

import numpy as np

L, H, K, D, T = 2, 4, 2, 16, 96
BUDGETS = [16, 32, 64]
RUNS = [("streaming", "sinks=4"), ("tova", "scope=layer"), ("keydiff", "anchor=norm:metric=cos:window=0"),
        ("keydiff", "anchor=norm:metric=cos:window=0.2")]


def g(x):
    return "%.9g" % x


def label(name, params):
    return name + (":" + params if params else "")


def write_csv(path, header, rows):
    with open(path, "w") as f:
        f.write(",".join(header) + "\n")
        for r in rows:
            f.write(",".join(str(v) for v in r) + "\n")


def make_keys(rng):
    mean = rng.normal(size=D) * 2.0
    keys = mean + 0.7 * rng.normal(size=(L, K, T, D))
    keys[:, :, 0] = -mean * 1.5 + rng.normal(size=D)  # the sink: unlike the rest
    rare = rng.choice(np.arange(5, T), 8, replace=False)
    keys[:, :, rare] += 2.0 * rng.normal(size=(L, K, len(rare), D))
    queries = -0.3 * mean + rng.normal(size=(L, H, T, D))
    return keys, queries


def attention(q, k):
    s = q @ k.T / np.sqrt(D)
    s = np.where(np.tril(np.ones((len(q), len(k)), bool)), s, -np.inf)
    a = np.exp(s - s.max(1, keepdims=True))
    return a / a.sum(1, keepdims=True)


def ranks(x):
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x))
    return r


def logdet(k):
    kn = k / np.linalg.norm(k, axis=1, keepdims=True)
    return np.linalg.slogdet(kn.T @ kn / len(k) + 1e-6 * np.eye(D))[1]


def caps(name, alloc, b):
    """Rows kept per layer: T for full, b under uniform, a split by layer summing to L*b otherwise."""
    if name == "full":
        return [T] * L
    if alloc == "uniform":
        return [b] * L
    d = [round(b / 2 * (1 - 2 * l / (L - 1))) for l in range(L)]
    return [b + x for x in d]


def kept_set(name, params, keys, att, n):
    if name == "full":
        return np.arange(T)
    if name == "streaming":
        return np.r_[np.arange(4), np.arange(T - (n - 4), T)]
    if name == "tova":
        return np.sort(np.argsort(att[-1])[-n:])
    kn = keys / np.linalg.norm(keys, axis=1, keepdims=True)
    score = -(kn @ kn.mean(0))
    w = int(0.2 * n) if "window=0.2" in params else 0
    if w:
        score[T - w:] = np.inf
    return np.sort(np.argsort(score, kind="stable")[-n:])


def make_fixture(out, detail=(1, 2), with_results=True, seed=3, allocs=("uniform",)):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(seed)
    keys, queries = make_keys(rng)
    G = H // K
    meta = [("trace", "/data/traces/fixture.h5"), ("model", "synth:fixture <L2 & friends>"), ("creator", "test_plot.py"),
            ("L", L), ("H", H), ("K", K), ("D", D), ("T", T), ("prompt_tokens", 80), ("capture_mode", "full"),
            ("capture_chunk", 0), ("storage_dtype", "f32"), ("detail_layer", detail[0]), ("detail_q_head", detail[1]),
            ("detail_kv_head", detail[1] // (H // K)), ("kvtrace_version", "0.1.0")]
    # the commands are analyze's provenance.json (docs/provenance.md), not data
    steps = [{"verb": "synth", "command": "kvtrace synth --like stories260k --tokens 96 -o fixture.h5"}]
    if with_results:
        steps.append({"verb": "sim", "command":
                      "kvtrace sim fixture.h5 --policies streaming,tova,keydiff --budgets 16,32,64 -o res"})
    prov = {"kvtrace_provenance": 1, "verb": "analyze", "command": "kvtrace analyze fixture.h5 --results res -o an",
            "argv": ["analyze", "fixture.h5", "--results", "res", "-o", "an"], "kvtrace_version": "0.1.0",
            "inputs": [], "steps": steps}
    with open(os.path.join(out, "provenance.json"), "w") as f:
        json.dump(prov, f, indent=2)
    # values never contain a comma (analysis_dir.md: replaced by a space)
    write_csv(os.path.join(out, "meta.csv"), ["key", "value"], [(k, str(v).replace(",", " ")) for k, v in meta])
    spear, colsum_att = [], {}
    for l in range(L):
        for h in range(H):
            k = keys[l, h // G]
            a = attention(queries[l, h], k)
            colsum_att[(l, h)] = a
            y = a.sum(0) / (T - np.arange(T))
            kn = k / np.linalg.norm(k, axis=1, keepdims=True)
            c = kn @ kn.T
            x_pw = -(c.sum(1) - 1) / (T - 1)
            x_an = -(k @ k.mean(0)) / (np.linalg.norm(k, axis=1) * np.linalg.norm(k.mean(0)))
            rho = [np.corrcoef(ranks(x), ranks(y))[0, 1] for x in (x_pw, x_an)]
            spear.append((l, h, h // G, g(rho[0]), g(rho[1])))
    write_csv(os.path.join(out, "spearman.csv"), ["layer", "q_head", "kv_head", "rho_pairwise", "rho_anchor"], spear)
    dl, dh = detail
    n = min(64, T)
    k = keys[dl, dh // G][:n]
    kn = k / np.linalg.norm(k, axis=1, keepdims=True)
    a = attention(queries[dl, dh][:n], k)
    write_csv(os.path.join(out, "detail.csv"), ["row", "col", "cos", "attn"],
              [(i, j, g((kn @ kn.T)[i, j]), g(a[i, j])) for i in range(n) for j in range(n)])
    pca, var = [], []
    runs = [(name, params, b, a) for a in allocs for b in BUDGETS for name, params in [("full", "")] + RUNS] \
        if with_results else []
    ld = [("full_cache", "full_cache", "", T, "uniform", "", l, kv, g(logdet(keys[l, kv]))) for l in range(L)
          for kv in range(K)]
    kept = {}
    for l in range(L):
        for kv in range(K):
            kk = keys[l, kv]
            c = np.cov(kk.T)
            w, v = np.linalg.eigh(c)
            proj = (kk - kk.mean(0)) @ v[:, ::-1][:, :2]
            var.append((l, kv, g(w[-1]), g(w[-2]), g(np.trace(c))))
            att = colsum_att[(l, kv * G)]
            for r, (name, params, b, a) in enumerate(runs):
                kept[(l, kv, r)] = kept_set(name, params, kk, att, caps(name, a, b)[l])
            for t in range(T):
                pca.append((l, kv, t, g(proj[t, 0]), g(proj[t, 1])))
    for r, (name, params, b, a) in enumerate(runs):
        ld += [(label(name, params), name, params, b, a, "", l, kv, g(logdet(keys[l, kv][kept[(l, kv, r)]])))
               for l in range(L) for kv in range(K)]
    run_cols = ["config", "policy", "params", "budget", "allocator", "budget_fraction"]
    write_csv(os.path.join(out, "logdet.csv"), run_cols + ["layer", "kv_head", "logdet"], ld)
    write_csv(os.path.join(out, "pca.csv"), ["layer", "kv_head", "position", "pc1", "pc2"], pca)
    write_csv(os.path.join(out, "pca_kept.csv"), run_cols + ["layer", "kv_head", "position"],
              [(label(name, params), name, params, b, a, "", l, kv, p) for r, (name, params, b, a) in enumerate(runs)
               for l in range(L) for kv in range(K) for p in kept[(l, kv, r)]])
    write_csv(os.path.join(out, "budgets.csv"), run_cols + ["layer", "kv_head", "head_budget", "head_budget_mean"],
              [(label(name, params), name, params, b, a, "", l, kv, len(kept[(l, kv, r)]),
                "nan" if name == "full" else g(len(kept[(l, kv, r)]) - 0.5))
               for r, (name, params, b, a) in enumerate(runs) for l in range(L) for kv in range(K)])
    write_csv(os.path.join(out, "pca_var.csv"), ["layer", "kv_head", "var_pc1", "var_pc2", "var_total"], var)
    if with_results:
        write_results(out, rng, allocs)


def run_label(name, params, alloc, chunk=16):
    """sim's run column: config@allocator/chunk (docs/outputs.md)."""
    return "%s@%s/%d" % (label(name, params), alloc, chunk)


def write_results_csv(out, rng, allocs):
    """results.csv: one row per (configuration, budget, layer, query head, phase), errors varying by layer and head."""
    cols = ["config", "policy", "params", "budget", "allocator", "budget_fraction", "chunk", "decode_chunk",
            "eval_stride", "layer", "q_head", "kv_head", "phase", "n_queries", "out_rel_err_mean", "out_rel_err_p95",
            "attn_recall_mean", "attn_recall_min", "head_budget", "head_budget_mean", "trace", "same_as", "run"]
    rows = []
    for a in allocs:
        for name, params in [("full", "")] + RUNS:
            for b in BUDGETS:
                for l in range(L):
                    for h in range(H):
                        for phase in ("prefill", "decode", "all"):
                            e = 0.0 if name == "full" else float(rng.uniform(0.01, 0.5)) * (l + 1) * 16 / b
                            c = caps(name, a, b)[l]
                            rows.append((label(name, params), name, params, b, a, "", 16, 1, 1, l, h, h // (H // K),
                                         phase, 100, g(e), g(1.5 * e), g(1 - e / 2), g(1 - e), c, c, "fixture",
                                         "", run_label(name, params, a)))
    write_csv(os.path.join(out, "results.csv"), cols, rows)


def write_results(out, rng, allocs):
    cols = ["config", "policy", "params", "budget", "allocator", "budget_fraction", "chunk", "decode_chunk",
            "eval_stride", "phase", "n_queries", "out_rel_err_mean", "out_rel_err_p95", "attn_recall_mean", "attn_recall_min", "final_logdet_mean", "n_traces"]
    cols += [m + e for m in cols[11:16] for e in ("_ci_lo", "_ci_hi")]  # one trace: intervals of zero width
    cols += ["same_as", "run"]
    rows, timing = [], []
    base = {"streaming": 0.35, "tova": 0.18, "keydiff": 0.25}
    ns = {"streaming": 0.8, "tova": 0.9, "keydiff": 21.0}
    for a in allocs:
        for name, params in [("full", "")] + RUNS:
            for b in BUDGETS:
                e = 0.0 if name == "full" else base[name] * (16 / b) ** 0.8 * (0.9 if "0.2" in params else 1)
                e *= 0.8 if a != "uniform" else 1
                rec = 1.0 if name == "full" else 1 - e * 0.6
                for phase in ("prefill", "decode", "all"):
                    stats = (g(e), g(1.8 * e), g(rec), g(rec - 0.2 * e - 0 * rec), g(-40 + 10 * np.log(b) + rng.normal()))
                    rows.append((label(name, params), name, params, b, a, "", 16, 1, 1, phase, 400) + stats + (1,) +
                                tuple(x for v in stats for x in (v, v)) + ("", run_label(name, params, a)))
                t = 0.0 if name == "full" else ns[name] * (1 + 0.1 * rng.normal())
                timing.append((label(name, params), name, params, b, a, "", 16, 0 if name == "full" else 50,
                               0 if name == "full" else 3000, "%.3f" % t, "fixture", run_label(name, params, a)))
    write_csv(os.path.join(out, "summary.csv"), cols, rows)
    write_results_csv(out, rng, allocs)
    write_csv(os.path.join(out, "timing.csv"),
              ["config", "policy", "params", "budget", "allocator", "budget_fraction", "chunk", "calls", "candidates",
               "score_ns_per_candidate", "trace", "run"], timing)


if __name__ == "__main__":
    make_fixture(sys.argv[1])
