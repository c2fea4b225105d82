"""kvtrace tokenize on a tiny hand-made byte-level BPE tokenizer.json
(docs/tokenize.md): GPT-2's byte map, merges applied by rank, the Llama 3 split regex, an
added special token matched before splitting, the BOS template, offsets,
pieces, decode, refusal of invalid UTF-8 and of malformed tokenizer.json
files. Every expected id below is worked out by hand in the comments.
    /usr/bin/python3 tests/scripts/test_tokenize_bpe.py [BUILD]"""
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
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_char(b):
    """GPT-2's printable character for byte b, computed independently."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    if b in keep:
        return chr(b)
    return chr(256 + [x for x in range(256) if x not in keep].index(b))


def tokenizer(merges=None, pre=None, extra=None):
    vocab = {byte_char(b): b for b in range(256)}  # id = the byte's value
    for i, piece in enumerate(["he", "ll", "hell", "\u0120w", "hello", "<|bos|>", "el"]):
        vocab[piece] = 256 + i
    tj = {
        "model": {"type": "BPE", "byte_fallback": False, "vocab": vocab,
                  "merges": merges if merges is not None else ["h e", "l l", "he ll", "\u0120 w", "hell o"]},
        "added_tokens": [{"id": 261, "content": "<|bos|>", "special": True}],
        "normalizer": None,
        "pre_tokenizer": pre or {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [261]}}},
        "decoder": {"type": "ByteLevel"},
    }
    tj.update(extra or {})
    return tj


def run(tok, *args, text=None):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tokenizer.json")
        with open(path, "w") as f:
            json.dump(tok, f)
        cmd = [KV, "tokenize", "--tokenizer", path] + list(args)
        if text is not None:
            tf = os.path.join(d, "text")
            with open(tf, "wb") as f:
                f.write(text)
            cmd += ["--file", tf]
        p = subprocess.run(cmd, capture_output=True)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def main():
    tok = tokenizer()
    # "hello" -> h e l l o: he (rank 0), ll (1), hell (2), hello (4); " world" -> Ġw (3) o r l d
    rc, out, err = run(tok, "--text", "hello world")
    check(rc == 0 and json.loads(out) == [261, 260, 259, 111, 114, 108, 100], "ids with the BOS template",
          out + err)
    rc, out, err = run(tok, "--text", "hello world", "--no-special")
    check(rc == 0 and json.loads(out) == [260, 259, 111, 114, 108, 100], "--no-special adds no BOS", out + err)
    rc, out, err = run(tok, "--text", "hello world", "--offsets")
    check(rc == 0 and json.loads(out) == [[0, 0], [0, 5], [5, 7], [7, 8], [8, 9], [9, 10], [10, 11]],
          "--offsets: [start, end) bytes per token", out + err)
    rc, out, err = run(tok, "--text", "hello world", "--pieces", "--no-special")
    check(rc == 0 and json.loads(out) == ["hello", "\u0120w", "o", "r", "l", "d"], "--pieces", out + err)
    # the special token in the text is matched even with --no-special; "hi" has no merge
    rc, out, err = run(tok, "--text", "<|bos|>hi", "--no-special")
    check(rc == 0 and json.loads(out) == [261, 104, 105], "an added token matched before splitting", out + err)
    # lowest rank first, not leftmost: "hel" with 'e l' (rank 0) before 'h e' (1) is h + el (262);
    # leftmost-first would give he + l
    rc, out, err = run(tokenizer(merges=["e l", "h e", "l l"]), "--text", "hel", "--no-special")
    check(rc == 0 and json.loads(out) == [104, 262], "merges applied by rank", out + err)
    rc, out, err = run(tok, "--text", "\u00e9\n\n 12345", "--no-special")
    # é = c3 a9 (no merge); "\n\n" one piece, " " then "123", "45" (digits in threes)
    check(rc == 0 and json.loads(out) == [0xc3, 0xa9, 10, 10, 32, 49, 50, 51, 52, 53], "bytes and the split regex",
          out + err)
    rc, out, err = run(tok, "--decode", "--text", "[261, 260, 259, 111]")
    # the special token prints as its text, as the reference decoders do
    check(rc == 0 and out == "<|bos|>hello wo\n", "--decode", repr(out) + err)
    # Split Removed: invert keeps only the matches ("ll", "o", "o", "l" here), else only the gaps
    for invert, want in ((True, [108, 108, 111, 111, 108]), (False, [104, 101, 32, 119, 114, 100])):
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "l+|o"}, "behavior": "Removed", "invert": invert},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}
        rc, out, err = run(tokenizer(merges=[], pre=pre), "--text", "hello world", "--no-special")
        check(rc == 0 and json.loads(out) == want, "Split Removed, invert %s" % invert, out + err)
    # \s is Unicode's White_Space as in the Rust regex crate: U+3000 and U+0085 are in it, U+180E (which
    # PCRE2's \s takes) is not; in a class too. Removed drops the spaces' bytes.
    for regex in (r"\s", r"[\s]"):
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Removed", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}
        rc, out, err = run(tokenizer(merges=[], pre=pre), "--batch", "--no-special",
                           text=b'"a\\u3000b\\u0085c\\u180ed"\n')
        check(rc == 0 and json.loads(out) == [97, 98, 99, 0xE1, 0xA0, 0x8E, 100],
              "%s is White_Space (not U+180E)" % regex, out + err)
    # an added token's lstrip / rstrip take the whitespace before / after it (U+3000 too) into its span
    strip = tokenizer(extra={"added_tokens": [{"id": 261, "content": "<|bos|>", "special": True, "lstrip": True,
                                               "rstrip": True}]})
    rc, out, err = run(strip, "--no-special", "--offsets", text="hi \u3000<|bos|>\n hi".encode())
    check(rc == 0 and json.loads(out) == [[0, 1], [1, 2], [2, 15], [15, 16], [16, 17]],
          "added token lstrip/rstrip: the spaces go into its span", out + err)
    rc, out, err = run(strip, "--no-special", text=b"hi <|bos|> hi")
    check(rc == 0 and json.loads(out) == [104, 105, 261, 104, 105], "added token lstrip/rstrip: ids", out + err)
    sw = tokenizer(extra={"added_tokens": [{"id": 261, "content": "<|bos|>", "special": True, "single_word": True}]})
    rc, out, err = run(sw, "--text", "hi")
    check(rc == 3 and out == "" and "single_word" in err and err.count("\n") == 1,
          "an added token with single_word is refused, one line", "rc %d: %s" % (rc, err))
    # --batch: one JSON string (--decode: one array of ids) per line, one JSON value per line out
    rc, out, err = run(tok, "--batch", "--no-special", text=b'"hello"\n"<|bos|>hi"\n"\\u00e9\\n"\n')
    check(rc == 0 and [json.loads(x) for x in out.splitlines()] == [[260], [261, 104, 105], [0xc3, 0xa9, 10]],
          "--batch: one array per line", out + err)
    rc, out, err = run(tok, "--batch", "--decode", text=b"[260, 32]\n[261, 10]\n")
    check(rc == 0 and [json.loads(x) for x in out.splitlines()] == ["hello ", "<|bos|>\n"],
          "--batch --decode: one JSON string per line", out + err)
    for what, data in (("not JSON", b'"hello"\n"oops\n'), ("not a string", b'"hello"\n42\n'),
                       ("a lone surrogate", b'"a"\n"\\ud800"\n')):
        rc, out, err = run(tok, "--batch", text=data)
        check(rc == 3 and out == "" and "line 2" in err and err.count("\n") == 1,
              "--batch refuses %s naming the line, no output" % what, "rc %d: %s%s" % (rc, out, err))
    rc, out, err = run(tok, "--batch", "--decode", text=b"[260]\n[1000000]\n")
    check(rc == 3 and out == "" and "line 2" in err, "--batch --decode refuses an id outside the vocabulary",
          "rc %d: %s%s" % (rc, out, err))
    rc, out, err = run(tok, "--no-special", text=b"ab\xffc")
    check(rc == 3 and out == "" and "byte offset 2" in err and err.count("\n") == 1, "invalid UTF-8: exit 3",
          err)
    bad = {
        "missing merges": tokenizer(extra={"model": {"type": "BPE", "vocab": {byte_char(b): b for b in range(256)}}}),
        "merge of an unknown token": tokenizer(merges=["h e", "q z"]),
        "unsupported pre-tokenizer": tokenizer(pre={"type": "Digits"}),
        "regex PCRE2 rejects": tokenizer(pre={"type": "Split", "pattern": {"Regex": "(ab"}, "behavior": "Isolated"}),
    }
    for what, t in bad.items():
        rc, out, err = run(t, "--text", "hello")
        check(rc == 3 and out == "" and err.startswith("kvtrace: error: ") and err.count("\n") == 1,
              "refused, one line: " + what, "rc %d: %s" % (rc, err))
    finish()


if __name__ == "__main__":
    main()
