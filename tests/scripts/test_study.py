"""Studies (docs/study.md): `sim --chunks` sweeps prefill chunks in one run, each chunk's rows
and summary equal to a separate `sim --chunk B` run's; usage errors of the sweep. `sim` over
several traces (files, a directory holding index.jsonl, the index): each trace's rows equal its
own run's, summary.csv's means and 95% percentile bootstrap intervals against numpy (the
generator restated here from core/rng.c), the index's and the study's refusals. `capture
--prompts`: one trace per prompt, each the same as a capture of that prompt alone, index.jsonl,
its refusals. `analyze --results A --results B`: merged when disjoint, refused otherwise. TAP."""
import csv
import hashlib
import json
import shutil
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402
from tracefile import write_root_attrs  # noqa: E402
from kvrng import Rng  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
L, H, K, D, T, P = 2, 4, 2, 8, 70, 50


def write_trace(path, seed, T_=T, P_=P, model="brute", L_=L):
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        write_root_attrs(f, "test_study", L_, H, K, D, T_, P_)
        f.attrs["model_name"] = model
        f["tokens"] = rng.integers(0, 100, T_).astype(np.int32)
        f["keys"] = (rng.normal(size=D) + 0.6 * rng.normal(size=(L_, K, T_, D))).astype(np.float32)
        f["values"] = rng.normal(size=(L_, K, T_, D)).astype(np.float32)
        f["queries"] = (1.5 * rng.normal(size=(L_, H, T_, D))).astype(np.float32)


def run(*args):
    return subprocess.run([KVTRACE, *args], capture_output=True, text=True)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


POLICIES = "keydiff,tova,snapkv,streaming,full"


def sim_args(trace, out, *extra, policies=POLICIES):
    return ["sim", trace, "--policies", policies, "--budgets", "16,24", "--threads", "2", "--quiet", "-o", out,
            *extra]


def key(r):
    return (r["config"], r["allocator"], r["budget"], r.get("layer"), r.get("q_head"), r["phase"])


def chunk_sweep(tmp):
    tr = os.path.join(tmp, "t.h5")
    write_trace(tr, 3)
    sweep = os.path.join(tmp, "sweep")
    p = run(*sim_args(tr, sweep, "--chunks", "8,32,5", "--allocators", "uniform,adakv"))
    if not check(p.returncode == 0, "sim --chunks 8,32,5 runs", p.stderr):
        return
    for name in ("results.csv", "summary.csv", "timing.csv"):
        got = rows(os.path.join(sweep, name))
        chunks = sorted({r["chunk"] for r in got}, key=int)
        check(chunks == ["5", "8", "32"], "%s: a chunk column holding every swept chunk" % name, chunks)
    order = [r["chunk"] for r in rows(os.path.join(sweep, "summary.csv"))]
    firsts = list(dict.fromkeys(order))
    check(firsts == ["8", "32", "5"], "summary.csv: chunks in the order given (policy, allocator, chunk, budget)",
          firsts)
    for B in (8, 32, 5):
        one = os.path.join(tmp, "one%d" % B)
        q = run(*sim_args(tr, one, "--chunk", str(B), "--allocators", "uniform,adakv"))
        if not check(q.returncode == 0, "sim --chunk %d runs" % B, q.stderr):
            continue
        for name in ("results.csv", "summary.csv"):
            a = [r for r in rows(os.path.join(sweep, name)) if r["chunk"] == str(B)]
            b = rows(os.path.join(one, name))
            check(len(a) == len(b) and all(x == y for x, y in zip(a, b)),
                  "%s: chunk %d's rows equal a separate --chunk %d run's" % (name, B, B),
                  lambda: "%d vs %d rows; first differing: %s" % (
                      len(a), len(b), next(((x, y) for x, y in zip(a, b) if x != y), None)))
        with h5py.File(os.path.join(sweep, "results.h5"), "r") as fa, \
                h5py.File(os.path.join(one, "results.h5"), "r") as fb:
            ra = [g for g in fa["runs"].values() if int(g.attrs["chunk"]) == B]
            rb = list(fb["runs"].values())
            same = len(ra) == len(rb) and all(
                np.array_equal(x["retained"][()], y["retained"][()]) for x, y in zip(ra, rb))
            check(same, "results.h5: chunk %d's runs keep the same sets as the separate run's" % B)
    # the grid runs with a model-wide allocator too (lock-step pass, one chunk per configuration)
    g = os.path.join(tmp, "global")
    p = run(*sim_args(tr, g, "--chunks", "8,32", "--allocators", "global", policies="tova,snapkv"))
    q = run(*sim_args(tr, g + "1", "--chunk", "32", "--allocators", "global", policies="tova,snapkv"))
    ok = p.returncode == 0 and q.returncode == 0
    if check(ok, "--chunks with a model-wide allocator (global) runs", p.stderr + q.stderr):
        a = [r for r in rows(os.path.join(g, "results.csv")) if r["chunk"] == "32"]
        check(a == rows(os.path.join(g + "1", "results.csv")), "global: chunk 32's rows equal a --chunk 32 run's")


def chunk_usage(tmp):
    tr = os.path.join(tmp, "u.h5")
    write_trace(tr, 4)
    for extra, what in ((["--chunks", "8,16", "--chunk", "8"], "--chunk and --chunks together"),
                        (["--chunks", "8,08"], "a chunk named twice"),
                        (["--chunks", "8,0"], "a chunk below 1"),
                        (["--chunks", "8,16", "--step-counts"], "--step-counts with several chunks"),
                        ([], "neither --chunk nor --chunks")):
        out = os.path.join(tmp, "bad")
        p = run(*sim_args(tr, out, *extra))
        lines = p.stderr.strip().splitlines()
        check(p.returncode == 2 and len(lines) == 1 and lines[0].startswith("kvtrace: error:")
              and not os.path.exists(out), "usage error (exit 2, one line, nothing written): " + what,
              "rc %d: %s" % (p.returncode, p.stderr))
    out = os.path.join(tmp, "one")
    p = run(*sim_args(tr, out, "--chunks", "16", "--step-counts"))
    check(p.returncode == 0, "--chunks with one chunk takes --step-counts", p.stderr)


def bootstrap_idx(n, B=2000, seed=21):
    r = Rng(seed, n, 0, 0)  # core/rng.c's stream, restated in tests/lib/kvrng.py
    return np.array([r.below(n) for _ in range(B * n)], dtype=np.int64).reshape(B, n)


METRICS = ("out_rel_err_mean", "out_rel_err_p95", "attn_recall_mean", "attn_recall_min", "final_logdet_mean")
RUN_KEY = ("config", "allocator", "budget", "chunk", "phase")


def close(a, b):
    a, b = float(a), float(b)
    return (np.isnan(a) and np.isnan(b)) or abs(a - b) <= 2e-8 * max(1.0, abs(b))


def study_traces(tmp):
    """Three traces of one model, of different lengths; their paths."""
    d = os.path.join(tmp, "study")
    os.makedirs(d)
    paths = []
    for i, (name, T_, P_) in enumerate((("pa", 70, 50), ("pb", 64, 40), ("pc", 75, 60))):
        paths.append(os.path.join(d, name + ".h5"))
        write_trace(paths[-1], 10 + i, T_, P_)
    return d, paths


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write_index(d, paths, edit=None):
    lines = []
    for p in paths:
        with h5py.File(p, "r") as f:
            T_ = int(f.attrs["n_tokens"])
        lines.append(dict(id=os.path.basename(p)[:-3], file=os.path.basename(p), tokens=T_, sha256=sha256(p)))
    text = [json.dumps(x) for x in lines]
    if edit:
        text = edit(text)
    with open(os.path.join(d, "index.jsonl"), "w") as f:
        f.write("".join(t + "\n" for t in text))


def study_sim(tmp):
    d, paths = study_traces(tmp)
    out = os.path.join(tmp, "st")
    p = run(*sim_args(paths[0], out, "--chunks", "8,16")[:1], *paths, *sim_args("", out, "--chunks", "8,16")[2:])
    if not check(p.returncode == 0, "sim over three traces runs", p.stderr):
        return
    res = rows(os.path.join(out, "results.csv"))
    check([r["trace"] for r in res][::len(res) // 3] == ["pa", "pb", "pc"],
          "results.csv: a trace column, the file names' stems, traces in the order given")
    by = rows(os.path.join(out, "summary_by_trace.csv"))
    for path in paths:
        tid = os.path.basename(path)[:-3]
        one = os.path.join(tmp, "one_" + tid)
        q = run(*sim_args(path, one, "--chunks", "8,16"))
        if not check(q.returncode == 0, "sim over %s alone runs" % tid, q.stderr):
            continue
        check([r for r in res if r["trace"] == tid] == rows(os.path.join(one, "results.csv")),
              "results.csv: %s's rows equal its own run's" % tid)
        mine = rows(os.path.join(one, "summary_by_trace.csv"))
        check([r for r in by if r["trace"] == tid] == mine, "summary_by_trace.csv: %s's rows equal its own run's" % tid)
        single = rows(os.path.join(one, "summary.csv"))
        ok = len(single) == len(mine) and all(
            a["n_traces"] == "1" and all(a[m] == b[m] == a[m + "_ci_lo"] == a[m + "_ci_hi"] for m in METRICS)
            for a, b in zip(single, mine))
        check(ok, "one trace: summary.csv holds its summary, n_traces 1 and intervals of zero width (%s)" % tid)
        with h5py.File(os.path.join(one, "results.h5"), "r") as f:
            check(all(g.attrs["trace"] == tid for g in f["runs"].values()), "results.h5: every run's @trace (%s)" % tid)
    summ = rows(os.path.join(out, "summary.csv"))
    idx = bootstrap_idx(3)
    bad = []
    for s_ in summ:
        per = [r for r in by if all(r[k] == s_[k] for k in RUN_KEY)]
        if len(per) != 3 or s_["n_traces"] != "3" or int(s_["n_queries"]) != sum(int(r["n_queries"]) for r in per):
            bad.append(("rows/n", s_["config"], len(per)))
            continue
        for m in METRICS:
            x = np.array([float(r[m]) for r in per])
            means = x[idx].mean(axis=1)
            want = (x.mean(), np.percentile(means, 2.5), np.percentile(means, 97.5))
            got = (s_[m], s_[m + "_ci_lo"], s_[m + "_ci_hi"])
            if not all(close(g, w) for g, w in zip(got, want)):
                bad.append((s_["config"], s_["budget"], s_["chunk"], s_["phase"], m, got, want))
    check(not bad and len(summ) == len(by) // 3,
          "summary.csv: each metric's mean over traces and its 95%% percentile bootstrap interval (numpy, %d rows)"
          % len(summ), lambda: "\n".join(map(str, bad[:6])))
    # the same study from its index: the directory, or the index file
    write_index(d, paths)
    for word in (d, os.path.join(d, "index.jsonl")):
        o2 = os.path.join(tmp, "ix%d" % len(word))
        p = run(*sim_args(word, o2, "--chunks", "8,16"))
        same = p.returncode == 0 and all(
            rows(os.path.join(o2, f)) == rows(os.path.join(out, f))
            for f in ("results.csv", "summary.csv", "summary_by_trace.csv"))
        check(same, "sim %s: the same results as the traces named one by one" % os.path.relpath(word, tmp), p.stderr)
    results_h5_origin(out, o2, os.path.join(d, "index.jsonl"))
    study_refusals(tmp, d, paths)


def results_h5_origin(named, indexed, index):
    """A study's results.h5 says it is one (n_traces, the index and its sha256), not the first trace's path alone;
    /index lists every run with the attributes of its group."""
    with h5py.File(os.path.join(named, "results.h5"), "r") as f:
        a = dict(f.attrs)
        check(a.get("n_traces") == 3 and "trace_path" not in a and "study_index" not in a,
              "results.h5 of three traces named one by one: n_traces 3, no trace_path naming only the first",
              {k: v for k, v in a.items() if k != "command"})
    with h5py.File(os.path.join(indexed, "results.h5"), "r") as f:
        a = dict(f.attrs)
        check(a.get("n_traces") == 3 and a.get("study_index") == index and a.get("study_index_sha256") == sha256(index)
              and "trace_path" not in a, "results.h5 of a study from its index: study_index, its sha256, n_traces 3",
              {k: v for k, v in a.items() if k != "command"})
        idx = f["index"][()]
        groups = sorted(f["runs"])
        want = [(n, g.attrs["config"], g.attrs["policy"], g.attrs["params"], g.attrs["allocator"],
                 int(g.attrs["budget"]), int(g.attrs["chunk"]), g.attrs["trace"]) for n, g in
                ((n, f["runs"][n]) for n in groups)]
        got = [(r["run"].decode(), r["config"].decode(), r["policy"].decode(), r["params"].decode(),
                r["allocator"].decode(), int(r["budget"]), int(r["chunk"]), r["trace"].decode()) for r in idx]
        check(got == want and np.isnan(idx["budget_fraction"]).all(),
              "results.h5 /index: one row per run in run order, the group's name and attributes (%d runs)" % len(got),
              (got[:2], want[:2]))


def refused(p, out, code, *words):
    lines = p.stderr.strip().splitlines()
    return (p.returncode == code and len(lines) == 1 and lines[0].startswith("kvtrace: error:")
            and all(w in lines[0] for w in words) and not os.path.exists(out))


def study_refusals(tmp, d, paths):
    out = os.path.join(tmp, "refused")
    index = os.path.join(d, "index.jsonl")
    cases = (
        ("a missing trace", lambda t: t[:1] + [t[1].replace("pb.h5", "gone.h5")] + t[2:], ":2:", "gone.h5"),
        ("a wrong sha256", lambda t: t[:2] + [json.dumps(dict(json.loads(t[2]), sha256="0" * 64))], ":3:", "sha256"),
        ("bad JSON", lambda t: t[:1] + ["{\"id\": "] + t[2:], ":2:", "JSON"),
        ("a wrong length", lambda t: t[:1] + [json.dumps(dict(json.loads(t[1]), tokens=3))] + t[2:], ":2:", "T = 64"),
        ("an unknown field", lambda t: [json.dumps(dict(json.loads(t[0]), colour="red"))] + t[1:], ":1:", "colour"),
        ("a duplicate id", lambda t: t + [t[0]], ":4:", "pa"),
    )
    for what, edit, *words in cases:
        write_index(d, paths, edit)
        p = run(*sim_args(d, out, "--chunk", "8"))
        check(refused(p, out, 3, index + words[0], *words[1:]),
              "index with %s: exit 3, one line naming the index and line, nothing written" % what, p.stderr)
    write_index(d, paths)
    other = os.path.join(tmp, "other.h5")
    write_trace(other, 30, model="other-model")
    p = run(*sim_args(paths[0], out, "--chunk", "8")[:2], other, *sim_args("", out, "--chunk", "8")[2:])
    check(refused(p, out, 3, paths[0], other), "traces of two models: exit 3, one line naming both files", p.stderr)
    p = run(*sim_args(paths[0], out, "--chunk", "8")[:2], other, *sim_args("", out, "--chunk", "8", "--mixed-models")[2:])
    check(p.returncode == 0, "traces of two models with --mixed-models: runs", p.stderr)
    shutil.rmtree(out, ignore_errors=True)
    p = run(*[w if w != "16,24" else "20%" for w in sim_args(d, out, "--chunk", "8")])
    check(refused(p, out, 2, "T ="), "--budgets F% over traces of different lengths: exit 2", p.stderr)
    twin = os.path.join(tmp, "pa.h5")
    shutil.copy(paths[0], twin)
    p = run(*sim_args(paths[0], out, "--chunk", "8")[:2], twin, *sim_args("", out, "--chunk", "8")[2:])
    check(refused(p, out, 2, "'pa'"), "two traces with one stem: exit 2", p.stderr)


PROMPTS = [dict(id="tale", text="Once upon a time"), dict(id="ids-1", tokens=[1, 400, 50, 60], generate=5),
           dict(id="cat", text="The cat sat on the mat", generate=2)]


def capture_prompts(tmp):
    model = model_file()
    if model is None:
        skip("capture --prompts", NO_MODEL)
        return
    pf = os.path.join(tmp, "p.jsonl")
    with open(pf, "w") as f:
        f.write("".join(json.dumps(p) + "\n" + ("\n" if i == 0 else "") for i, p in enumerate(PROMPTS)))
    out = os.path.join(tmp, "cap")
    base = ["--model", model, "--generate", "6", "--chunk", "4", "--quiet"]
    p = run("capture", "--prompts", pf, "-o", out, *base)
    if not check(p.returncode == 0, "capture --prompts runs", p.stderr):
        return
    check(sorted(os.listdir(out)) == ["cat.h5", "ids-1.h5", "index.jsonl", "tale.h5"],
          "one trace per prompt, named by id, and index.jsonl", os.listdir(out))
    with open(os.path.join(out, "index.jsonl")) as f:
        index = [json.loads(x) for x in f]
    ok = [x["id"] for x in index] == [q["id"] for q in PROMPTS]
    for x in index:
        with h5py.File(os.path.join(out, x["file"]), "r") as h:
            ok = ok and x["tokens"] == int(h.attrs["n_tokens"]) and sorted(x) == ["file", "id", "sha256", "tokens"]
        ok = ok and x["sha256"] == sha256(os.path.join(out, x["file"]))
    check(ok, "index.jsonl: id, file, tokens (T) and sha256 of each trace, in the file's order", index)
    ids = os.path.join(tmp, "ids.txt")
    with open(ids, "w") as f:
        f.write(" ".join(map(str, PROMPTS[1]["tokens"])))
    for q in PROMPTS:
        one = os.path.join(tmp, "one-%s.h5" % q["id"])
        src = ["--prompt", q["text"]] if "text" in q else ["--tokens", ids]
        gen = ["--generate", str(q.get("generate", 6))]  # the prompt's own, else --prompts' --generate 6
        r = run("capture", *src, "-o", one, *[x for x in base if x not in ("--generate", "6")], *gen)
        with h5py.File(one, "r") as a, h5py.File(os.path.join(out, q["id"] + ".h5"), "r") as b:
            same = r.returncode == 0 and all(np.array_equal(a[k][()], b[k][()], equal_nan=k == "logprobs")
                                             for k in ("tokens", "keys", "values", "queries", "logprobs"))
        check(same, "prompt %s: the same trace as a capture of that prompt alone" % q["id"], r.stderr)
    res = os.path.join(tmp, "capres")
    r = run("sim", out, "--policies", "keydiff,tova", "--budgets", "6", "--chunks", "4,8", "--quiet", "-o", res)
    check(r.returncode == 0 and {x["trace"] for x in rows(os.path.join(res, "results.csv"))} == {"tale", "ids-1", "cat"},
          "sim over capture --prompts's directory: every prompt's rows", r.stderr)
    bad = (("bad JSON", '{"id": "a", "text": "x"\n', ":1:"),
           ("an unknown field", '{"id": "a", "text": "x", "colour": 1}\n', "colour"),
           ("a duplicate id", '{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', ":2:"),
           ("no text", '{"id": "a"}\n{"id": "b", "text": "y"}\n', ":1:"),
           ("an id that cannot name a file", '{"id": "../a", "text": "x"}\n', ":1:"),
           ("an empty spans list", '{"id": "a", "text": "x", "spans": []}\n', "spans"))
    for what, text, word in bad:
        with open(pf, "w") as f:
            f.write(text)
        o2 = os.path.join(tmp, "capbad")
        r = run("capture", "--prompts", pf, "-o", o2, *base)
        check(refused(r, o2, 3, pf, word), "capture --prompts with %s: exit 3, one line naming the file and line, "
              "nothing written" % what, r.stderr)
    with open(pf, "w") as f:
        f.write('{"id": "a", "text": "x"}\n{"id": "b", "tokens": [1, 99999]}\n')
    r = run("capture", "--prompts", pf, "-o", o2, *base)
    check(refused(r, o2, 3, pf + ":2:"), "a token id outside the vocabulary: exit 3, nothing written (not even "
          "the first prompt's trace)", r.stderr)
    r = run("capture", "--prompts", pf, "--prompt", "x", "-o", o2, *base)
    check(refused(r, o2, 2), "--prompts with --prompt: usage error", r.stderr)


def analyze_merge(tmp):
    """analyze --results A --results B: runs of disjoint configurations merged (the same analysis as one
    sim run of both); the same run twice, the same directory twice, another trace: refused."""
    tr = os.path.join(tmp, "m.h5")
    write_trace(tr, 7)
    dirs = {}
    for name, pol in (("a", "keydiff,streaming"), ("b", "tova,snapkv"), ("ab", "keydiff,streaming,tova,snapkv"),
                      ("dup", "tova")):
        dirs[name] = os.path.join(tmp, "res_" + name)
        p = run(*sim_args(tr, dirs[name], "--chunk", "8", policies=pol))
        check(p.returncode == 0, "sim --policies %s" % pol, p.stderr)
    merged, single = os.path.join(tmp, "an_merged"), os.path.join(tmp, "an_single")
    p = run("analyze", tr, "--results", dirs["a"], "--results", dirs["b"], "--quiet", "-o", merged)
    q = run("analyze", tr, "--results", dirs["ab"], "--quiet", "-o", single)
    if check(p.returncode == 0 and q.returncode == 0, "analyze --results A --results B (disjoint) runs",
             p.stderr + q.stderr):
        names = sorted(set(os.listdir(single)) - {"timing.csv", "provenance.json", "meta.csv"})
        differ = [n for n in names if open(os.path.join(merged, n), "rb").read() !=
                  open(os.path.join(single, n), "rb").read()]
        check(not differ and sorted(os.listdir(merged)) == sorted(os.listdir(single)),
              "the merged analysis equals the analysis of one sim run of both (%d files)" % len(names), differ)
        t = rows(os.path.join(merged, "timing.csv"))
        check([r["policy"] for r in t] == [r["policy"] for r in rows(os.path.join(single, "timing.csv"))],
              "timing.csv: the runs of both, in the order given")
        with open(os.path.join(merged, "provenance.json")) as f:
            ins = [i for i in json.load(f)["inputs"] if i["role"] == "results"]
        check(len(ins) == 2, "provenance.json: both results.h5 as inputs", ins)
    out = os.path.join(tmp, "an_bad")
    p = run("analyze", tr, "--results", dirs["b"], "--results", dirs["dup"], "-o", out)
    check(refused(p, out, 3, dirs["dup"], "tova"), "analyze: the same run in two --results: exit 3, nothing written",
          p.stderr)
    p = run("analyze", tr, "--results", dirs["a"], "--results", dirs["a"], "-o", out)
    check(refused(p, out, 2, dirs["a"]), "analyze: one --results twice: exit 2", p.stderr)
    other = os.path.join(tmp, "m2.h5")
    write_trace(other, 8)
    o2 = os.path.join(tmp, "res_other")
    run(*sim_args(other, o2, "--chunk", "8", policies="tova"))
    p = run("analyze", tr, "--results", dirs["a"], "--results", o2, "-o", out)
    check(refused(p, out, 3, o2, "another trace"), "analyze: --results of another trace: exit 3", p.stderr)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        chunk_sweep(tmp)
        chunk_usage(tmp)
        study_sim(tmp)
        capture_prompts(tmp)
        analyze_merge(tmp)
    sys.exit(finish())


if __name__ == "__main__":
    main()
