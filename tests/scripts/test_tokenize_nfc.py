"""Byte-level BPE under an NFC normaliser (docs/tokenize.md): added tokens with `normalized: true` are matched
on the normalised text, and --offsets map each token back through NFC to its bytes in the text
as given.

(a) A hand-made tokenizer.json (NFC; a normalized added token "café", another whose content is
    decomposed "e\u0301te\u0301", and a non-normalized "<x>"): the ids below were made once with the
    reference encoder @huggingface/tokenizers (ref_hf, tests/lib/fetch_tokenizers.sh ref_hf):
        node -e 'import(HOME+"/.cache/kvtrace/tokenizers/ref_hf/tokenizers.mjs").then(({Tokenizer}) =>
          console.log(new Tokenizer(TOKENIZER_JSON, {}).encode(S, {add_special_tokens: false}).ids))'
    (@lenml/tokenizers matches every added token on the raw text, so the two references differ here;
    Hugging Face's Rust library does what ref_hf does.)
(b) Offsets: neither JS reference reports offsets, so they are checked against an independent
    computation with Python's unicodedata: on the Qwen 3 tokenizer.json and every corpus string NFC
    changes, wherever two tokens meet cleanly (one ends where the next starts) NFC of the text up
    to there is exactly the bytes of the tokens so far; spans are ordered and inside the text; and a
    token no longer gets its whole segment's span (the bytes of one normalised character all get
    that character's span, as Hugging Face's character offsets do). Hand-made cases pin exact spans.
    /usr/bin/python3 tests/scripts/test_tokenize_nfc.py [BUILD]"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unicodedata

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BUILD", "build")
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, BUILD, "kvtrace")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tokenize_bpe import byte_char, tokenizer  # noqa: E402

UNBYTE = {byte_char(b): b for b in range(256)}
T = tempfile.mkdtemp(prefix="kvnfc-")


def normalized_tokenizer():
    t = tokenizer()  # test_tokenize_bpe.py's; its unused "el" gives way to café
    del t["model"]["vocab"]["el"]
    t["normalizer"] = {"type": "NFC"}
    t["model"]["vocab"].update({"caf\u00e9": 262, "<x>": 263})
    opts = {"lstrip": False, "rstrip": False, "single_word": False}
    t["added_tokens"] += [dict(opts, id=262, content="caf\u00e9", special=False, normalized=True),
                          dict(opts, id=263, content="<x>", special=False, normalized=False),
                          dict(opts, id=264, content="e\u0301te\u0301", special=False, normalized=True)]
    p = os.path.join(T, "norm.json")
    with open(p, "w") as f:
        json.dump(t, f)
    return p


def tokenize(tok, text, *flags):
    f = os.path.join(T, "text")
    with open(f, "wb") as fh:
        fh.write(text.encode())
    r = subprocess.run([KV, "tokenize", "--tokenizer", tok, "--file", f, "--no-special", *flags], capture_output=True)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


# (text, ids from ref_hf)
REF_HF = [
    ("caf\u00e9", [262]), ("cafe\u0301", [262]), ("a cafe\u0301 b", [97, 32, 262, 32, 98]),
    ("<x>cafe\u0301<x>", [263, 262, 263]), ("cafe\u0301\u0301", [262, 204, 129]), ("e\u0301te\u0301", [264]),
    ("\u00e9t\u00e9!", [264, 33]), ("hello cafe\u0301<x>e\u0301te\u0301", [260, 32, 262, 263, 264]),
    ("caf<x>e\u0301", [99, 97, 102, 263, 195, 169]),
]
# (text, spans): each token's bytes in the text as given
SPANS = [
    ("a cafe\u0301 b", [[0, 1], [1, 2], [2, 8], [8, 9], [9, 10]]),
    ("cafe\u0301\u0301", [[0, 6], [6, 8], [6, 8]]),  # café = c a f e+U+0301; the second U+0301 in two bytes
    ("<x>cafe\u0301<x>", [[0, 3], [3, 9], [9, 12]]),
    ("e\u0301te\u0301!", [[0, 7], [7, 8]]),
    ("caf<x>e\u0301", [[0, 1], [1, 2], [2, 3], [3, 6], [6, 9], [6, 9]]),
]


def hand_made():
    tok = normalized_tokenizer()
    bad = [(s, want, out + err) for s, want in REF_HF
           for rc, out, err in [tokenize(tok, s)] if rc != 0 or json.loads(out) != want]
    check(not bad, "normalized added tokens match on the NFC text: %d/%d as ref_hf" % (len(REF_HF) - len(bad),
                                                                                    len(REF_HF)), repr(bad[:3]))
    bad = [(s, want, out + err) for s, want in SPANS
           for rc, out, err in [tokenize(tok, s, "--offsets")] if rc != 0 or json.loads(out) != want]
    check(not bad, "--offsets through NFC: hand-made spans", repr(bad[:3]))


def token_bytes(piece):
    return bytes(UNBYTE[c] for c in piece) if all(c in UNBYTE for c in piece) else piece.encode()


def offsets_oracle(text, pieces, spans):
    """None when the spans agree with NFC of the text, else what is wrong."""
    raw = text.encode()
    if len(pieces) != len(spans):
        return "%d pieces, %d spans" % (len(pieces), len(spans))
    done, last = b"", 0
    for i, (p, (a, z)) in enumerate(zip(pieces, spans)):
        if not (last <= a <= z <= len(raw)):
            return "token %d: span [%d, %d) after a start at %d in %d bytes" % (i, a, z, last, len(raw))
        last = a
        done += token_bytes(p)
        if i + 1 < len(spans) and spans[i + 1][0] != z:
            continue  # not a clean cut
        try:
            prefix = raw[:z].decode()
        except UnicodeDecodeError:
            continue  # a byte-level cut inside a character the text has as it is
        if unicodedata.normalize("NFC", prefix).encode() != done:
            return "token %d ends at %d: NFC of the text up to there is %r, the tokens give %r" % (
                i, z, unicodedata.normalize("NFC", prefix), done)
    return None


def corpus_offsets():
    r = subprocess.run([os.path.join(ROOT, "tests", "lib", "fetch_tokenizers.sh"), "qwen3"], capture_output=True,
                       text=True)
    check(r.returncode == 0, "the Qwen 3 tokenizer.json is at hand", r.stderr.strip()[-300:])
    if r.returncode != 0:
        return
    tok = os.path.join(r.stdout.split()[1], "tokenizer.json")
    with gzip.open(os.path.join(ROOT, "tests", "tokenizers", "fixtures", "corpus.json.gz"), "rt") as f:
        strings = [s for s in json.load(f)["strings"] if unicodedata.normalize("NFC", s) != s]
    lines = "".join(json.dumps(s) + "\n" for s in strings)
    f = os.path.join(T, "batch")
    with open(f, "w") as fh:
        fh.write(lines)
    out = {}
    for flag in ("--pieces", "--offsets"):
        r = subprocess.run([KV, "tokenize", "--tokenizer", tok, "--file", f, "--batch", "--no-special", flag],
                           capture_output=True, text=True)
        out[flag] = [json.loads(x) for x in r.stdout.splitlines()] if r.returncode == 0 else r.stderr
    if isinstance(out["--pieces"], str) or isinstance(out["--offsets"], str):
        check(False, "qwen3 --batch --pieces / --offsets", repr(out)[:400])
        return
    bad = [(s, why) for s, p, o in zip(strings, out["--pieces"], out["--offsets"])
           for why in [offsets_oracle(s, p, o)] if why]
    check(len(strings) >= 20 and not bad, "qwen3: --offsets agree with NFC on the %d corpus strings NFC changes"
          % len(strings), repr(bad[:3]))
    whole = [s for s, o in zip(strings, out["--offsets"])
             if len(unicodedata.normalize("NFC", s)) > 1 and len(o) > 1 and len({tuple(x) for x in o}) == 1]
    check(not whole, "qwen3: no string of more than one character gives every token one span", repr(whole[:3]))


def main():
    hand_made()
    corpus_offsets()
    shutil.rmtree(T, ignore_errors=True)
    sys.exit(finish())


if __name__ == "__main__":
    main()
