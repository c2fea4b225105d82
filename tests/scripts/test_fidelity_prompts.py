"""`kvtrace fidelity --prompts FILE.jsonl` on stories260K
(docs/fidelity.md#many-prompts-fidelity---prompts-filejsonl): one fidelity study per
prompt in DIR/ID/, each the same as `fidelity --tokens` of that prompt alone; DIR/fidelity.csv is
their rows with a trace column; answer.csv's answer log-probability under the full run equals the
sum of the full trace's /logprobs over the answer's tokens and numpy's log-softmax of a `capture
--logits` run, under each evicting run numpy's on a `capture --evict --logits` run of the same
tokens; summary.csv's means and 95% percentile bootstrap intervals over prompts against numpy
(the generator restated in tests/lib/kvrng.py); bad prompt files exit 3 naming file and line and
write nothing; --prompts with --prompt exits 2. TAP."""
import csv
import json
import os
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kvrng import Rng  # noqa: E402
from kvrun import capture, run, write_tokens  # noqa: E402
from tap import NO_MODEL, check, close, finish, model_file, skip  # noqa: E402

MODEL = model_file()
B = 4
POLICIES = "keydiff,streaming,tova"
BUDGETS = "8,12"
PROMPTS = [
    {"id": "lily", "text": "Once upon a time, there was a little girl named Lily. She liked to play. Lily saw a big dog.",
     "answer": " Lily saw a big dog."},
    {"id": "tom", "text": "Tom had a red ball. He threw the ball to his friend Sam. Sam was happy.",
     "answer": " Sam was happy."},
    {"id": "sun", "text": "The sun was hot. The bird sang a song in the tree. The bird was happy.",
     "answer": " The bird was happy.", "generate": 3},
    {"id": "ids", "tokens": [1, 400, 500, 401, 402, 403, 404, 405, 300, 200, 100, 50, 60, 70, 80, 90, 99]},
]
METRICS = ["kl_mean", "kl_p95", "greedy_agree", "ppl_full", "ppl_evict", "d_ppl", "out_rel_err_mean",
           "attn_recall_mean", "answer_logprob_full", "answer_logprob_evict", "answer_logprob_delta"]


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def log_softmax(x):
    x = x.astype(np.float64)
    x = x - x.max(1, keepdims=True)
    return x - np.log(np.exp(x).sum(1, keepdims=True))


def answer_logprob(logits, ids, start, end):
    """Σ log p(ids[t] | ids[:t]) for t in [start, end), from logits row t-1."""
    lp = log_softmax(logits)
    return sum(lp[t - 1, ids[t]] for t in range(start, end))


def bootstrap_idx(n, R=2000, seed=21):
    r = Rng(seed, n, 0, 0)  # core/rng.c's stream, restated in tests/lib/kvrng.py
    return np.array([r.below(n) for _ in range(R * n)], dtype=np.int64).reshape(R, n)


def write_prompts(path, items):
    with open(path, "w") as f:
        for it in items:
            f.write((it if isinstance(it, str) else json.dumps(it)) + "\n")


def check_one_alone(tmp, out, key):
    """Prompt 'ids' alone through fidelity --tokens: the same fidelity.csv rows."""
    tok = write_tokens(tmp, "ids.json", PROMPTS[3]["tokens"])
    alone = os.path.join(tmp, "alone")
    r = run("fidelity", "--quiet", "--model", MODEL, "--tokens", tok, "--policies", POLICIES, "--budgets", BUDGETS,
            "--chunk", str(B), "--threads", "2", "-o", alone)
    if not check(r.returncode == 0, "fidelity --tokens of one prompt runs", r.stderr):
        return
    want = rows(os.path.join(alone, "fidelity.csv"))
    got = [dict((k, v) for k, v in x.items() if k not in ("trace", "n_tokens", "prompt_len"))
           for x in rows(os.path.join(out, "fidelity.csv")) if x["trace"] == "ids"]
    check(got == want, "DIR/fidelity.csv's rows of a prompt are fidelity --tokens' rows of it alone",
          lambda: "%s\n%s" % (got[:1], want[:1]))
    check(rows(os.path.join(out, "ids", "fidelity.csv")) == want, "DIR/ID/fidelity.csv is the prompt's own study")


def check_answers(tmp, out):
    ans = rows(os.path.join(out, "answer.csv"))
    check(sorted({a["trace"] for a in ans}) == ["lily", "sun", "tom"], "answer.csv: the prompts with an answer")
    check(len(ans) == 3 * 3 * 2, "answer.csv: one row per prompt with an answer and configuration", len(ans))
    for pid in ("lily", "tom", "sun"):
        mine = [a for a in ans if a["trace"] == pid]
        with h5py.File(os.path.join(out, pid, "full.h5"), "r") as f:
            ids = f["tokens"][:]
            logprobs = f["logprobs"][:].astype(np.float64)
            P = int(f.attrs["prompt_len"]) if "prompt_len" in f.attrs else None
        start, n = int(mine[0]["answer_start"]), int(mine[0]["answer_tokens"])
        gen = PROMPTS[[p["id"] for p in PROMPTS].index(pid)].get("generate", 0)
        check(start + n == len(ids) - gen and n > 0, "%s: the answer ends the prompt" % pid, (start, n, len(ids), P))
        full_lp = float(mine[0]["answer_logprob_full"])
        close("%s: full answer log-prob = Σ /logprobs over the answer" % pid, full_lp,
              logprobs[start - 1:start + n - 1].sum(), 1e-5, 1e-6)
        tok = write_tokens(tmp, pid + ".json", ids[:len(ids) - gen])

        def cap(name, *extra):
            with capture(os.path.join(tmp, name), MODEL, tok, "--attention", "none", "--chunk", str(B), *extra) as f:
                return f["logits"][:]
        close("%s: full answer log-prob = numpy's on capture --logits" % pid, full_lp,
              answer_logprob(cap(pid + "_full.h5"), ids, start, start + n), 1e-5, 1e-5)
        for a in mine:
            if a["policy"] == "tova" and a["budget"] == "12":
                continue  # two of three policies per prompt keep the run short
            want = answer_logprob(cap("%s_%s_%s.h5" % (pid, a["policy"], a["budget"]), "--evict", a["config"],
                                      "--budget", a["budget"]), ids, start, start + n)
            close("%s %s N=%s: evicting answer log-prob = numpy's on capture --evict --logits" %
                  (pid, a["policy"], a["budget"]), float(a["answer_logprob_evict"]), want, 1e-5, 1e-5)
            close("%s %s N=%s: delta = evict - full" % (pid, a["policy"], a["budget"]),
                  float(a["answer_logprob_delta"]), float(a["answer_logprob_evict"]) - full_lp, 1e-6, 1e-6)
    return ans


def check_summary(out, ans):
    fid = rows(os.path.join(out, "fidelity.csv"))
    summ = rows(os.path.join(out, "summary.csv"))
    check(len(summ) == 6 and all(s["n_traces"] == "4" and s["n_answers"] == "3" for s in summ),
          "summary.csv: one row per configuration, n_traces 4, n_answers 3")
    traces = [p["id"] for p in PROMPTS]
    idx = {4: bootstrap_idx(4), 3: bootstrap_idx(3)}
    bad = []
    for s in summ:
        k = (s["config"], s["budget"], s["allocator"])
        per = {x["trace"]: x for x in fid if (x["config"], x["budget"], x["allocator"]) == k}
        pa = {x["trace"]: x for x in ans if (x["config"], x["budget"], x["allocator"]) == k}
        for m in METRICS:
            if m.startswith("answer_"):
                x = np.array([float(pa[t][m]) for t in traces if t in pa])
            elif m == "d_ppl":
                x = np.array([float(per[t]["ppl_evict"]) - float(per[t]["ppl_full"]) for t in traces])
            else:
                x = np.array([float(per[t][m]) for t in traces])
            means = x[idx[len(x)]].mean(1)
            want = (x.mean(), np.percentile(means, 2.5), np.percentile(means, 97.5))
            got = tuple(float(s[m + sfx]) for sfx in ("", "_ci_lo", "_ci_hi"))
            if not all(abs(g - w) <= 1e-6 * (1 + abs(w)) for g, w in zip(got, want)):
                bad.append((k, m, got, want))
    check(not bad, "summary.csv: means over prompts and 95%% percentile bootstrap intervals equal numpy's (%d rows)"
          % len(summ), lambda: "\n".join(map(str, bad[:6])))


def check_refusals(tmp):
    good = PROMPTS[0]
    cases = [
        ("bad JSON", [good, '{"id": "x", "text": '], 2),
        ("duplicate ids", [good, good], 2),
        ("an unknown field", [good, {"id": "y", "text": "a cat.", "colour": "red"}], 2),
        ("an answer the text does not end with", [{"id": "z", "text": "A cat sat.", "answer": " A dog."}], 1),
    ]
    for what, items, line in cases:
        pf = os.path.join(tmp, "bad.jsonl")
        write_prompts(pf, items)
        out = os.path.join(tmp, "refused")
        r = run("fidelity", "--quiet", "--model", MODEL, "--prompts", pf, "--policies", "streaming", "--budgets", "8",
                "-o", out)
        err = r.stderr.strip()
        check(r.returncode == 3 and err.count("\n") == 0 and ("%s:%d:" % (pf, line)) in err and not os.path.exists(out),
              "%s: exit 3, one line naming file and line, nothing written" % what, (r.returncode, err))
    r = run("fidelity", "--model", MODEL, "--prompts", os.path.join(tmp, "p.jsonl"), "--prompt", "x", "-o",
            os.path.join(tmp, "refused"))
    check(r.returncode == 2 and not os.path.exists(os.path.join(tmp, "refused")), "--prompts with --prompt: exit 2",
          r.stderr)


def main():
    if not MODEL:
        skip("fidelity --prompts on stories260K", NO_MODEL)
        return finish()
    with tempfile.TemporaryDirectory() as tmp:
        pf = os.path.join(tmp, "p.jsonl")
        write_prompts(pf, PROMPTS)
        out = os.path.join(tmp, "fid")
        r = run("fidelity", "--model", MODEL, "--prompts", pf, "--policies", POLICIES, "--budgets", BUDGETS,
                "--chunk", str(B), "--threads", "2", "-o", out)
        if not check(r.returncode == 0, "fidelity --prompts runs", r.stderr):
            return finish()
        check(r.stderr.count("kvtrace: fidelity: prompt ") == 4, "progress per prompt", r.stderr)
        check("4 prompts (3 with an answer)" in r.stdout, "prints the means over prompts", r.stdout)
        for name in ("fidelity.csv", "answer.csv", "summary.csv", "report.html", "provenance.json"):
            check(os.path.getsize(os.path.join(out, name)) > 0, "writes " + name)
        for p in PROMPTS:
            check(os.path.exists(os.path.join(out, p["id"], "report.html")) and
                  os.path.exists(os.path.join(out, p["id"], "sim", "summary.csv")), "writes %s/'s study" % p["id"])
            with h5py.File(os.path.join(out, p["id"], "full.h5"), "r") as f:
                text = f["prompt_text"][()].decode() if "prompt_text" in f else None
            check(text == p.get("text"), "%s/full.h5 keeps the prompt's text (none for ids)" % p["id"], text)
        fid = rows(os.path.join(out, "fidelity.csv"))
        check(list(fid[0].keys())[:2] == ["trace", "config"] and len(fid) == 4 * 6,
              "fidelity.csv: a trace column first, one row per prompt and configuration", len(fid))
        with open(os.path.join(out, "report.html")) as f:
            html = f.read()
        check("answer log p" in html and "4 prompts, 3 with an answer" in html, "report.html: the answer's log-prob")
        check_one_alone(tmp, out, None)
        ans = check_answers(tmp, out)
        check_summary(out, ans)
        check_refusals(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
