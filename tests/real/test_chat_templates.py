"""Chat templates (docs/tokenize.md, "Chat templates"): for each known template, kvtrace's C rendering against
transformers' apply_chat_template(messages, add_generation_prompt=True) on the same template text and the same
tokenizer, TAP. SmolLM2's template and tokenizer come from its GGUF (the tokenizer as `tokenizers` builds it with
SmolLM2's Digits+ByteLevel split: smollm2_tokenizer.py); the others from the real tokenizer.json and
tokenizer_config.json of tests/tokenizers/SOURCES.md. Per template and conversation (one turn, with and without a
system message, multi-turn, unicode, empty content, white space a template trims, Qwen 3's think blocks, the
date of Llama 3.2, enable_thinking=False), the templated text and the ids must be identical; conversations the
template refuses (Mistral's alternation) must be refused by both. The closing table: one row per template.
Run by tests/run_all.sh with the test venv's Python; KVTRACE and KVTRACE_SMOLLM2 (the GGUF) set."""
import json
import os
import subprocess
import sys
import tempfile

from transformers import AutoTokenizer, PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from tap import check, finish  # noqa: E402
from smollm2_tokenizer import gguf_chat_template, hf_reference  # noqa: E402

KVTRACE, GGUF = os.environ["KVTRACE"], os.environ["KVTRACE_SMOLLM2"]


def u(c):
    return {"role": "user", "content": c}


def a(c):
    return {"role": "assistant", "content": c}


def s(c):
    return {"role": "system", "content": c}


COMMON = [
    [u("What is the capital of France?")],
    [s("You are terse."), u("Name three primes.")],
    [u("Hi!"), a("Hello! How can I help?"), u("Tell me a joke.")],
    [s("Answer in French."), u("Good morning"), a("Bonjour"), u("Thank you")],
    [u("Ünïcödé — 日本語のテキスト 🎉 and عربى, ½ ∑ ≠")],
    [u("")],
    [s(""), u("hi")],
    [u("  padded \n\t"), a(" reply  "), u("\u00a0nbsp and ideographic space\u3000")],
    [u("The pass key is 71432. What is the pass key?")],
    [u("line one\nline two\n\nline four")],
    [u("What is 2+2?"), a("4")],
]
QWEN3_THINK = [
    [u("Why is the sky blue?"), a("<think>\nRayleigh scattering.\n</think>\n\nBecause of scattering.")],
    [u("q1"), a("<think>r1</think>a1"), u("q2")],
    [u("q1"), a("plain answer"), u("<tool_response>x</tool_response>")],
    [u("q"), a("\n\n<think>\n\nmulti\n<think>inner\n\n</think>\n\nafter </think> tail")],
]
MISTRAL_REFUSED = [[u("one"), u("two")], [a("first")], [u("q"), a("r"), s("late system")]]

# transformers gives Llama 3.2's template strftime_now, so it writes today's date; kvtrace's default is the date the
# template falls back to without it (reproducible), which transformers writes when given date_string
HF_DEFAULTS = {"llama3.2": {"date": "26 Jul 2024"}}
TEMPLATES = [  # (name, tokenizer id in SOURCES.md or None for SmolLM2's GGUF, family, extra runs)
    ("SmolLM2-135M-Instruct (GGUF)", None, "chatml", []),
    ("Qwen2.5 Instruct", "qwen2_5", "chatml", []),
    ("Qwen3", "qwen3", "qwen3", [({"no_thinking": True}, COMMON[:3])]),
    ("Llama 3 8B Instruct", "llama3", "llama3", []),
    ("Llama 3 (as packaged with 3.1)", "llama3_1", "llama3", []),
    ("Llama 3.2 Instruct", "llama3_2", "llama3.2", [({"date": "02 Dec 2026"}, COMMON[:2])]),
    ("Mistral NeMo Instruct", "mistral_nemo", "mistral-tekken", []),
]


def fetch(ids):
    r = subprocess.run([os.path.join(ROOT, "tests", "lib", "fetch_tokenizers.sh"), *ids], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip())
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in r.stdout.splitlines()}


def kvtrace(tokenizer, convs, opts, rendered):
    """kvtrace tokenize --chat --batch over the conversations: ids (or texts) per line, or (None, stderr)."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as f:
        for c in convs:
            f.write(json.dumps(c) + "\n")
    cmd = [KVTRACE, "tokenize", "--tokenizer", tokenizer, "--chat", "--batch", "--file", f.name]
    cmd += ["--rendered"] if rendered else []
    cmd += ["--chat-date", opts["date"]] if "date" in opts else []
    cmd += ["--no-thinking"] if opts.get("no_thinking") else []
    r = subprocess.run(cmd, capture_output=True, text=True)
    os.unlink(f.name)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return [json.loads(line) for line in r.stdout.splitlines()], ""


def hf_tokenizer(tid, dirs):
    if tid is None:
        t = PreTrainedTokenizerFast(tokenizer_object=hf_reference(GGUF), bos_token="<|im_start|>",
                                    eos_token="<|im_end|>")
        t.chat_template = gguf_chat_template(GGUF)
        return t, GGUF
    return AutoTokenizer.from_pretrained(dirs[tid]), os.path.join(dirs[tid], "tokenizer.json")


def hf_render(tok, conv, opts, tokenize):
    kw = {}
    if "date" in opts:
        kw["date_string"] = opts["date"]
    if opts.get("no_thinking"):
        kw["enable_thinking"] = False
    r = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=tokenize, **kw)
    return list(r["input_ids"]) if tokenize and not isinstance(r, list) else r


def compare(name, tok, path, convs, opts, hf_opts, label):
    """Texts and ids of kvtrace (opts) and transformers (hf_opts) on every conversation: (conversations, tokens,
    conversations that differ)."""
    texts, why = kvtrace(path, convs, opts, True)
    ids, why2 = kvtrace(path, convs, opts, False)
    if texts is None or ids is None:
        check(False, "%s%s: kvtrace renders every conversation" % (name, label), why or why2)
        return 0, 0, len(convs)
    want_t = [hf_render(tok, c, hf_opts, False) for c in convs]
    want_i = [hf_render(tok, c, hf_opts, True) for c in convs]
    bad_t = [k for k in range(len(convs)) if texts[k] != want_t[k]]
    bad_i = [k for k in range(len(convs)) if ids[k] != want_i[k]]
    check(not bad_t, "%s%s: templated text == apply_chat_template's on %d conversations" % (name, label, len(convs)),
          "\n".join("%r:\n  kvtrace %r\n  hf      %r" % (convs[k], texts[k], want_t[k]) for k in bad_t[:3]))
    check(not bad_i, "%s%s: ids == apply_chat_template(tokenize=True)'s" % (name, label),
          "\n".join("%r: %s vs %s" % (convs[k], ids[k], want_i[k]) for k in bad_i[:3]))
    return len(convs), sum(map(len, want_i)), len(set(bad_t) | set(bad_i))


def refused_by_both(name, tok, path):
    for conv in MISTRAL_REFUSED:
        got, why = kvtrace(path, [conv], {}, False)
        try:
            hf_render(tok, conv, {}, False)
            hf_ok = True
        except Exception:  # noqa: BLE001  (jinja's raise_exception)
            hf_ok = False
        check(got is None and not hf_ok and why.count("\n") == 0 and "message" in why,
              "%s: %s refused by both (kvtrace: one line)" % (name, [m["role"] for m in conv]), why)


def main():
    dirs = fetch(sorted({t[1] for t in TEMPLATES if t[1]}))
    rows = []
    for name, tid, family, extra in TEMPLATES:
        tok, path = hf_tokenizer(tid, dirs)
        convs = COMMON + (QWEN3_THINK if family == "qwen3" else [])
        if family == "mistral-tekken":
            convs = [c for c in convs if [m["role"] for m in c if m["role"] != "system"][0::2] ==
                     ["user"] * len([m for m in c if m["role"] != "system"][0::2])]
        n, ntok, bad = compare(name, tok, path, convs, {}, HF_DEFAULTS.get(family, {}), "")
        for opts, more in extra:
            k, kt, b = compare(name, tok, path, more, opts, opts, " %s" % json.dumps(opts))
            n, ntok, bad = n + k, ntok + kt, bad + b
        if family == "mistral-tekken":
            refused_by_both(name, tok, path)
        rows.append((name, family, n, ntok, bad))
    print("# | template | family | conversations | tokens | conversations whose text or ids differ |")
    print("# |---|---|---|---|---|")
    for row in rows:
        print("# | %s | %s | %d | %d | %d |" % row)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
