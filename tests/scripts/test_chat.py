"""Chat prompts through every verb (docs/tokenize.md, "Chat templates"), TAP. Tiny random-weight Hugging Face
directories carry the real tokenizer.json and tokenizer_config.json of Qwen2.5, Qwen3 and Llama 3.2
(tests/tokenizers/SOURCES.md); the templated texts expected here are written out by hand from the templates'
Jinja text (the renderings are compared with transformers' own in tests/real/test_chat_templates.py).

- capture --chat (with and without --system), --messages, fidelity --chat, tokenize --chat: /prompt_text is the
  templated text, /tokens its ids with no special token added, /prompt_chat the messages with the template's
  family and sha256; info shows it; the template's options (Llama 3.2's date, Qwen 3's enable_thinking).
- A prompts file's "messages" (capture --prompts, fidelity --prompts): the answer after the generation prompt,
  spans found in the templated text; prompts needle --chat writes such lines.
- Refusals, each one line with exit 2 (usage) or 3 (input) and no output: a template not in the table (its sha256
  named), no template, options without --chat, bad messages files, a malformed tokenizer_config.json;
  chat_template.jinja read before tokenizer_config.json, a list of named templates.
    /usr/bin/python3 tests/scripts/test_chat.py [BUILD]"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import hfmodel  # noqa: E402
from tap import check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def run(*args):
    r = subprocess.run([KV, *args], capture_output=True)
    r.stdout, r.stderr = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
    return r


def one_line(r, code):
    return r.returncode == code and len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("kvtrace: error: ")


def chatml(pairs):
    return "".join("<|im_start|>%s\n%s<|im_end|>\n" % p for p in pairs) + "<|im_start|>assistant\n"


def fetch(ids):
    r = subprocess.run([os.path.join(ROOT, "tests", "lib", "fetch_tokenizers.sh"), *ids], capture_output=True,
                       text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in r.stdout.splitlines()}, None


def model_dir(d, src, arch="qwen2", vocab=151936, config=True):
    cfg = {"model_type": arch, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": vocab, "rms_norm_eps": 1e-6,
           "rope_theta": 10000.0, "max_position_embeddings": 2048, "tie_word_embeddings": True}
    if arch == "qwen3":
        cfg["head_dim"] = 8
    hfmodel.write_hf_dir(d, cfg, hfmodel.random_weights(cfg, 7, bias=arch == "qwen2", qk_norm=arch == "qwen3"))
    shutil.copy(os.path.join(src, "tokenizer.json"), d)
    if config:
        shutil.copy(os.path.join(src, "tokenizer_config.json"), d)
    return d


def template_sha(d):
    with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
        return hashlib.sha256(json.load(f)["chat_template"].encode("utf-8")).hexdigest()


def ids_of(d, text):
    r = run("tokenize", "--tokenizer", os.path.join(d, "tokenizer.json"), "--no-special", "--text", text)
    return json.loads(r.stdout) if r.returncode == 0 else None


def trace_is(what, path, d, text, messages, family, extra=None):
    """/prompt_text == text, /tokens[:P] == its ids, /prompt_chat's messages, family, sha256 (and extra fields)."""
    if not os.path.exists(path):
        return check(False, what, "no trace at %s" % path)
    with h5py.File(path, "r") as f:
        got = f["prompt_text"].asstr()[()] if "prompt_text" in f else None
        P = int(f.attrs["prompt_len"])
        toks = f["tokens"][:P].tolist()
        rec = json.loads(f["prompt_chat"].asstr()[()]) if "prompt_chat" in f else {}
    want = dict(family=family, template_sha256=template_sha(d), messages=messages, **(extra or {}))
    ok = got == text and toks == ids_of(d, text) and rec == want
    return check(ok, what, "text %r\n  want %r\nrecord %s\n  want %s" % (got, text, rec, want))


def capture_cases(tmp, q25, q3, l32):
    out = os.path.join(tmp, "c1.h5")
    r = run("capture", "--quiet", "--model", q25, "--chat", "--prompt", "Hi there", "-o", out)
    check(r.returncode == 0, "capture --chat --prompt runs on a Qwen2.5-templated model", r.stderr)
    trace_is("capture --chat: the default system message, the user's, the assistant's turn opened", out, q25,
             chatml([("system", QWEN_SYSTEM), ("user", "Hi there")]), [{"role": "user", "content": "Hi there"}],
             "chatml")
    info = run("info", out)
    check("chat          chatml template" in info.stdout and "messages: user" in info.stdout,
          "info shows the chat record", info.stdout)
    out = os.path.join(tmp, "c2.h5")
    r = run("capture", "--quiet", "--model", q25, "--chat", "--system", "Be brief.", "--prompt", "Hi", "--generate",
            "2", "-o", out)
    check(r.returncode == 0, "capture --chat --system --generate 2 runs", r.stderr)
    trace_is("capture --chat --system: the given system message replaces the default", out, q25,
             chatml([("system", "Be brief."), ("user", "Hi")]),
             [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "chatml")
    conv = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"},
            {"role": "user", "content": "Ünïcödé 日本 🎉"}]
    mf = os.path.join(tmp, "conv.json")
    with open(mf, "w", encoding="utf-8") as f:
        json.dump(conv, f, ensure_ascii=False)
    out = os.path.join(tmp, "c3.h5")
    r = run("capture", "--quiet", "--model", q25, "--messages", mf, "-o", out)
    check(r.returncode == 0, "capture --messages runs", r.stderr)
    trace_is("capture --messages: a multi-turn conversation", out, q25,
             chatml([("system", QWEN_SYSTEM)] + [(m["role"], m["content"]) for m in conv]), conv, "chatml")
    out = os.path.join(tmp, "c4.h5")
    r = run("capture", "--quiet", "--model", q3, "--chat", "--no-thinking", "--prompt", "Why?", "-o", out)
    check(r.returncode == 0, "capture --chat --no-thinking runs on a Qwen3-templated model", r.stderr)
    trace_is("Qwen 3 --no-thinking: no default system message, an empty think block opens the reply", out, q3,
             "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
             [{"role": "user", "content": "Why?"}], "qwen3", {"enable_thinking": False})
    head = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
    tail = "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>" \
           "<|start_header_id|>assistant<|end_header_id|>\n\n"
    for date, args in (("26 Jul 2024", []), ("01 Jan 2030", ["--chat-date", "01 Jan 2030"])):
        out = os.path.join(tmp, "c5%d.h5" % len(args))
        r = run("capture", "--quiet", "--model", l32, "--chat", "--prompt", "  Hello \n", *args, "-o", out)
        check(r.returncode == 0, "capture --chat %s runs on a Llama-3.2-templated model" % args, r.stderr)
        trace_is("Llama 3.2 %s: the date %s, the message trimmed, BOS written by the template" % (args, date), out,
                 l32, head + "Today Date: %s\n\n" % date + tail, [{"role": "user", "content": "  Hello \n"}],
                 "llama3.2", {"date": date})
    fdir = os.path.join(tmp, "fid")
    r = run("fidelity", "--quiet", "--model", q25, "--chat", "--prompt", "Hi there", "--generate", "2", "--policies",
            "h2o", "--budgets", "4", "-o", fdir)
    check(r.returncode == 0, "fidelity --chat runs", r.stderr)
    trace_is("fidelity --chat: full.h5 keeps the templated text and the chat record", os.path.join(fdir, "full.h5"),
             q25, chatml([("system", QWEN_SYSTEM), ("user", "Hi there")]),
             [{"role": "user", "content": "Hi there"}], "chatml")
    r = run("tokenize", "--model", q25, "--chat", "--text", "Hi there")
    check(r.returncode == 0 and json.loads(r.stdout) == ids_of(q25, chatml([("system", QWEN_SYSTEM),
                                                                              ("user", "Hi there")])),
          "tokenize --chat: the templated text's ids", r.stdout + r.stderr)


def study_cases(tmp, q25):
    msgs = [{"role": "system", "content": "Answer with the number."},
            {"role": "user", "content": "Filler words here. The code is 4711. More filler. What is the code?"}]
    pf = os.path.join(tmp, "p.jsonl")
    with open(pf, "w", encoding="utf-8") as f:
        f.write(json.dumps({"id": "m1", "messages": msgs, "answer": "The code is 4711",
                            "spans": [{"name": "needle", "text": "The code is 4711."}]}) + "\n")
        f.write(json.dumps({"id": "t1", "text": "Plain text prompt."}) + "\n")
    d = os.path.join(tmp, "study")
    r = run("capture", "--quiet", "--model", q25, "--prompts", pf, "-o", d)
    check(r.returncode == 0, "capture --prompts with a 'messages' line runs", r.stderr)
    text = chatml([(m["role"], m["content"]) for m in msgs]) + "The code is 4711"
    path = os.path.join(d, "m1.h5")
    trace_is("a prompts file's messages: the templated text, then the answer", path, q25, text, msgs, "chatml")
    if os.path.exists(path):
        with h5py.File(path, "r") as f:
            names = [n.decode() for n in f["spans/names"][()]]
            st, en, P = f["spans/starts"][()], f["spans/ends"][()], int(f.attrs["prompt_len"])
        ids = ids_of(q25, text)
        a, n = names.index("answer"), names.index("needle")
        check(en[a] == P and ids[st[a]:en[a]] == ids_of(q25, "The code is 4711")[-(en[a] - st[a]):],
              "the answer span: the last tokens, after the generation prompt", "%s %s %s" % (st, en, P))
        r = run("tokenize", "--tokenizer", os.path.join(q25, "tokenizer.json"), "--decode", "--text",
                json.dumps(ids[st[n]:en[n]]))
        check(r.stdout.strip() == "The code is 4711.", "the needle span: its tokens in the templated text decode to "
              "the needle", "%s %s: %r" % (st, en, r.stdout))
    t1 = os.path.join(d, "t1.h5")
    with h5py.File(t1, "r") if os.path.exists(t1) else open(os.devnull) as f:
        check(isinstance(f, h5py.File) and "prompt_chat" not in f and
              f["prompt_text"].asstr()[()] == "Plain text prompt.",
              "a text line of the same file stays plain text (no template)")
    fd = os.path.join(tmp, "fstudy")
    r = run("fidelity", "--quiet", "--model", q25, "--prompts", pf, "--policies", "h2o", "--budgets", "8", "-o", fd)
    check(r.returncode == 0, "fidelity --prompts with a 'messages' line runs", r.stderr)
    trace_is("fidelity --prompts: the messages prompt's full.h5", os.path.join(fd, "m1", "full.h5"), q25, text, msgs,
             "chatml")
    r = run("capture", "--quiet", "--model", q25, "--prompts", pf, "--chat", "-o", os.path.join(tmp, "no"))
    check(one_line(r, 2) and "messages" in r.stderr, "capture --prompts --chat: refused, the file gives messages",
          r.stderr)
    hay = os.path.join(tmp, "hay.txt")
    with open(hay, "w") as f:
        f.write("The grass is green. The sky is blue. The sun is yellow. " * 40)
    npf = os.path.join(tmp, "needle.jsonl")
    r = run("prompts", "needle", "--model", q25, "--chat", "--system", "Be exact.", "--haystack", hay, "--needle",
            "The code is 90210.", "--question", "What is the code?", "--answer", "The code is 90210", "--depths",
            "0,0.5", "--lengths", "120,300", "-o", npf)
    check(r.returncode == 0, "prompts needle --chat runs", r.stderr)
    lines = [json.loads(x) for x in open(npf, encoding="utf-8")] if r.returncode == 0 else []
    ok = len(lines) == 4
    for ln in lines:
        m = ln.get("messages", [])
        ok = ok and "text" not in ln and [x["role"] for x in m] == ["system", "user"] and m[0]["content"] == \
            "Be exact." and m[1]["content"].endswith(" What is the code?") and "The code is 90210." in m[1]["content"]
        n = len(ids_of(q25, chatml([(x["role"], x["content"]) for x in m]) + ln.get("answer", "")) or [])
        ok = ok and n <= int(ln["id"].split("-")[1]) and n > int(ln["id"].split("-")[1]) - 12
    check(ok, "prompts needle --chat: messages (system, user), the answer apart; the templated length fits the "
          "requested one", json.dumps(lines)[:600])
    r = run("capture", "--quiet", "--model", q25, "--prompts", npf, "-o", os.path.join(tmp, "nd"))
    check(r.returncode == 0, "capture --prompts on prompts needle --chat's file runs", r.stderr)
    prefix_cases(tmp, q25, msgs)


def prefix_cases(tmp, q25, msgs):
    """answer_prefix: the reply's start between the generation prompt and the answer; RULER's tasks write it."""
    pf = os.path.join(tmp, "prefix.jsonl")
    with open(pf, "w", encoding="utf-8") as f:
        f.write(json.dumps({"id": "p1", "messages": msgs, "answer_prefix": "The code is ", "answer": "4711"}) + "\n")
    d = os.path.join(tmp, "pstudy")
    r = run("capture", "--quiet", "--model", q25, "--prompts", pf, "-o", d)
    text = chatml([(m["role"], m["content"]) for m in msgs]) + "The code is 4711"
    path = os.path.join(d, "p1.h5")
    if check(r.returncode == 0, "capture --prompts with an answer_prefix runs", r.stderr):
        trace_is("answer_prefix: the templated text, the prefix, then the answer", path, q25, text, msgs, "chatml")
        with h5py.File(path, "r") as f:
            names = [n.decode() for n in f["spans/names"][()]]
            st, en = f["spans/starts"][()], f["spans/ends"][()]
        ids = ids_of(q25, text)
        a = names.index("answer")
        r = run("tokenize", "--tokenizer", os.path.join(q25, "tokenizer.json"), "--decode", "--text",
                json.dumps(ids[st[a]:en[a]]))
        check(r.stdout.strip() == "4711", "answer_prefix: the answer span holds the answer's tokens alone",
              "%s %s: %r" % (st, en, r.stdout))
    npf = os.path.join(tmp, "niah.jsonl")
    r = run("prompts", "niah", "--model", q25, "--chat", "--system", "Be exact.", "--depths", "0.5", "--lengths", "200", "--seeds", "0,1",
            "-o", npf)
    lines = [json.loads(x) for x in open(npf, encoding="utf-8")] if r.returncode == 0 else []
    ok = len(lines) == 2
    for ln in lines:
        user = ln["messages"][-1]["content"]
        key = re.search(r"magic number for (\w+) mentioned", user)
        ok = ok and key is not None and user.endswith("What is the special magic number for %s mentioned in the "
                                                      "provided text?" % key.group(1)) and \
            ln.get("answer_prefix") == "The special magic number for %s mentioned in the provided text is " % \
            key.group(1) and re.fullmatch(r"\d{7}", ln["answer"]) is not None
        n = len(ids_of(q25, chatml([("system", "Be exact."), ("user", user)]) + ln.get("answer_prefix", "") +
                       ln["answer"]) or [])
        ok = ok and 190 <= n <= 200
    check(ok, "prompts niah --chat: the question in the user's message, RULER's answer prefix opening the reply, the "
          "templated length fits", json.dumps(lines)[-600:])
    r = run("capture", "--quiet", "--model", q25, "--prompts", npf, "-o", os.path.join(tmp, "nn"))
    check(r.returncode == 0, "capture --prompts on prompts niah --chat's file runs", r.stderr)
    for what, line, must in (("with a text prompt", {"id": "x", "text": "Hi.", "answer_prefix": "A: "}, "messages"),
                             ("not a string", {"id": "x", "messages": msgs, "answer_prefix": 5}, "answer_prefix"),
                             ("empty", {"id": "x", "messages": msgs, "answer_prefix": ""}, "answer_prefix")):
        bad = os.path.join(tmp, "badprefix.jsonl")
        with open(bad, "w") as f:
            f.write(json.dumps(line) + "\n")
        out = os.path.join(tmp, "bp")
        r = run("capture", "--quiet", "--model", q25, "--prompts", bad, "-o", out)
        check(one_line(r, 3) and must in r.stderr and not os.path.exists(out),
              "answer_prefix %s: exit 3, one line naming %r, nothing written" % (what, must), r.stderr)


def refusals(tmp, q25, src):
    out = os.path.join(tmp, "r.h5")

    def refused(what, code, *args, must=""):
        r = run(*args)
        ok = one_line(r, code) and must in r.stderr and not os.path.exists(out)
        check(ok, "%s: exit %d, one line%s, no output" % (what, code, " naming %r" % must if must else ""),
              "rc %d: %s" % (r.returncode, r.stderr))

    cap = ["capture", "--quiet", "-o", out]
    refused("--system without --chat", 2, *cap, "--model", q25, "--system", "x", "--prompt", "hi")
    refused("--chat with --tokens", 2, *cap, "--model", q25, "--chat", "--tokens", os.path.join(tmp, "none"))
    refused("--chat without a prompt", 2, *cap, "--model", q25, "--chat")
    refused("--chat-date on a template without a date", 2, *cap, "--model", q25, "--chat", "--chat-date", "x",
            "--prompt", "hi")
    refused("--no-thinking on a template without thinking", 2, *cap, "--model", q25, "--chat", "--no-thinking",
            "--prompt", "hi")
    mf = os.path.join(tmp, "m.json")
    for what, body, must in (("not JSON", "[{", "malformed JSON"), ("an empty array", "[]", "non-empty"),
                             ("a role outside system/user/assistant", '[{"role": "tool", "content": "x"}]', "tool"),
                             ("an extra field", '[{"role": "user", "content": "x", "name": "y"}]', "exactly"),
                             ("a number as content", '[{"role": "user", "content": 5}]', "content"),
                             ("a NUL in content", '[{"role": "user", "content": "a\\u0000b"}]', "NUL")):
        with open(mf, "w") as f:
            f.write(body)
        refused("--messages holding %s" % what, 3, *cap, "--model", q25, "--messages", mf, must=must)
    refused("--messages with --chat", 2, *cap, "--model", q25, "--messages", mf, "--chat")
    odd = shutil.copytree(q25, os.path.join(tmp, "odd"))
    cfgp = os.path.join(odd, "tokenizer_config.json")
    with open(cfgp, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["chat_template"] += " "
    with open(cfgp, "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    refused("a template not in the table", 3, *cap, "--model", odd, "--chat", "--prompt", "hi",
            must=hashlib.sha256(cfg["chat_template"].encode()).hexdigest())
    bare = shutil.copytree(q25, os.path.join(tmp, "bare"))
    os.unlink(os.path.join(bare, "tokenizer_config.json"))
    refused("a model without a chat template", 2, *cap, "--model", bare, "--chat", "--prompt", "hi",
            must="no chat template")
    r = run(*cap, "--model", bare, "--prompt", "hi")
    check(r.returncode == 0, "without --chat such a model runs as before", r.stderr)
    os.path.exists(out) and os.unlink(out)
    with open(cfgp, "w") as f:
        f.write("{")
    refused("a malformed tokenizer_config.json", 3, *cap, "--model", odd, "--prompt", "hi",
            must="tokenizer_config.json")
    cfg["chat_template"] = [{"name": "tool_use", "template": "x"}, {"name": "default",
                                                                    "template": cfg["chat_template"][:-1]}]
    with open(cfgp, "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    r = run("tokenize", "--model", odd, "--chat", "--text", "hi", "--rendered")
    check(r.returncode == 0 and json.loads(r.stdout) == chatml([("system", QWEN_SYSTEM), ("user", "hi")]),
          "a list of named templates: the one named default", r.stdout + r.stderr)
    cfg["chat_template"] = cfg["chat_template"][:1]
    with open(cfgp, "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    refused("a list of templates without a default", 3, "tokenize", "--model", odd, "--chat", "--text", "hi",
            must="default")
    with open(os.path.join(odd, "chat_template.jinja"), "w", encoding="utf-8") as f:
        f.write(json.load(open(os.path.join(src, "tokenizer_config.json")))["chat_template"])
    r = run("tokenize", "--model", odd, "--chat", "--text", "hi", "--rendered")
    check(r.returncode == 0 and json.loads(r.stdout) == chatml([("system", QWEN_SYSTEM), ("user", "hi")]),
          "chat_template.jinja is read before tokenizer_config.json's chat_template", r.stdout + r.stderr)


def main():
    dirs, why = fetch(["qwen2_5", "qwen3", "llama3_2"])
    if not check(dirs is not None, "the Qwen2.5, Qwen3 and Llama 3.2 tokenizer files can be had", why):
        return finish()
    with tempfile.TemporaryDirectory() as tmp:
        q25 = model_dir(os.path.join(tmp, "q25"), dirs["qwen2_5"])
        q3 = model_dir(os.path.join(tmp, "q3"), dirs["qwen3"], arch="qwen3")
        l32 = model_dir(os.path.join(tmp, "l32"), dirs["llama3_2"], arch="llama", vocab=128256)
        capture_cases(tmp, q25, q3, l32)
        study_cases(tmp, q25)
        refusals(tmp, q25, dirs["qwen2_5"])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
