"""SmolLM2-135M-Instruct's tokenizer (the GGUF's byte-level BPE, tokenizer.ggml.pre = smollm) against Hugging
Face `tokenizers` built from the same GGUF's vocabulary and merges with SmolLM2's own pre-tokenizer,
Sequence[Digits(individual_digits=True), ByteLevel], TAP: ids identical on the project's tokenizer corpus
(tests/tokenizers/corpus.py) plus digit-heavy strings (pass keys, numbers, dates, arithmetic). The GGUF's
control tokens (<|im_start|>, ...) are special on both sides. transformers' own GGUF tokenizer ignores
tokenizer.ggml.pre (GPT-2's plain split); how often it differs is reported, not matched.
Run by tests/run_all.sh with the test venv's Python; KVTRACE and KVTRACE_SMOLLM2 (the GGUF) set."""
import json
import os
import subprocess
import sys
import tempfile


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "tokenizers"))
import corpus  # noqa: E402
from tap import check, finish  # noqa: E402
from smollm2_tokenizer import hf_reference  # noqa: E402

KVTRACE, GGUF = os.environ["KVTRACE"], os.environ["KVTRACE_SMOLLM2"]


def digit_strings():
    out = ["The pass key is 71432. Remember it. 71432 is the pass key.", "0", "00", "007", "1234567890",
           "3.14159", "-42", "+1 (555) 010-9999", "2024-12-31T23:59:59Z", "12,345,678.90", "1e-5 and 6.02e23",
           "x = 17 * 23 + 4", " 9", "  99 ", "a1b2c3", "v2.13.0", "１２３", "٣٤٥", "²³", "ⅫⅦ", "10%", "$1,000",
           "What is the pass key? The pass key is 90210."]
    out += ["%d" % (7 ** k) for k in range(1, 40)]
    out += [" ".join(str((k * 7919) % 100000) for k in range(j, j + 12)) for j in range(0, 120, 12)]
    return out


def kvtrace_ids(texts):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")
    r = subprocess.run([KVTRACE, "tokenize", "--model", GGUF, "--file", f.name, "--batch", "--no-special"],
                       capture_output=True, text=True)
    os.unlink(f.name)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return [json.loads(line) for line in r.stdout.splitlines()]


def transformers_differs(texts, want):
    """How many texts transformers' own GGUF tokenizer encodes otherwise (reported only)."""
    try:
        from transformers import AutoTokenizer
        t = AutoTokenizer.from_pretrained(os.path.dirname(GGUF), gguf_file=os.path.basename(GGUF))
    except Exception as e:  # noqa: BLE001  (a report, not a check)
        return "transformers' GGUF tokenizer did not load: %s" % str(e).splitlines()[0]
    n = sum(t(x, add_special_tokens=False)["input_ids"] != w for x, w in zip(texts, want))
    return "%d of %d texts" % (n, len(texts))


def main():
    texts = [s for s in corpus.strings() if s] + digit_strings()
    tk = hf_reference(GGUF)
    want = [tk.encode(t, add_special_tokens=False).ids for t in texts]
    got = kvtrace_ids(texts)
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    print("# %d texts (%d digit-heavy), %d tokens; %d differ" % (len(texts), len(digit_strings()),
                                                                 sum(map(len, want)), len(bad)))
    check(len(got) == len(want) and not bad, "kvtrace tokenize == tokenizers' Digits+ByteLevel BPE on the GGUF's "
          "vocabulary, id for id", "\n".join("%r: %s vs %s" % (texts[i], got[i], want[i]) for i in bad[:5]))
    dig = [i for i in range(len(texts) - len(digit_strings()), len(texts))]
    check(all(got[i] == want[i] for i in dig) and any(len(want[i]) >= 5 for i in dig),
          "digits: each its own token, as SmolLM2's pre-tokenizer splits them")
    print("# transformers' own GGUF tokenizer (GPT-2's split, tokenizer.ggml.pre ignored) differs on %s"
          % transformers_differs(texts, want))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
