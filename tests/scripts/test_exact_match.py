"""The answer measures of `fidelity --prompts` (docs/fidelity.md#the-answer-measures) on stories260K, TAP:
exact match is a greedy continuation after the question (prefill in chunks of B, then one token a step with
eviction at every step) of len(answer) + 8 tokens; answer.csv's continuations equal those of
`capture [--evict CONFIG --budget N] --generate` over the prompt cut before the answer, cut at EOS and decoded
here from the GGUF's own pieces; the match is restated here (the continuation, leading whitespace stripped,
starts with the answer's text); the rank of the answer's first token is numpy's on a `capture --logits` run of
the whole prompt (teacher-forced, as the lockstep runs). A prompt whose answer is the model's own greedy
continuation is answered; when the full-cache model fails most prompts the report and stderr say so, and
not otherwise; summary.csv's exact-match means are answer.csv's. TAP."""
import csv
import json
import os
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ggufio  # noqa: E402
from kvrun import capture, run, write_tokens  # noqa: E402
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402

MODEL = model_file()
B = 4
CONFIGS = [("keydiff", 8), ("streaming", 8), ("tova", 12)]
TEXTS = [("lily", "Once upon a time, there was a little girl named Lily. She liked to play. Lily saw a big dog.",
          " Lily saw a big dog."),
         ("tom", "Tom had a red ball. He threw the ball to his friend Sam. Sam was happy.", " Sam was happy.")]
PREFIXES = [("echo1", [1, 400, 500, 401, 402, 403, 404, 405, 300, 200]),
            ("echo2", [1, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310])]


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


class Pieces:
    """SentencePiece decoding from the GGUF's own vocabulary: '▁' is a space, <0xHH> a byte, control tokens
    nothing."""

    def __init__(self, path):
        meta, _ = ggufio.read(path)
        self.pieces, self.types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
        self.eos = meta.get("tokenizer.ggml.eos_token_id", 2)

    def text(self, ids):
        out = b""
        for i in ids:
            p = self.pieces[i]
            if self.types[i] == 3:
                continue
            if self.types[i] == 6 and p.startswith("<0x"):
                out += bytes([int(p[3:5], 16)])
            else:
                out += p.replace("\u2581", " ").encode()
        return out.decode("utf-8", "replace")


def matches(text, answer):
    a = answer.strip()
    return bool(a) and text.lstrip().startswith(a)


def greedy_prompts(tmp):
    """Prompts whose answer is stories260K's own greedy continuation of a prefix (given as token ranges)."""
    out = []
    for pid, ids in PREFIXES:
        with capture(os.path.join(tmp, pid + "_gen.h5"), MODEL, write_tokens(tmp, pid + ".json", ids),
                     "--attention", "none", "--generate", "6", "--chunk", str(B)) as f:
            toks = [int(t) for t in f["tokens"][:]]
        out.append({"id": pid, "tokens": toks, "answer": {"start": len(ids), "end": len(toks)}})
    return out


def write_prompts(path, items):
    with open(path, "w") as f:
        f.write("".join(json.dumps(it) + "\n" for it in items))


def fidelity(tmp, name, items, policies, budgets):
    pf = os.path.join(tmp, name + ".jsonl")
    write_prompts(pf, items)
    out = os.path.join(tmp, name)
    r = run("fidelity", "--model", MODEL, "--prompts", pf, "--policies", policies, "--budgets", budgets,
            "--chunk", str(B), "--threads", "2", "-o", out)
    return r, out


def reference(tmp, ids, s, e, config, budget, dec):
    """(continuation, rank of the first answer token) from capture runs of the same configuration."""
    ev = ["--evict", config, "--budget", str(budget)] if config else []
    tag = "%s_%s_%d" % (config or "full", s, len(ids))
    pre = write_tokens(tmp, tag + "_pre.json", ids[:s])
    with capture(os.path.join(tmp, tag + "_gen.h5"), MODEL, pre, "--attention", "none", "--chunk", str(B),
                 "--generate", str(e - s + 8), *ev) as f:
        gen = [int(t) for t in f["tokens"][s:]]
    if dec.eos in gen:
        gen = gen[:gen.index(dec.eos)]
    whole = write_tokens(tmp, tag + "_all.json", ids)
    with capture(os.path.join(tmp, tag + "_tf.h5"), MODEL, whole, "--attention", "none", "--chunk", str(B), *ev) as f:
        row = f["logits"][s - 1].astype(np.float64)
    return dec.text(gen), int(1 + (row > row[ids[s]]).sum())


def check_answers(tmp, out, dec, ans):
    """ans: answer.csv's rows of CONFIGS."""
    bad, seen = [], 0
    for a in ans:
        with h5py.File(os.path.join(out, a["trace"], "full.h5"), "r") as f:
            ids = [int(t) for t in f["tokens"][:]]
        s, e = int(a["answer_start"]), int(a["answer_start"]) + int(a["answer_tokens"])
        answer = dec.text(ids[s:e])
        for side, config, budget in (("full", None, 0), ("evict", a["config"], int(a["budget"]))):
            if side == "full" and a["policy"] != CONFIGS[0][0]:
                continue  # the full run is the same for every configuration of a prompt
            text, rank = reference(tmp, ids, s, e, config, budget, dec)
            got = (a["continuation_" + side], int(a["answer_rank_" + side]), int(a["exact_match_" + side]))
            want = (text, rank, int(matches(text, answer)))
            seen += 1
            if got != want:
                bad.append((a["trace"], a["config"], side, got, want))
    check(ans and not bad and seen == len(ans) + len(ans) // len(CONFIGS),
          "answer.csv: continuations, first-token ranks and exact matches equal capture's greedy runs, decoded "
          "and matched here (%d runs)" % seen, lambda: "\n".join(map(str, bad[:6])))


def check_summary(out, ans):
    bad = []
    for s in rows(os.path.join(out, "summary.csv")):
        mine = [a for a in ans if (a["config"], a["budget"]) == (s["config"], s["budget"])]
        for side in ("full", "evict"):
            want = np.mean([float(a["exact_match_" + side]) for a in mine])
            if abs(float(s["exact_match_" + side]) - want) > 1e-8:  # written with 9 significant digits
                bad.append((s["config"], side, s["exact_match_" + side], want))
    check(not bad, "summary.csv: exact_match_full and exact_match_evict are answer.csv's means", bad)


def main():
    if not MODEL:
        skip("fidelity --prompts exact match on stories260K", NO_MODEL)
        return finish()
    dec = Pieces(MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        echo = greedy_prompts(tmp)
        texts = [{"id": i, "text": t, "answer": a} for i, t, a in TEXTS]
        policies = ",".join(p for p, _ in CONFIGS)
        r, out = fidelity(tmp, "mostly", echo + texts[:1], policies, "8,12")
        if not check(r.returncode == 0, "fidelity --prompts runs", r.stderr):
            return finish()
        ans = rows(os.path.join(out, "answer.csv"))
        check(ans and all(c in ans[0] for c in ("answer_rank_full", "exact_match_evict", "continuation_evict")),
              "answer.csv: the rank, exact-match and continuation columns")
        check(all(a["exact_match_full"] == "1" for a in ans if a["trace"].startswith("echo")),
              "a prompt whose answer is the model's own greedy continuation is answered by the full cache")
        n_full = len({a["trace"] for a in ans if a["exact_match_full"] == "1"})
        with open(os.path.join(out, "report.html")) as f:
            html = f.read()
        check("answers %d of 3 prompts" % n_full in html and "beyond this model" not in html and
              "note:" not in r.stderr,
              "report: how many prompts the full model answers, no warning when it answers most", (n_full, r.stderr))
        sub = os.path.join(tmp, "ref")
        os.mkdir(sub)
        check_answers(sub, out, dec, [a for a in ans if (a["policy"], int(a["budget"])) in CONFIGS])
        check_summary(out, ans)
        r, out = fidelity(tmp, "failing", texts + echo[:1], "streaming", "8")
        with open(os.path.join(out, "report.html")) as f:
            html = f.read()
        full = {a["trace"]: a["exact_match_full"] for a in rows(os.path.join(out, "answer.csv"))}
        failing = sum(v == "0" for v in full.values()) * 2 > len(full)
        check(r.returncode == 0 and failing and "beyond this model" in html and
              "note: the full-cache model answers only" in r.stderr,
              "the full-cache model failing most prompts: the report and stderr say so", (full, r.stderr))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
