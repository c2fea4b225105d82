"""Spans of a prompt (docs/study.md#spans). `capture --prompts` with spans and answer: /spans holds the
token ranges, checked against an independent placement (the GGUF's pieces concatenated in Python
for stories260K's SentencePiece tokenizer, where kvtrace encodes prefixes; ids worked out by hand
for a byte-level tokenizer.json, where kvtrace uses offsets); token ranges as given; bad spans
refused (exit 3, file and line, nothing written); the reader refuses a malformed /spans. TAP.
    /usr/bin/python3 tests/scripts/test_spans.py [BUILD]"""
import csv
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
import ggufio  # noqa: E402
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402
import test_prompt_text as tpt  # noqa: E402
import policy_trace as pt  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")
HAY = ("Once upon a time there was a little cat. The cat liked to play in the sun. One day the cat saw a big "
       "dog. The secret code is 4721. The dog was kind and they played all day. What is the code? 4721")


def run(*args):
    return subprocess.run([KV, *args], capture_output=True, text=True)


def spans_of(path):
    with h5py.File(path, "r") as h:
        if "spans" not in h:
            return {}
        g = h["spans"]
        return {n: (int(s), int(e)) for n, s, e in zip(g["names"].asstr()[:], g["starts"][:], g["ends"][:])}


def pieces(model):
    """Each id's bytes as stories260K's tokenizer prints them: '▁' a space, <0xHH> the byte, <s> nothing."""
    meta, _ = ggufio.read(model)
    out = []
    for p in meta["tokenizer.ggml.tokens"]:
        if len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
            out.append(bytes([int(p[3:5], 16)]))
        elif p in ("<s>", "</s>", "<unk>"):
            out.append(b"")
        else:
            out.append(p.replace("\u2581", " ").encode())
    return out


def covering(ids, piece, text, sub, at_end=False):
    """The smallest token range whose bytes cover sub's bytes in text (the dummy prefix ' ' first)."""
    tb = text.encode()
    bs = len(tb) - len(sub.encode()) if at_end else tb.index(sub.encode())
    be = bs + len(sub.encode())
    assert b"".join(piece[i] for i in ids) == b" " + tb, "the pieces spell the text"
    pos, inside = 0, []
    for i, t in enumerate(ids):
        s, e = pos - 1, pos - 1 + len(piece[t])  # text coordinates
        pos += len(piece[t])
        if e > s and e > bs and s < be:
            inside.append(i)
    return inside[0], inside[-1] + 1


def spm(tmp, model):
    prompts = [{"id": "hay", "text": HAY, "answer": " 4721",
                "spans": [{"name": "needle", "text": "The secret code is 4721."},
                          {"name": "mid", "text": "ecret co"}, {"name": "first", "start": 0, "end": 2}]},
               {"id": "ids", "tokens": [1, 30, 40, 50, 60], "answer": {"start": 3, "end": 5}},
               {"id": "plain", "text": "No spans here."}]
    pf = os.path.join(tmp, "p.jsonl")
    with open(pf, "w") as f:
        f.write("".join(json.dumps(p) + "\n" for p in prompts))
    out = os.path.join(tmp, "st")
    r = run("capture", "--prompts", pf, "--model", model, "--quiet", "-o", out)
    if not check(r.returncode == 0, "capture --prompts with spans and answer runs", r.stderr):
        return
    with h5py.File(os.path.join(out, "hay.h5"), "r") as h:
        ids = [int(x) for x in h["tokens"][: int(h.attrs["prompt_len"])]]
        desc = h["spans"].attrs["description"]
    piece = pieces(model)
    want = {"needle": covering(ids, piece, HAY, "The secret code is 4721."),
            "mid": covering(ids, piece, HAY, "ecret co"), "first": (0, 2),
            "answer": covering(ids, piece, HAY, " 4721", at_end=True)}
    got = spans_of(os.path.join(out, "hay.h5"))
    check(got == want and list(got) == ["needle", "mid", "first", "answer"],
          "stories260K (no offsets: prefixes encoded): each text span is the smallest token range covering its "
          "bytes (pieces concatenated in Python), a token range as given, the answer last", (got, want))
    d = os.path.dirname(model)
    out2 = os.path.join(tmp, "st_llama2c")
    r = run("capture", "--prompts", pf, "--model", os.path.join(d, "derived", "stories260K.bin"), "--tokenizer",
            os.path.join(d, "derived", "tok512.bin"), "--quiet", "-o", out2)
    check(r.returncode == 0 and spans_of(os.path.join(out2, "hay.h5")) == got, "the llama2.c checkpoint with its "
          "tokenizer.bin (no offsets either): the same spans", r.stderr)
    info = run("info", os.path.join(out, "hay.h5")).stdout
    check("spans         4: needle [%d, %d) mid" % want["needle"] in info, "kvtrace info lists the spans", info[:600])
    check(want["answer"][1] == len(ids) and isinstance(desc, (str, bytes)), "the answer ends the prompt; /spans "
          "has its description", want)
    check(spans_of(os.path.join(out, "ids.h5")) == {"answer": (3, 5)} and spans_of(os.path.join(out, "plain.h5")) == {},
          "a prompt given as tokens: the answer's range as given; no spans: no /spans group")
    return out


def byte_level(tmp):
    d = tpt.model_dir(os.path.join(tmp, "tiny"), tpt.tiny_cfg("llama", 262), tpt.handmade())
    # "hello world hello": <|bos|> 261, hello 260, Ġw 259 o r l d, Ġ 32 hello 260 (by hand)
    pf = os.path.join(tmp, "b.jsonl")
    with open(pf, "w") as f:
        f.write(json.dumps({"id": "w", "text": "hello world hello",
                            "spans": [{"name": "world", "text": "world"}, {"name": "orl", "text": "orl"}],
                            "answer": "lo"}) + "\n")
    out = os.path.join(tmp, "bst")
    r = run("capture", "--prompts", pf, "--model", d, "--quiet", "-o", out)
    with h5py.File(os.path.join(out, "w.h5"), "r") as h:
        ids = [int(x) for x in h["tokens"][:]] if r.returncode == 0 else []
    check(r.returncode == 0 and ids == [261, 260, 259, 111, 114, 108, 100, 32, 260], "byte-level tokenizer.json: "
          "the ids worked out by hand", (r.stderr, ids))
    check(spans_of(os.path.join(out, "w.h5")) == {"world": (2, 7), "orl": (3, 6), "answer": (8, 9)},
          "byte-level (offsets): 'world' is Ġw..d [2, 7), 'orl' [3, 6), the answer 'lo' inside the last hello [8, 9)",
          spans_of(os.path.join(out, "w.h5")))


def refused(r, out, *words):
    lines = r.stderr.strip().splitlines()
    return (r.returncode == 3 and len(lines) == 1 and all(w in lines[0] for w in words) and not os.path.exists(out))


def refusals(tmp, model):
    bad = (("a span whose text is not in the prompt", {"spans": [{"name": "n", "text": "zebra"}]}, "not in"),
           ("a span whose text occurs twice", {"spans": [{"name": "n", "text": "cat"}]}, "more than once"),
           ("a token range past the prompt", {"spans": [{"name": "n", "start": 3, "end": 999}]}, "'n'"),
           ("an empty token range", {"spans": [{"name": "n", "start": 3, "end": 3}]}, "'n'"),
           ("two spans of one name", {"spans": [{"name": "n", "start": 0, "end": 1}, {"name": "n", "start": 1,
                                                                                        "end": 2}]}, "two spans"),
           ("a span name with a comma", {"spans": [{"name": "a,b", "start": 0, "end": 1}]}, "A-Z"),
           ("a span named answer", {"spans": [{"name": "answer", "start": 0, "end": 1}]}, "answer"),
           ("an unknown span field", {"spans": [{"name": "n", "start": 0, "end": 1, "x": 1}]}, "unknown"),
           ("an answer not at the end", {"answer": "cat"}, "end"),
           ("an answer range not ending the prompt", {"answer": {"start": 0, "end": 1}}, "end the prompt"),
           ("a text span on a prompt given as tokens", {"tokens": [1, 2, 3], "spans": [{"name": "n", "text": "x"}]},
            "tokens"))
    for what, extra, word in bad:
        p = {"id": "a", "text": HAY}
        if "tokens" in extra:
            del p["text"]
        p.update(extra)
        pf = os.path.join(tmp, "bad.jsonl")
        with open(pf, "w") as f:
            f.write('{"id": "ok", "text": "fine"}\n' + json.dumps(p) + "\n")
        out = os.path.join(tmp, "badout")
        r = run("capture", "--prompts", pf, "--model", model, "--quiet", "-o", out)
        check(refused(r, out, pf + ":2:", word), "%s: exit 3, one line naming the file and line, nothing written"
              % what, r.stderr)


def reader(tmp, out):
    src = os.path.join(out, "hay.h5")
    edits = (("two spans of one name", lambda g: g["names"].__setitem__(1, "needle"), "two spans"),
             ("a name with a newline", lambda g: g["names"].__setitem__(0, "x\ny"), "name"),
             ("a span past prompt_len", lambda g: g["ends"].__setitem__(0, 10 ** 6), "outside"),
             ("starts of another length", lambda g: (g.__delitem__("starts"), g.create_dataset("starts", data=[0])),
              "one length"))
    for what, edit, word in edits:
        bad = os.path.join(tmp, "bad.h5")
        with open(src, "rb") as a, open(bad, "wb") as b:
            b.write(a.read())
        with h5py.File(bad, "r+") as h:
            edit(h["spans"])
        r = run("info", bad)
        check(r.returncode == 3 and "/spans" in r.stderr and word in r.stderr, "a trace with %s: refused on open "
              "(exit 3, naming /spans)" % what, r.stderr)


L_, H_, K_, D_, T_, P_ = 2, 4, 2, 8, 60, 44
G_ = H_ // K_


def synth_trace(path, seed, spans):
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=D_)
    keys = (mean + 0.6 * rng.normal(size=(L_, K_, T_, D_))).astype(np.float32)
    vals = rng.normal(size=(L_, K_, T_, D_)).astype(np.float32)
    qs = (1.5 * rng.normal(size=(L_, H_, T_, D_))).astype(np.float32)
    pt.write_trace(path, keys, vals, qs, P_)
    with h5py.File(path, "r+") as f:
        g = f.create_group("spans")
        g["names"] = [n for n, _, _ in spans]
        g["starts"] = np.array([s for _, s, _ in spans], dtype=np.int64)
        g["ends"] = np.array([e for _, _, e in spans], dtype=np.int64)
    return keys, qs


def keep(policy, C, kf, N):
    """streaming (4 sinks, then the most recent) or keydiff (default: anchor norm, cosine)."""
    if policy == "streaming":
        s = np.where(C < 4, np.inf, C.astype(np.float64))
    else:
        k = kf[C]
        kn = k / np.linalg.norm(k, axis=1, keepdims=True)
        mu = kn.mean(0)
        s = -(k @ mu) / (np.linalg.norm(k, axis=1) * np.linalg.norm(mu))
    order = sorted(range(len(C)), key=lambda i: (-s[i], -C[i]))
    return C[np.sort(np.array(order[:N]))]


def span_brute(keys, qs, l, g, policy, N, B, spans):
    """Per span: retention_mean, retention_final, attn_recall of kv head g of layer l (decode chunk 1)."""
    kf = keys[l, g].astype(np.float64)
    full = {}  # (j, i) -> full-cache softmax over 0..i
    for j in range(g * G_, (g + 1) * G_):
        for i in range(T_):
            sc = kf[: i + 1] @ qs[l, j, i].astype(np.float64) / np.sqrt(D_)
            a = np.exp(sc - sc.max())
            full[j, i] = a / a.sum()
    ret = {n: 0.0 for n, _, _ in spans}
    num = {n: 0.0 for n, _, _ in spans}
    den = {n: 0.0 for n, _, _ in spans}
    S, p0 = np.array([], dtype=np.int64), 0
    while p0 < T_:
        p1 = min(p0 + B, P_) if p0 < P_ else p0 + 1
        C = np.concatenate([S, np.arange(p0, p1)])
        for n, a, e in spans:
            inside = C[(C >= a) & (C < e)]
            for i in range(max(p0, e), p1):
                ret[n] += len(inside) / (e - a)
                for j in range(g * G_, (g + 1) * G_):
                    num[n] += full[j, i][inside].sum()
                    den[n] += full[j, i][a:e].sum()
        S = keep(policy, C, kf, N) if len(C) > N else C
        p0 = p1
    return {n: (ret[n] / (T_ - e), ((S >= a) & (S < e)).sum() / (e - a), num[n] / den[n]) for n, a, e in spans}


def sim_spans(tmp):
    s1 = [("a", 3, 9), ("b", 20, 22), ("late", 40, 44)]
    s2 = [("a", 5, 12)]
    t1, t2 = os.path.join(tmp, "s1.h5"), os.path.join(tmp, "s2.h5")
    k1, q1 = synth_trace(t1, 1, s1)
    k2, q2 = synth_trace(t2, 2, s2)
    out = os.path.join(tmp, "simres")
    r = run("sim", t1, t2, "--policies", "streaming,keydiff", "--budgets", "8,16", "--chunks", "4,8",
            "--decode-chunk", "1", "--threads", "2", "--quiet", "-o", out)
    if not check(r.returncode == 0, "sim over traces with /spans (h5py-written) runs", r.stderr):
        return
    rows = list(csv.DictReader(open(os.path.join(out, "spans.csv"))))
    check(list(rows[0])[:10] == ["trace", "span", "config", "budget", "chunk", "layer", "kv_head", "retention_mean",
                                 "retention_final", "attn_recall"] and
          len(rows) == (3 + 1) * 2 * 2 * 2 * L_ * K_, "spans.csv: its columns, a row per trace, span, configuration, "
          "layer and kv head", (list(rows[0]), len(rows)))
    worst, per = 0.0, {}
    for tr, keys, qs, spans in (("s1", k1, q1, s1), ("s2", k2, q2, s2)):
        for pol in ("streaming", "keydiff"):
            for N in (8, 16):
                for B in (4, 8):
                    for l in range(L_):
                        for g in range(K_):
                            want = span_brute(keys, qs, l, g, pol, N, B, spans)
                            for n, v in want.items():
                                got = [x for x in rows if x["trace"] == tr and x["span"] == n and
                                       x["config"].split(":")[0] == pol and int(x["budget"]) == N and
                                       int(x["chunk"]) == B and int(x["layer"]) == l and int(x["kv_head"]) == g]
                                got = got[0] if len(got) == 1 else None
                                g3 = [float(got[c]) for c in ("retention_mean", "retention_final", "attn_recall")] \
                                    if got else [np.nan] * 3
                                worst = max(worst, max(abs(a - b) for a, b in zip(g3, v)))
                                per.setdefault((n, pol, N, B, tr), []).append(v)
    check(worst < 1e-5, "every span's retention_mean, retention_final and attn_recall equal a numpy replay "
          "(streaming, keydiff; chunks 4 and 8; max diff %.2g)" % worst)
    summ = list(csv.DictReader(open(os.path.join(out, "spans_summary.csv"))))
    worst, ok = 0.0, len(summ) == 3 * 8
    import test_study  # noqa: E402  (KVTRACE set: its resamples, restated from core/rng.c)
    for x in summ:
        trs = [t for t in ("s1", "s2") if (x["span"], x["config"].split(":")[0], int(x["budget"]), int(x["chunk"]), t)
               in per]
        ok = ok and int(x["n_traces"]) == len(trs)
        idx = test_study.bootstrap_idx(len(trs))
        for k, c in enumerate(("retention_mean", "retention_final", "attn_recall")):
            v = np.array([np.mean([a[k] for a in per[x["span"], x["config"].split(":")[0], int(x["budget"]),
                                                      int(x["chunk"]), t]]) for t in trs])
            means = v[idx].mean(1)
            want = (v.mean(), np.percentile(means, 2.5), np.percentile(means, 97.5))
            got = (float(x[c]), float(x[c + "_ci_lo"]), float(x[c + "_ci_hi"]))
            worst = max(worst, max(abs(a - b) for a, b in zip(got, want)))
    check(ok and worst < 1e-5, "spans_summary.csv: per span name and configuration, the mean over the traces holding "
          "it (n_traces 2 for 'a', 1 for the others) and its 95%% bootstrap interval (max diff %.2g)" % worst)
    r = run("sim", t1, "--policies", "full", "--budgets", "8", "--chunk", "4", "--quiet", "-o",
            os.path.join(tmp, "fullres"))
    rows = list(csv.DictReader(open(os.path.join(tmp, "fullres", "spans.csv"))))
    check(r.returncode == 0 and all(float(x["retention_mean"]) == 1 and float(x["retention_final"]) == 1 and
                                    abs(float(x["attn_recall"]) - 1) < 1e-9 for x in rows),
          "the full cache: retention 1, attn_recall 1", r.stderr)
    plain = os.path.join(tmp, "plain.h5")
    pt.write_trace(plain, k1, k1, q1, P_)
    r = run("sim", plain, "--policies", "tova", "--budgets", "8", "--chunk", "4", "--quiet", "-o",
            os.path.join(tmp, "nospans"))
    check(r.returncode == 0 and not os.path.exists(os.path.join(tmp, "nospans", "spans.csv")), "a trace without "
          "/spans: no spans.csv", r.stderr)


def n_tokens(model, text):
    r = run("tokenize", "--model", model, "--text", text)
    return len(json.loads(r.stdout))


def needle(tmp, model):
    hay = os.path.join(tmp, "hay.txt")
    with open(hay, "w") as f:
        f.write("Tom had a dog.\nThe dog  was big and\tbrown. It liked to run in the sun.\n")
    words = open(hay).read().split()
    nd, qu, an = "The secret code is 4721.", "What is the code?", "4721"
    out = os.path.join(tmp, "needle.jsonl")
    r = run("prompts", "needle", "--haystack", hay, "--needle", nd, "--question", qu, "--answer", an,
            "--depths", "0,0.25,1", "--lengths", "60,100", "--model", model, "-o", out)
    if not check(r.returncode == 0, "prompts needle runs", r.stderr):
        return
    lines = [json.loads(x) for x in open(out)]
    ok = [x["id"] for x in lines] == ["needle-%d-%g" % (L, d) for L in (60, 100) for d in (0, 0.25, 1)]

    def ends(i):   # word i (of the repeated haystack) ends a sentence; so does the file's last word
        w = words[i % len(words)].rstrip("\"')]}\u201d\u2019\u00bb")
        return i % len(words) == len(words) - 1 or w.endswith((".", "!", "?", "\u2026"))
    for x in lines:
        L, d = int(x["id"].split("-")[1]), float(x["id"].split("-")[2])

        def build(n):
            hw = [words[i % len(words)] for i in range(n)]
            m = int(np.floor(d * n + 0.5))
            bounds = [0] + [k for k in range(1, n + 1) if k == n or ends(k - 1)]
            at = min(bounds, key=lambda k: (abs(k - m), k))
            return " ".join(hw[:at] + [nd] + hw[at:] + [qu, an])
        n = len(x["text"].split()) - len((nd + " " + qu + " " + an).split())
        nxt = next(k for k in range(n + 1, n + 10 * len(words)) if ends(k - 1))
        ok = ok and x["text"] == build(n) and sorted(x) == ["answer", "id", "spans", "text"] and \
            x["spans"] == [{"name": "needle", "text": nd}, {"name": "question", "text": qu}] and x["answer"] == an and (n == 0 or ends(n - 1))
        ok = ok and n_tokens(model, build(n)) <= L < n_tokens(model, build(nxt))
        before = x["text"].split(nd)[0].split()
        ok = ok and (not before or before[-1].endswith("."))
    check(ok, "each prompt: the haystack's words (repeated, single spaces) up to the last whole sentence that fits "
          "(the next would not), the needle at the sentence boundary nearest round(depth*n), question, answer",
          lines[:1])
    st = os.path.join(tmp, "needle_st")
    r = run("capture", "--prompts", out, "--model", model, "--quiet", "-o", st)
    idx = [json.loads(x) for x in open(os.path.join(st, "index.jsonl"))] if r.returncode == 0 else []
    check(len(idx) == 6 and all(set(spans_of(os.path.join(st, x["file"]))) == {"needle", "question", "answer"} for x in idx),
          "capture --prompts takes them: /spans holds the needle, the question and the answer", r.stderr)
    bad = (("a length too short for the needle, question and answer", ["--lengths", "5"], 2, "too short"),
           ("a length past the model's context", ["--lengths", "100000"], 2, "context"),
           ("a needle the haystack holds", ["--needle", "big and brown."], 3, "haystack"),
           ("a question the haystack holds", ["--question", "The dog was big"], 3, "question's text"),
           ("a depth outside [0, 1]", ["--depths", "1.5"], 2, "--depths"))
    for what, change, code, word in bad:
        args = {"--haystack": hay, "--needle": nd, "--question": qu, "--answer": an, "--depths": "0.5",
                "--lengths": "60", "--model": model}
        args[change[0]] = change[1]
        o2 = os.path.join(tmp, "needle_bad.jsonl")
        r = run("prompts", "needle", *[a for kv in args.items() for a in kv], "-o", o2)
        lines_ = r.stderr.strip().splitlines()
        check(r.returncode == code and len(lines_) == 1 and word in lines_[0] and not os.path.exists(o2),
              "prompts needle with %s: exit %d, one line, nothing written" % (what, code), r.stderr)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        model = model_file()
        if model is None:
            skip("spans on stories260K", NO_MODEL)
        else:
            out = spm(tmp, model)
            refusals(tmp, model)
            if out:
                reader(tmp, out)
            needle(tmp, model)
        byte_level(tmp)
        os.environ.setdefault("KVTRACE", KV)
        sim_spans(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
