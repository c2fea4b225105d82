"""kvtrace fidelity on stories260K (docs/fidelity.md#kvtrace-fidelity): the outputs and their columns;
`full` and N >= T give KL 0, agreement 1 and the full perplexity; the
per-position KL equals numpy's KL between the logits of a full capture and of
`capture --evict` on the same tokens (so the lockstep runs are the standalone
ones); the mean, p95 and agreement follow from positions.csv; sim's columns
are sim's summary.csv, to the last printed digit; rho and the mis-ordered pairs recomputed from
fidelity.csv; bad arguments exit 2 with one line and leave nothing. TAP."""
import csv
import os
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kvrun import run, write_tokens  # noqa: E402
from tap import NO_MODEL, check, close, finish, model_file, skip  # noqa: E402

MODEL = model_file()
B = 8


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def kl_rows(lp, lq):
    lp = lp.astype(np.float64)
    lq = lq.astype(np.float64)
    lp = lp - lp.max(1, keepdims=True)
    lq = lq - lq.max(1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(1, keepdims=True))
    lq = lq - np.log(np.exp(lq).sum(1, keepdims=True))
    return (np.exp(lp) * (lp - lq)).sum(1)


def ranks(x):
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        r[order[i:j + 1]] = (i + j) / 2.0 + 1
        i = j + 1
    return r


def spearman(a, b):
    return np.corrcoef(ranks(a), ranks(b))[0, 1]


def check_headline(stdout, html, ranked, summ, out):
    """The headline is rho within each budget (stdout, summary.csv, report, figure); the pooled one comes after."""
    within = {}
    for b in sorted({s["budget"] for s in summ[1:]}, key=int):   # every budget run (n/a where none is ranked)
        cs = [c for c in ranked if c["budget"] == b]
        x, y = [float(c["out_rel_err_mean"]) for c in cs], [float(c["kl_mean"]) for c in cs]
        within[b] = spearman(x, y) if len(set(x)) > 1 and len(set(y)) > 1 else float("nan")
    per = {s["budget"]: s for s in summ[1:]}
    check(all((np.isnan(v) and per[b]["rho_out_rel_err_kl"] == "nan")
              or abs(float(per[b]["rho_out_rel_err_kl"]) - v) < 1e-5 for b, v in within.items()),
          "summary.csv's per-budget rho equals numpy's Spearman within each budget", (within, summ))
    text = lambda v: "n/a" if np.isnan(v) else "%.3f" % v  # noqa: E731
    defined = [v for v in within.values() if not np.isnan(v)]
    line = "Spearman rho(out_rel_err, KL) within each budget: " + ", ".join(
        "N = %s: %s" % (b, text(v)) for b, v in within.items()) + "; mean %s" % text(float(np.mean(defined)))
    lines = stdout.splitlines()
    first = next((i for i, s in enumerate(lines) if s.startswith("Spearman rho")), None)
    pooled = next((i for i, s in enumerate(lines) if s.startswith("pooled over budgets")), None)
    check(first is not None and lines[first].startswith(line) and pooled is not None and pooled > first
          and "inflated" in lines[pooled], "stdout leads with rho within each budget (numpy's), the pooled rho after it, "
          "labelled inflated", "want %r\ngot %s" % (line, lines[-4:]))
    check("within each budget" in html and html.index("within each budget") < html.index("Pooled over all")
          and all("<td class=num><b>%s</b></td>" % text(v) in html for v in within.values()),
          "report.html: a table of rho per budget first, then the pooled rho")
    with open(os.path.join(out, "fidelity.gp")) as f:
        gp = f.read()
    drawn = {b: v for b, v in within.items() if any(c["budget"] == b for c in ranked)}
    check("with labels" not in gp and all('set title "N = %s: rho = %s' % (b, text(v)) in gp for b, v in drawn.items())
          and all('set title "N = %s:' % b not in gp for b in within if b not in drawn),
          "the figure: one panel per budget with a ranked configuration (none where sim measured no query), titled "
          "with its rho, no point labels to overlap")


def main():
    if not MODEL:
        skip("fidelity on stories260K", NO_MODEL)
        return finish()
    with tempfile.TemporaryDirectory() as tmp:
        r = run("capture", "--quiet", "--model", MODEL, "--prompt", "Once upon a time", "--generate", "70",
                "--attention", "none", "-o", os.path.join(tmp, "seq.h5"))
        with h5py.File(os.path.join(tmp, "seq.h5"), "r") as f:
            ids = f["tokens"][:]
        T = len(ids)
        tok = write_tokens(tmp, "seq.ids", ids)
        out = os.path.join(tmp, "fid")
        r = run("fidelity", "--quiet", "--model", MODEL, "--tokens", tok, "--policies",
                "full,streaming,keydiff,tova,h2o,snapkv:window=8", "--budgets", "16,32,500", "--chunk", str(B),
                "--threads", "2", "-o", out)
        if not check(r.returncode == 0, "fidelity runs", r.stderr):
            return finish()
        check("Spearman rho" in r.stdout, "prints a summary with rho")
        for name in ("fidelity.csv", "positions.csv", "summary.csv", "misordered.csv", "fidelity.png", "fidelity.gp",
                     "fidelity.dat", "report.html", "full.h5", "provenance.json", "sim/summary.csv",
                     "sim/provenance.json"):
            check(os.path.getsize(os.path.join(out, name)) > 0, "writes " + name)
        cfg = rows(os.path.join(out, "fidelity.csv"))
        check(list(cfg[0].keys()) == ["config", "policy", "params", "budget", "allocator", "chunk", "n_positions",
                                      "kl_mean", "kl_p95", "kl_max", "greedy_agree", "ppl_full", "ppl_evict",
                                      "out_rel_err_mean", "out_rel_err_p95", "attn_recall_mean", "cache_peak_rows",
                                      "rows_peak"],
              "fidelity.csv columns")
        check(all(c["allocator"] == "uniform" for c in cfg), "fidelity.csv: allocator uniform by default")
        check(len(cfg) == 18, "one row per (policy x budget)", len(cfg))
        label = lambda r, sfx="": r["policy" + sfx] + (":" + r["params" + sfx] if r["params" + sfx] else "")  # noqa: E731
        check(all(c["config"] == label(c) for c in cfg), "fidelity.csv: config is policy[:params]")
        trivial = [c for c in cfg if c["policy"] == "full" or int(c["budget"]) >= T]
        check(all(float(c["kl_mean"]) == 0 and float(c["kl_max"]) == 0 and float(c["greedy_agree"]) == 1
                  and c["ppl_evict"] == c["ppl_full"] for c in trivial),
              "full and N >= T: KL 0, agreement 1, the full perplexity", trivial)
        check(all(int(c["cache_peak_rows"]) <= int(c["budget"]) + B for c in cfg if c["policy"] != "full"),
              "every evicting run's caches stayed within N + B")

        pos = rows(os.path.join(out, "positions.csv"))
        check(list(pos[0].keys())[:4] == ["config", "policy", "params", "budget"] and
              all(p["config"] == label(p) for p in pos), "positions.csv: config, policy, params, budget first")
        for c in cfg:
            key = (c["policy"], c["params"], c["budget"])
            kl = np.array([float(p["kl"]) for p in pos if (p["policy"], p["params"], p["budget"]) == key])
            ag = np.array([int(p["greedy_agree"]) for p in pos if (p["policy"], p["params"], p["budget"]) == key])
            n = max(T - int(c["budget"]), 0)
            ok = len(kl) == n == int(c["n_positions"])
            if n:
                s = np.sort(kl)
                k = 0.95 * (n - 1)
                p95 = s[int(k)] + (k - int(k)) * (s[min(int(k) + 1, n - 1)] - s[int(k)])
                ok = ok and abs(kl.mean() - float(c["kl_mean"])) < 1e-6 * (1 + kl.mean()) \
                    and abs(p95 - float(c["kl_p95"])) < 1e-6 * (1 + p95) and abs(ag.mean() - float(c["greedy_agree"])) < 1e-9
            check(ok, "%s %s N=%s: mean, p95 and agreement from positions.csv" % key)

        # the lockstep runs are the standalone capture runs: KL from their logits
        def cap(name, *extra):
            rr = run("capture", "--quiet", "--logits", "--attention", "none", "--model", MODEL, "--tokens", tok,
                     "--chunk", str(B), "-o", os.path.join(tmp, name), *extra)
            assert rr.returncode == 0, rr.stderr
            with h5py.File(os.path.join(tmp, name), "r") as f:
                return f["logits"][:]
        full = cap("full.h5")
        for spec, budget, policy in (("keydiff", 16, "keydiff"), ("tova", 32, "tova"), ("snapkv:window=8", 16, "snapkv")):
            ev = cap("ev_%s.h5" % policy, "--evict", spec, "--budget", str(budget))
            want = kl_rows(full, ev)[budget:]
            got = [float(p["kl"]) for p in pos if p["policy"] == policy and p["budget"] == str(budget)]
            close("%s N=%d: per-position KL equals numpy's on the capture logits" % (spec, budget), got, want,
                  1e-6, 1e-4)

        sim = {(s["policy"], s["params"], s["budget"]): s for s in rows(os.path.join(out, "sim/summary.csv"))
               if s["phase"] == "all"}
        same = lambda a, b: (np.isnan(a) and np.isnan(b)) or abs(a - b) < 1e-8  # noqa: E731
        check(all(same(float(c["out_rel_err_mean"]), float(sim[(c["policy"], c["params"], c["budget"])]
                                                           ["out_rel_err_mean"])) for c in cfg),
              "out_rel_err_mean is sim's (phase=all; nan where sim measured no query, N >= T)")
        cols = ("out_rel_err_mean", "out_rel_err_p95", "attn_recall_mean")
        check(all(c[k] == sim[(c["policy"], c["params"], c["budget"])][k] for c in cfg for k in cols),
              "out_rel_err_mean, out_rel_err_p95 and attn_recall_mean print as sim's summary.csv does (the same numbers, "
              "handed over in memory)")

        ranked = [c for c in cfg if c["policy"] != "full" and c["out_rel_err_mean"] != "nan"]
        rho = spearman([float(c["out_rel_err_mean"]) for c in ranked], [float(c["kl_mean"]) for c in ranked])
        summ = rows(os.path.join(out, "summary.csv"))
        check(summ[0]["scope"] == "all" and summ[0]["budget"] == "" and all(s["scope"] == "budget" and s["budget"].isdigit()
                                                                           for s in summ[1:])
              and abs(float(summ[0]["rho_out_rel_err_kl"]) - rho) < 1e-5,
              "summary rho equals numpy's Spearman over the evicting configurations",
              "%s vs %.6f" % (summ[0], rho))
        want_pairs = set()
        for a in ranked:
            for b in ranked:
                if a["budget"] == b["budget"] and float(a["out_rel_err_mean"]) < float(b["out_rel_err_mean"]) \
                        and float(a["kl_mean"]) > float(b["kl_mean"]):
                    want_pairs.add((a["budget"], a["policy"], a["params"], b["policy"], b["params"]))
        mis = rows(os.path.join(out, "misordered.csv"))
        check(all(m["config_a"] == label(m, "_a") and m["config_b"] == label(m, "_b") for m in mis),
              "misordered.csv: config_a and config_b are policy[:params] of each side")
        got_pairs = {(m["budget"], m["policy_a"], m["params_a"], m["policy_b"], m["params_b"]) for m in mis}
        check(got_pairs == want_pairs and int(summ[0]["n_misordered"]) == len(want_pairs),
              "misordered.csv lists exactly the pairs offline replay orders wrongly", (got_pairs, want_pairs))
        with open(os.path.join(out, "report.html")) as f:
            html = f.read()
        check("fidelity.png" in html and "Spearman" in html and "<script" not in html, "report.html section")
        check_headline(r.stdout, html, ranked, summ, out)

        for args, what in ((["--policies", "oracle"], "oracle is offline only"),
                           (["--budgets", "0"], "a zero budget"),
                           (["--chunk", "x"], "a bad chunk"),
                           ([], "an existing output without --force")):
            o = out if not args else os.path.join(tmp, "bad")
            r = run("fidelity", "--quiet", "--model", MODEL, "--tokens", tok, *args, "-o", o)
            lines = r.stderr.strip().splitlines()
            check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith("kvtrace: error:")
                  and not os.path.exists(os.path.join(tmp, "bad")), "exit 2, one line: " + what, r.stderr)
        r = run("fidelity", "--quiet", "--model", os.path.join(tmp, "seq.ids"), "--tokens", tok, "-o",
                os.path.join(tmp, "bad"))
        check(r.returncode in (1, 3) and len(r.stderr.strip().splitlines()) == 1
              and not os.path.exists(os.path.join(tmp, "bad"))
              and not [n for n in os.listdir(tmp) if n.startswith(".bad")], "a bad model: one line, nothing left", r.stderr)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
