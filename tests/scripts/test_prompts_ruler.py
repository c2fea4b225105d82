"""`kvtrace prompts niah|multikey|multivalue|multiquery|vt` (docs/study.md, "RULER's synthetic tasks") on
stories260K's tokenizer, TAP. Each prompt is read back here without kvtrace's code: the haystack is RULER's noise
sentences repeated from the start up to a sentence's end; the needles sit at sentence boundaries, the asked one
at the boundary nearest round(depth * n) of the n haystack words (vt's chain evenly from the depth to the end, in
order); the answer is worked out from the text itself (the asked key's number; every number of the key in text
order; the asked keys' numbers in the order asked; the chain of variables from the value) and ends the text after
the question; every span's text occurs once; the prompt fits its length and one more sentence would not; ids
TASK-LENGTH-DEPTH-SEED; the same command writes the same file, and seeds differ; capture --prompts takes the file.
cwe's numbered list read back: 10 words F times, the others 3 times, the answer in first-occurrence order.
Refusals (exit 2, one line, nothing written): a RULER task with --needle, a size option of another task or out of
range, --seeds with needle, a length too short, cwe with --depths or past its vocabulary's words.
    /usr/bin/python3 tests/scripts/test_prompts_ruler.py [BUILD]"""
import filecmp
import json
import os
import re
import subprocess
import sys
import tempfile

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")
NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.".split()
MAGIC = re.compile(r"One of the special magic numbers for (\w+) is: (\d{7})\.")
VAR0, VARN = re.compile(r"VAR ([A-Z]{5}) = (\d{5})\."), re.compile(r"VAR ([A-Z]{5}) = VAR ([A-Z]{5})\.")
SIZES = {"niah": 1, "multikey": 4, "multivalue": 4, "multiquery": 4, "vt": 5}
LENGTHS, DEPTHS, SEEDS = (450, 700), (0, 0.5, 1), (0, 1)


def run(*args):
    return subprocess.run([KV, *args], capture_output=True, text=True)


def n_tokens(model, text):
    return len(json.loads(run("tokenize", "--model", model, "--text", text).stdout))


def pieces(text, needles):
    """The text cut into haystack words and needles, in order: [(kind, text)]."""
    out, rest = [], text
    while rest:
        hit = min(((rest.find(n), n) for n in needles if rest.find(n) >= 0), default=None)
        head = rest if hit is None else rest[:hit[0]]
        out += [("word", w) for w in head.split()]
        if hit is None:
            break
        out.append(("needle", hit[1]))
        rest = rest[hit[0] + len(hit[1]):]
    return out


def answer_from_text(task, body, question):
    """What the question asks, worked out from the prompt's body."""
    if task == "vt":
        (first, value), = VAR0.findall(body)
        chain, links = [first], dict((b, a) for a, b in VARN.findall(body))
        while chain[-1] in links:
            chain.append(links[chain[-1]])
        return " ".join(chain)
    found = MAGIC.findall(body)
    if task in ("niah", "multikey"):
        key = re.search(r"magic number for (\w+) mentioned", question).group(1)
        return ",".join(v for k, v in found if k == key)
    if task == "multivalue":
        key = re.search(r"magic numbers for (\w+) mentioned", question).group(1)
        return ", ".join(v for k, v in found if k == key)
    keys = re.search(r"magic numbers for (.+?) mentioned", question).group(1).replace(" and ", ", ").split(", ")
    return ", ".join(next(v for k, v in found if k == key) for key in keys)


def check_prompt(task, model, x, problems):
    L, d = int(x["id"].split("-")[1]), float(x["id"].split("-")[2])
    text, ans = x["text"], x["answer"]
    spans = [s for s in x["spans"] if s["name"] != "question"]
    needles = [s["text"] for s in spans]
    qstart = text.find(" What " if task != "vt" else " Find all variables")
    body, question = text[:qstart], text[qstart + 1:]
    asked = [s["text"] for s in x["spans"] if s["name"] == "question"]
    if len(asked) != 1 or text.count(asked[0]) != 1 or not question.startswith(asked[0] + " ") or \
            not asked[0].endswith(("?", ".")):
        problems.append((x["id"], "question span", asked))
    if not text.endswith(" " + ans) or answer_from_text(task, body, question) != ans:
        problems.append((x["id"], "answer", ans))
    n_needles = len(MAGIC.findall(body)) + len(VAR0.findall(body)) + len(VARN.findall(body))
    if len(spans) != SIZES[task] or n_needles != SIZES[task] or any(text.count(t) != 1 for t in needles):
        problems.append((x["id"], "needles", len(spans), n_needles))
    names = [s["name"] for s in spans]
    want_names = {"needle"} | {"needle_%d" % i for i in range(2, SIZES[task] + 1)} if task != "multikey" else \
        {"needle"} | {"distractor_%d" % i for i in range(1, SIZES[task])}
    if set(names) != want_names:
        problems.append((x["id"], "span names", names))
    seq = pieces(body, needles)
    words = [w for k, w in seq if k == "word"]
    n = len(words)
    ends = [i for i in range(1, n + 1) if words[i - 1].endswith(".")]
    if words != [NOISE[i % len(NOISE)] for i in range(n)] or (n and ends[-1] != n):
        problems.append((x["id"], "haystack", words[:12]))
    at, i = {}, 0
    for k, w in seq:
        if k == "word":
            i += 1
        elif i not in [0] + ends:
            problems.append((x["id"], "needle inside a sentence", w))
        else:
            at[w] = i
    bounds = [0] + ends

    def nearest(depth):
        m = int(depth * n + 0.5)
        return min(bounds, key=lambda b: (abs(b - m), b))
    by = {s["name"]: s["text"] for s in spans}
    if task == "vt":
        chain = [by["needle"]] + [by["needle_%d" % j] for j in range(2, SIZES[task] + 1)]
        want = [nearest(d + (1 - d) * j / len(chain)) for j in range(len(chain))]
        if [at.get(c) for c in chain] != want or [body.find(c) for c in chain] != sorted(body.find(c) for c in chain):
            problems.append((x["id"], "vt chain places", [at.get(c) for c in chain], want))
    elif at.get(by["needle"]) != nearest(d):
        problems.append((x["id"], "asked needle's place", at.get(by["needle"]), nearest(d)))
    grown = body + " " + " ".join(NOISE[(n + j) % len(NOISE)] for j in range(5)) + " " + question
    if not n_tokens(model, text) <= L < n_tokens(model, grown):
        problems.append((x["id"], "length", n_tokens(model, text), L))


def tasks_case(tmp, model):
    for task in SIZES:
        out = os.path.join(tmp, task + ".jsonl")
        args = ["prompts", task, "--depths", ",".join(map(str, DEPTHS)), "--lengths", ",".join(map(str, LENGTHS)),
                "--seeds", ",".join(map(str, SEEDS)), "--model", model]
        r = run(*args, "-o", out)
        if not check(r.returncode == 0, "prompts %s runs" % task, r.stderr):
            continue
        lines = [json.loads(x) for x in open(out)]
        ids = ["%s-%d-%g-%d" % (task, L, d, s) for L in LENGTHS for d in DEPTHS for s in SEEDS]
        check([x["id"] for x in lines] == ids and all(sorted(x) == ["answer", "id", "spans", "text"] for x in lines),
              "%s: one prompt per length, depth and seed (TASK-LENGTH-DEPTH-SEED)" % task, [x["id"] for x in lines])
        problems = []
        for x in lines:
            check_prompt(task, model, x, problems)
        check(not problems, "%s: the haystack, the needles' places, the answer worked out from the text, the spans, "
              "the fit to the length" % task, problems[:3])
        again = os.path.join(tmp, task + "_again.jsonl")
        run(*args, "-o", again)
        keys = [re.findall(r"\d{5,7}", x["text"]) for x in lines]
        check(filecmp.cmp(out, again, shallow=False) and keys[0] != keys[1],
              "%s: the same command writes the same file; seeds 0 and 1 draw other keys and numbers" % task)
    st = os.path.join(tmp, "study")
    r = run("capture", "--prompts", os.path.join(tmp, "multikey.jsonl"), "--model", model, "--quiet", "-o", st)
    ok = r.returncode == 0
    if ok:
        with h5py.File(os.path.join(st, "multikey-450-0.5-1.h5"), "r") as f:
            names = sorted(f["spans"]["names"].asstr()[:])
        ok = names == ["answer", "distractor_1", "distractor_2", "distractor_3", "needle", "question"]
    check(ok, "capture --prompts takes a multikey file: /spans names the needle, the distractors, the question and "
          "the answer",
          r.stderr)


def cwe_case(tmp, model):
    """cwe: the numbered list read back here: 10 words F times each, every other word 3 times, the answer the
    10 in the order they first occur; each word one token after a space; the prompt fits its length."""
    L, F = 600, 8
    out = os.path.join(tmp, "cwe.jsonl")
    args = ["prompts", "cwe", "--lengths", str(L), "--frequency", str(F), "--seeds", "0,1", "--model", model]
    r = run(*args, "-o", out)
    if not check(r.returncode == 0, "prompts cwe runs", r.stderr):
        return
    lines = [json.loads(x) for x in open(out)]
    problems = []
    for x in lines:
        text = x["text"]
        intro, _, rest = text.partition("\n")
        lst, _, tail = rest.partition("\nQuestion: ")
        entries = re.findall(r"(\d+)\. ([a-z]+)", lst)
        counts = {}
        for _, w in entries:
            counts[w] = counts.get(w, 0) + 1
        common = [w for w, c in counts.items() if c == F]
        first = sorted(common, key=lambda w: [e[1] for e in entries].index(w))
        if [int(i) for i, _ in entries] != list(range(1, len(entries) + 1)) or \
                " ".join("%s. %s" % e for e in entries) != lst:
            problems.append((x["id"], "numbering"))
        if len(common) != 10 or any(c not in (F, 3) for c in counts.values()) or len(counts) < 11:
            problems.append((x["id"], "counts", sorted(set(counts.values()))))
        if x["answer"] != ", ".join(first) or not text.endswith(
                "What are the 10 most common words in the above list? Answer: The top 10 words that appear most "
                "often in the list are: " + x["answer"]) or not intro.startswith("Below is a numbered list"):
            problems.append((x["id"], "answer", x["answer"]))
        if any(n_tokens(model, "x " + w) != n_tokens(model, "x") + 1 for w in counts):
            problems.append((x["id"], "words are single tokens"))
        n = n_tokens(model, text)
        if not L - 40 < n <= L:
            problems.append((x["id"], "length", n))
    check(len(lines) == 2 and [x["id"] for x in lines] == ["cwe-600-0", "cwe-600-1"] and not problems and
          lines[0]["answer"] != lines[1]["answer"],
          "cwe: 10 words %d times, the others 3 times, numbered; the answer in first-occurrence order; one token a "
          "word; fits its length; ids cwe-LENGTH-SEED, seeds draw other words" % F, problems[:3])
    again = os.path.join(tmp, "cwe_again.jsonl")
    run(*args, "-o", again)
    check(filecmp.cmp(out, again, shallow=False), "cwe: the same command writes the same file")
    r = run("capture", "--prompts", out, "--model", model, "--quiet", "-o", os.path.join(tmp, "cwe_study"))
    check(r.returncode == 0 and all(x["spans"] == [{"name": "question", "text": "Question: What are the 10 most common words "
                                                    "in the above list?"}] for x in lines),
          "capture --prompts takes a cwe file (no spans but the question and the answer)", r.stderr)


def refusal_case(tmp, model):
    base = ["--depths", "0.5", "--lengths", "450", "--model", model]
    bad = (("niah with --needle", ["niah", "--needle", "x"], "--needle"),
           ("niah with --keys", ["niah", "--keys", "3"], "--keys goes with prompts multikey"),
           ("multikey --keys 0", ["multikey", "--keys", "0"], "--keys"),
           ("vt --hops 16", ["vt", "--hops", "16"], "--hops"),
           ("needle with --seeds", ["needle", "--seeds", "1", "--haystack", "/dev/null", "--needle", "a", "--question",
                                    "b", "--answer", "c"], "--seeds"),
           ("a length too short", ["multiquery", "--lengths", "40"], "too short"),
           ("cwe with --depths", ["cwe"], "takes no --depths"),
           ("cwe with a length too short", ["cwe", "--lengths", "300"], "too short for cwe"),
           ("cwe past its vocabulary's words", ["cwe", "--lengths", "900", "--frequency", "8"], "whole-word tokens"),
           ("niah with --frequency", ["niah", "--frequency", "5"], "--frequency goes with prompts cwe"),
           ("an unknown task", ["lcs"], "kind of prompt set"))
    for what, args, says in bad:
        out = os.path.join(tmp, "bad.jsonl")
        a = args[:1] + base + args[1:] if args[0] != "lcs" else args + base
        if "--lengths" in args[1:]:
            a = [args[0]] + (["--depths", "0.5"] if args[0] != "cwe" else []) + ["--model", model] + args[1:]
        r = run("prompts", *a, "-o", out)
        err = r.stderr.strip()
        check(r.returncode == 2 and err.count("\n") == 0 and says in err and not os.path.exists(out),
              "prompts %s: exit 2, one line, nothing written" % what, (r.returncode, err))


def main():
    model = model_file()
    if not model:
        skip("prompts RULER tasks", NO_MODEL)
        return finish()
    with tempfile.TemporaryDirectory(prefix="kvtrace-ruler-") as tmp:
        tasks_case(tmp, model)
        cwe_case(tmp, model)
        refusal_case(tmp, model)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
