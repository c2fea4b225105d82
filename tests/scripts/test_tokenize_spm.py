"""kvtrace tokenize on a tiny hand-made SentencePiece-style tokenizer.json (BPE with
byte_fallback, "▁" for spaces; docs/tokenize.md): merges go by the pair's rank as in the
`tokenizers` library (a piece no merge makes is never formed), added tokens are matched
before the normaliser and the text between them is normalised on its own, Metaspace's
prepend_scheme and split, the template, byte fallback, the decoder's rules, and the refusal
of what kvtrace does not read. Every expected id is worked out by hand in the comments.
The real files (Mistral 7B) are checked in test_tokenize_reference.py.
    /usr/bin/python3 tests/scripts/test_tokenize_spm.py [BUILD]"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from tap import check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, BUILD, "kvtrace")
SP = "\u2581"
# ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then the pieces below
PIECES = [SP, "a", "b", "c", "ab", "bc", "abc", SP + "a", SP + SP, SP + "b"]
ID = {p: 259 + i for i, p in enumerate(PIECES)}
LLAMA2_NORM = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SP},
                                                   {"type": "Replace", "pattern": {"String": " "}, "content": SP}]}
LLAMA2_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def tokenizer(**extra):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({"<0x%02X>" % b: 3 + b for b in range(256)})
    vocab.update(ID)
    # no merge "a b": the piece "ab" is only ever part of "abc" via "a bc"
    tj = {"model": {"type": "BPE", "byte_fallback": True, "unk_token": "<unk>", "vocab": vocab,
                    "merges": ["b c", "a bc", SP + " a", SP + " " + SP, SP + " b"]},
          "added_tokens": [{"id": i, "content": t, "special": True} for i, t in enumerate(["<unk>", "<s>", "</s>"])],
          "normalizer": LLAMA2_NORM, "pre_tokenizer": None,
          "post_processor": {"type": "TemplateProcessing",
                             "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                        {"Sequence": {"id": "A", "type_id": 0}}],
                             "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
          "decoder": LLAMA2_DECODER}
    tj.update(extra)
    return tj


def run(tok, *args, text):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tokenizer.json")
        with open(path, "w") as f:
            json.dump(tok, f)
        r = subprocess.run([KV, "tokenize", "--tokenizer", path, "--text", text] + list(args),
                           capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def ids(tok, text, *args):
    rc, out, err = run(tok, *args, text=text)
    return json.loads(out) if rc == 0 else ("exit %d" % rc, err.strip())


def expect(tok, text, want, what, *args):
    got = ids(tok, text, *args)
    check(got == want, what, "text %r: got %s, want %s" % (text, got, want))


def metaspace(scheme, split):
    return {"type": "Metaspace", "replacement": SP, "prepend_scheme": scheme, "split": split}


def main():
    t = tokenizer()
    never = tokenizer(normalizer=None, pre_tokenizer=metaspace("never", False))
    # "ab" (no ▁): no merge "a b": [a, b]. The old merge-order-as-score encoder joined "a"+"b"
    # into the piece "ab" that no merge makes.
    expect(never, "ab", [ID["a"], ID["b"]], "only pairs that are merges merge (no \"ab\")", "--no-special")
    # "▁abc": b+c (rank 0) first, then a+bc (rank 1) before ▁+a (rank 2); "▁ abc" is no
    # merge: [▁, abc] (merging ▁+a first, as the order of the pieces alone might, gives [▁a, bc])
    expect(t, "abc", [1, ID[SP], ID["abc"]], "merges by rank, BOS from the template")
    # "x" has no piece: its byte 0x78 -> <0x78> = 3 + 0x78
    expect(t, "x", [ID[SP], 3 + 0x78], "byte fallback for a character without a piece", "--no-special")
    # added token first; each segment gets its own Prepend: "▁a" "<s>" "▁b"
    expect(t, "a<s>b", [ID[SP + "a"], 1, ID[SP + "b"]], "added tokens split the text before the normaliser",
           "--no-special")
    # "a  b" -> "▁a▁▁b": ▁+a (2), ▁+▁ (3) -> [▁a, ▁▁, b]
    expect(t, "a  b", [ID[SP + "a"], ID[SP + SP], ID["b"]], "no pre-tokenizer: the whole text is one word",
           "--no-special")
    ms = tokenizer(normalizer=None, pre_tokenizer=metaspace("always", True))
    # split: words "▁a", "▁", "▁b": ▁▁ is never formed
    expect(ms, "a  b", [ID[SP + "a"], ID[SP], ID[SP + "b"]], "Metaspace split: words start at each \u2581",
           "--no-special")
    # always: every segment not starting with ▁ gets one: "▁a" "<s>" "▁b"
    expect(ms, "a<s>b", [ID[SP + "a"], 1, ID[SP + "b"]], "Metaspace always: each segment gets \u2581",
           "--no-special")
    first = tokenizer(normalizer=None, pre_tokenizer=metaspace("first", False))
    # first: only the text's first segment: "▁a" "<s>" "b"; " b" starts with ▁ already: no second one
    expect(first, "a<s>b", [ID[SP + "a"], 1, ID["b"]], "Metaspace first: only the first segment", "--no-special")
    expect(first, " b", [ID[SP + "b"]], "Metaspace: no \u2581 added before a leading space", "--no-special")
    expect(never, "a", [ID["a"]], "Metaspace never: no \u2581", "--no-special")
    none = tokenizer(post_processor=None)
    expect(none, "a", [ID[SP + "a"]], "no post-processor: nothing added")
    # decode: <s> as its text; "▁a" -> " a", Strip takes one leading space of the whole text
    rc, out, err = run(t, "--decode", text=json.dumps([ID[SP + "a"], 1, ID[SP + "b"], 3 + 0xC3, 3 + 0xA9]))
    check(rc == 0 and out == "a<s> b\u00e9\n", "decode: Replace, ByteFallback (two bytes -> \u00e9), Strip",
          "exit %d, %r %s" % (rc, out, err))
    rc, out, err = run(t, "--decode", text=json.dumps([3 + 0xC3, ID["a"]]))
    check(rc == 0 and out == "\ufffda\n", "decode: a byte run that is not UTF-8 is U+FFFD per byte",
          "exit %d, %r %s" % (rc, out, err))
    bad = [("normalizer", {"normalizer": {"type": "NFKC"}}, "normalizer 'NFKC'"),
           ("pre_tokenizer", {"pre_tokenizer": {"type": "Whitespace"}}, "type 'Whitespace'"),
           ("decoder", {"decoder": {"type": "WordPiece"}}, "decoder 'WordPiece'"),
           ("post_processor", {"post_processor": {"type": "RobertaProcessing"}}, "post_processor 'RobertaProcessing'")]
    for what, extra, name in bad:
        rc, out, err = run(tokenizer(**extra), text="a")
        check(rc == 3 and not out and len(err.strip().splitlines()) == 1 and name in err,
              "an unsupported %s is refused by name, exit 3, one line" % what, "exit %d: %s" % (rc, err))
    t_bad = tokenizer()
    t_bad["model"]["merges"] = t_bad["model"]["merges"] + ["q z"]
    rc, out, err = run(t_bad, text="a")
    check(rc == 3 and not out and len(err.strip().splitlines()) == 1 and "merges[5]" in err,
          "a merge naming a piece the vocabulary lacks is refused, exit 3, one line", "exit %d: %s" % (rc, err))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
