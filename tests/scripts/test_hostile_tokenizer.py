"""Hostile tokenizer.json files and hostile `tokenize` input, tried as an attacker would (docs/tokenize.md#how-it-is-checked).

  tokjson-structure  JSON damage: truncated, not an object, the wrong type for every field the reader
                     uses (model.vocab, ids, merges in both spellings, added_tokens, normalizer,
                     pre_tokenizer, post_processor, decoder), unknown types, Sequences nested very deep
  tokjson-semantic   well-formed JSON that says something wrong: a merge naming an unknown token or
                     making a piece not in the vocabulary, special ids beyond the vocabulary, a
                     TemplateProcessing naming an unknown token, a regex PCRE2 rejects, a regex that
                     backtracks catastrophically (PCRE2's match limit: one line, not a hang)
  tokjson-resource   a 2-billion-token size claim, NUL bytes and invalid UTF-8 in pieces, JSON nested
                     past any sane depth
  tokenize-input     --decode / --batch input: ids beyond the vocabulary, negative, floats, huge,
                     nested arrays, not arrays at all

Every attempt must exit 3 (bad input) with one "kvtrace: error:" line naming the file (or, for
input, the text's source), and print nothing on stdout. Beside the tallies, files that are odd but
valid must load and work: a regex that matches the empty string (must not loop), vocabulary ids
with holes (holes are refused by --decode), a large vocabulary.

    /usr/bin/python3 tests/scripts/test_hostile_tokenizer.py BUILD   (KVTRACE=... overrides BUILD/kvtrace)
TAP; the last lines are hostile.report()'s tallies."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
os.environ.setdefault("KVTRACE", os.path.abspath(os.path.join(BUILD, "kvtrace")))
import hostile  # noqa: E402
from tap import check, finish  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tokenize_bpe import byte_char, tokenizer  # noqa: E402

sys.setrecursionlimit(100000)
KV = os.path.abspath(os.environ["KVTRACE"])
hostile.KVTRACE = KV
T = tempfile.mkdtemp(prefix="kvhostile-tok-")


def good():
    """A small valid byte-level tokenizer: test_tokenize_bpe.py's without its unused "el" (id 262 is free)."""
    t = tokenizer()
    del t["model"]["vocab"]["el"]
    return t


def edit(f):
    """good() changed by f(tokenizer) (which may return a replacement)."""
    t = good()
    r = f(t)
    return t if r is None else r


def write(name, content):
    p = os.path.join(T, name)
    with open(p, "wb") as fh:
        fh.write(content if isinstance(content, bytes) else json.dumps(content).encode())
    return p


N = [0]


def refuse(tally, what, content, text="hello world", extra=(), timeout=60):
    """content (an object, or raw bytes) as tokenizer.json must be refused: exit 3, naming the file."""
    N[0] += 1
    p = write("t%03d.json" % N[0], content)
    tally.attempt(what, ["tokenize", "--tokenizer", p, "--text", text] + list(extra), codes=(3,), must_say=p,
                  timeout=timeout)


def kv(*args, stdin=None, timeout=60):
    return subprocess.run([KV] + list(args), capture_output=True, input=stdin, timeout=timeout)


def set_in(path, value):
    """An edit that sets t[path[0]][path[1]]... = value."""
    def f(t):
        d = t
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return f


def pre(p, byte_level=True):
    """An edit that sets the pre-tokenizer to p, followed by ByteLevel (no regex) unless byte_level is False."""
    return set_in(["pre_tokenizer"], {"type": "Sequence", "pretokenizers": [
        p, {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]} if byte_level else p)


def split(regex, behavior="Isolated"):
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": behavior, "invert": False}


def nested(kind, key, depth, leaf):
    n = leaf
    for _ in range(depth):
        n = {"type": "Sequence", key: [n]}
    return n


def structure():
    h = hostile.Tally("tokjson-structure")
    whole = json.dumps(good()).encode()
    for cut in (1, 100, len(whole) // 2, len(whole) - 1):
        refuse(h, "truncated at byte %d" % cut, whole[:cut])
    refuse(h, "empty file", b"")
    for what, v in (("an array", []), ("a string", "x"), ("a number", 3), ("null", None)):
        refuse(h, "the file is " + what, json.dumps(v).encode())
    refuse(h, "no model", edit(lambda t: t.pop("model") and None))
    refuse(h, "model is a string", edit(set_in(["model"], "BPE")))
    refuse(h, "model.type missing", edit(lambda t: t["model"].pop("type") and None))
    refuse(h, "model.type a number", edit(set_in(["model", "type"], 7)))
    for mt in ("WordPiece", "Unigram", "WordLevel", "bpe"):
        refuse(h, "model.type " + mt, edit(set_in(["model", "type"], mt)))
    for what, v in (("an array", [["a", 0]]), ("a string", "a"), ("missing", None)):
        refuse(h, "model.vocab " + what, edit(set_in(["model", "vocab"], v)))
    for what, v in (("a string", "7"), ("a float", 7.5), ("negative", -1), ("2^31", 2 ** 31), ("2^63-1", 2 ** 63 - 1),
                    ("null", None), ("true", True)):
        refuse(h, "a vocab id " + what, edit(set_in(["model", "vocab", "hello"], v)))
    refuse(h, "two pieces with one id", edit(set_in(["model", "vocab", "hello"], 256)))
    refuse(h, "model.byte_fallback not a boolean", edit(set_in(["model", "byte_fallback"], "yes")))
    refuse(h, "model.ignore_merges not a boolean", edit(set_in(["model", "ignore_merges"], 1)))
    for what, v in (("an object", {"h e": 0}), ("a string", "h e"), ("a number", 1)):
        refuse(h, "model.merges " + what, edit(set_in(["model", "merges"], v)))
    for what, m in (("a number", 5), ("null", None), ("an object", {"a": "h"}), ("'he' (no space)", "he"),
                    ("' ' (only a space)", " "), ("'h ' (no right side)", "h "), ("'h e l' (three)", "h e l"),
                    ("[h]", ["h"]), ("[h, e, l]", ["h", "e", "l"]), ("[h, 5]", ["h", 5]), ("[null, e]", [None, "e"]),
                    ("[[h], e]", [["h"], "e"]), ("[]", [])):
        refuse(h, "a merge that is " + what, edit(lambda t, m=m: t["model"]["merges"].insert(1, m)))
    refuse(h, "a pair merge naming an unknown token", edit(lambda t: t["model"]["merges"].append(["q", "zz"])))
    for what, v in (("an object", {"id": 261}), ("a string", "x"), ("an array of numbers", [261])):
        refuse(h, "added_tokens " + what, edit(set_in(["added_tokens"], v)))
    for what, a in (("no id", {"content": "<x>"}), ("a string id", {"id": "261", "content": "<|bos|>"}),
                    ("a negative id", {"id": -5, "content": "<x>"}), ("a float id", {"id": 261.0, "content": "<x>"}),
                    ("id 2^40", {"id": 2 ** 40, "content": "<x>"}), ("no content", {"id": 262}),
                    ("a number as content", {"id": 262, "content": 5}),
                    ("an id another token has", {"id": 104, "content": "<x>"}),
                    ("special not a boolean", {"id": 262, "content": "<x>", "special": "yes"}),
                    ("lstrip not a boolean", {"id": 262, "content": "<x>", "lstrip": 1}),
                    ("normalized not a boolean", {"id": 262, "content": "<x>", "normalized": "no"})):
        refuse(h, "an added token with " + what, edit(lambda t, a=a: t["added_tokens"].append(a)))
    for field in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        refuse(h, field + " unknown type", edit(set_in([field], {"type": "NoSuchThing"})))
        refuse(h, field + " without a type", edit(set_in([field], {"kind": "NFC"})))
        refuse(h, field + " a string", edit(set_in([field], "NFC")))
        refuse(h, field + " type a number", edit(set_in([field], {"type": 3})))
    for field, key in (("normalizer", "normalizers"), ("pre_tokenizer", "pretokenizers"),
                       ("post_processor", "processors"), ("decoder", "decoders")):
        refuse(h, field + " Sequence without its list", edit(set_in([field], {"type": "Sequence"})))
        refuse(h, field + " Sequence with a string list", edit(set_in([field], {"type": "Sequence", key: "x"})))
        refuse(h, field + " Sequence holding a number", edit(set_in([field], {"type": "Sequence", key: [5]})))
    refuse(h, "Split without a pattern", edit(pre({"type": "Split", "behavior": "Isolated"})))
    refuse(h, "Split pattern a string", edit(pre({"type": "Split", "pattern": "a", "behavior": "Isolated"})))
    refuse(h, "Split Regex a number", edit(pre({"type": "Split", "pattern": {"Regex": 5}, "behavior": "Isolated"})))
    refuse(h, "Split behavior unknown", edit(pre(split("a", "Sideways"))))
    refuse(h, "Split behavior a number", edit(pre({"type": "Split", "pattern": {"Regex": "a"}, "behavior": 1})))
    refuse(h, "Split invert a string", edit(pre(dict(split("a"), invert="yes"))))
    refuse(h, "ByteLevel use_regex a string", edit(pre({"type": "ByteLevel", "use_regex": "no"})))
    refuse(h, "TemplateProcessing single a string", edit(set_in(["post_processor", "single"], "$A")))
    refuse(h, "TemplateProcessing single missing", edit(lambda t: t["post_processor"].pop("single") and None))
    refuse(h, "TemplateProcessing special_tokens missing",
           edit(lambda t: t["post_processor"].pop("special_tokens") and None))
    refuse(h, "TemplateProcessing ids not integers",
           edit(set_in(["post_processor", "special_tokens", "<|bos|>", "ids"], ["261"])))
    refuse(h, "TemplateProcessing item neither SpecialToken nor Sequence",
           edit(lambda t: t["post_processor"]["single"].append({"Weird": {}})))
    refuse(h, "TemplateProcessing with two $A", edit(lambda t: t["post_processor"]["single"].append(
        {"Sequence": {"id": "A", "type_id": 0}})))
    for key, field in (("pretokenizers", "pre_tokenizer"), ("normalizers", "normalizer"),
                       ("processors", "post_processor"), ("decoders", "decoder")):
        refuse(h, field + " Sequences nested 1000 deep around an unknown type",
               edit(set_in([field], nested(field, key, 1000, {"type": "NoSuchThing"}))))
        refuse(h, field + " Sequences nested 1900 deep", edit(set_in([field], nested(field, key, 1900, 5))))
    return h


def semantic():
    h = hostile.Tally("tokjson-semantic")
    refuse(h, "missing merges", edit(lambda t: t["model"].pop("merges") and None))
    refuse(h, "a merge naming an unknown token", edit(lambda t: t["model"]["merges"].append("q zz")))
    refuse(h, "a merge whose result is not in the vocabulary", edit(lambda t: t["model"]["merges"].append("w o")))
    refuse(h, "a merge naming an unused id's empty piece", edit(lambda t: t["model"]["merges"].append(" h")))
    refuse(h, "an unsupported model type", edit(set_in(["model", "type"], "Unigram")))
    refuse(h, "an unsupported pre-tokenizer type", edit(pre({"type": "Digits"})))
    refuse(h, "an unsupported pre-tokenizer type, no ByteLevel", edit(pre({"type": "Digits"}, False)))
    refuse(h, "a Split without ByteLevel", edit(pre(split("a"), False)))
    refuse(h, "byte_fallback with ByteLevel", edit(set_in(["model", "byte_fallback"], True)))
    refuse(h, "a vocabulary without a byte's token (text holds it)",
           edit(lambda t: t["model"]["vocab"].pop("z") and None), text="zz")
    refuse(h, "a template naming a token special_tokens lacks",
           edit(set_in(["post_processor", "single"], [{"SpecialToken": {"id": "<|nope|>", "type_id": 0}},
                                                      {"Sequence": {"id": "A", "type_id": 0}}])))
    refuse(h, "a template id beyond the vocabulary",
           edit(set_in(["post_processor", "special_tokens", "<|bos|>", "ids"], [999999])))
    refuse(h, "a template id that is negative",
           edit(set_in(["post_processor", "special_tokens", "<|bos|>", "ids"], [-1])))
    refuse(h, "a template with 5 tokens before the text",
           edit(set_in(["post_processor", "single"], [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}}] * 5 +
                       [{"Sequence": {"id": "A", "type_id": 0}}])))
    refuse(h, "a special token id beyond the vocabulary (200,000,000)",
           edit(lambda t: t["added_tokens"].append({"id": 200000000, "content": "<x>", "special": True})))
    for what, rx in (("an unclosed group", "(ab"), ("a bad property", r"\p{Nope}"), ("a bad escape", "\\"),
                     ("a lookbehind of unbounded length", r"(?<=a+)b"), ("an unclosed class", "[a-"),
                     ("a bad quantifier", "a{3,1}"), ("a backreference to nothing", r"\9")):
        refuse(h, "a regex PCRE2 rejects: " + what, edit(pre(split(rx))))
    refuse(h, "a Split String holding \\E", edit(pre({"type": "Split", "pattern": {"String": "a\\Eb"},
                                                        "behavior": "Isolated"})))
    refuse(h, "nine Split regexes", edit(pre({"type": "Sequence", "pretokenizers": [split("a")] * 9})))
    refuse(h, "ByteLevel with add_prefix_space", edit(pre({"type": "ByteLevel", "add_prefix_space": True})))
    refuse(h, "catastrophic backtracking (a+)+$ on 40 a's and a b", edit(pre(split("(a+)+$"))), text="a" * 40 + "b",
           timeout=60)
    refuse(h, "catastrophic backtracking (\\w+\\w+)+$ on 60 x's and a '!'", edit(pre(split(r"(?:\w+\w+)+$"))),
           text="x" * 60 + "!",
           timeout=60)
    return h


def resource():
    h = hostile.Tally("tokjson-resource")
    refuse(h, "an added token claiming id 2^31-2 (a 2-billion-token vocabulary)",
           edit(lambda t: t["added_tokens"].append({"id": 2 ** 31 - 2, "content": "<x>", "special": True})))
    refuse(h, "a vocab id claiming 2^31-1", edit(set_in(["model", "vocab", "hello"], 2 ** 31 - 1)))
    refuse(h, "a vocab id 1,000,000,000 among 262 tokens", edit(set_in(["model", "vocab", "hello"], 10 ** 9)))
    whole = json.dumps(good())
    refuse(h, "a NUL byte (\\u0000) in a piece", whole.replace('"hello"', '"hel\\u0000lo"', 1).encode())
    refuse(h, "a raw NUL byte in a piece", whole.replace('"hello"', '"hel\x00lo"', 1).encode())
    refuse(h, "invalid UTF-8 in a piece", whole.encode().replace(b'"hello"', b'"hel\xfflo"', 1))
    refuse(h, "a lone surrogate in a piece", whole.replace('"hello"', '"hel\\ud800lo"', 1).encode())
    refuse(h, "invalid UTF-8 in a merge", whole.encode().replace(b'"h e"', b'"h \xc3"', 1))
    refuse(h, "JSON nested 100,000 deep", b"[" * 100000 + b"]" * 100000)
    refuse(h, "JSON nested 100,000 deep in the pre_tokenizer",
           whole.replace('"normalizer": null', '"normalizer": ' + '{"a":' * 100000 + '1' + '}' * 100000).encode())
    return h


def inputs():
    h = hostile.Tally("tokenize-input")
    tok = write("input-tokenizer.json", good())
    base = ["tokenize", "--tokenizer", tok]
    for what, ids in (("an id beyond the vocabulary", "[104, 262]"), ("a negative id", "[104, -1]"),
                      ("a float id", "[104, 1.5]"), ("an id 2^31", "[2147483648]"), ("an id 2^63", "[9223372036854775808]"),
                      ("an id 1e300", "[1e300]"), ("a string id", '["104"]'), ("null", "[null]"),
                      ("a nested array", "[[104]]"), ("an object", '{"ids": [104]}'), ("not JSON", "hello"), ("an unclosed array", "[104, 105"), ("trailing garbage", "[104] x"),
                      ("arrays nested 100,000 deep", "[" * 100000 + "]" * 100000),
                      ("a 2,000,000-id array with one bad id at the end", "[" + "104," * 2000000 + "262]")):
        N[0] += 1
        f = write("ids%03d.json" % N[0], ids.encode())
        h.attempt("--decode " + what, base + ["--decode", "--file", f], codes=(3,), must_say=f)
        h.attempt("--batch --decode " + what, base + ["--batch", "--decode", "--file", f], codes=(3,), must_say=f)
    for what, line in (("a number", "5"), ("an array", '["a"]'), ("arrays nested 100,000 deep", "[" * 100000),
                       ("invalid UTF-8", b'"a\xffb"'), ("a lone surrogate", '"a\\ud800b"'),
                       ("a JSON string holding invalid UTF-8 as escapes", '"\\udc80"')):
        N[0] += 1
        f = write("batch%03d.txt" % N[0], b'"ok"\n' + (line if isinstance(line, bytes) else line.encode()) + b"\n")
        h.attempt("--batch line 2 is " + what, base + ["--batch", "--file", f], codes=(3,), must_say="line 2")
    f = write("badutf8.txt", b"ab\xc3(")
    h.attempt("--file with invalid UTF-8", base + ["--file", f], codes=(3,), must_say="byte offset 2")
    return h


def valid_oddities():
    """Odd but valid files load and work; what they encode is checked against a hand computation."""
    p = write("empty-match.json", edit(pre(split("a*"))))
    try:
        r = kv("tokenize", "--tokenizer", p, "--text", "bab" * 2000, "--no-special", timeout=30)
        ok = r.returncode == 0 and len(json.loads(r.stdout)) > 0
        check(ok, "a regex matching the empty string does not loop", r.stderr.decode()[-300:])
    except subprocess.TimeoutExpired:
        check(False, "a regex matching the empty string does not loop", "timed out")
    p = write("lookahead-empty.json", edit(pre(split("(?=b)"))))
    r = kv("tokenize", "--tokenizer", p, "--text", "abab", "--no-special", timeout=30)
    check(r.returncode == 0 and json.loads(r.stdout) == [97, 98, 97, 98], "an always-empty regex (lookahead)",
          r.stdout.decode() + r.stderr.decode())
    holes = edit(lambda t: t["model"]["vocab"].update({"hello": 300}))
    p = write("holes.json", holes)
    r = kv("tokenize", "--tokenizer", p, "--text", "hello", "--no-special")
    check(r.returncode == 0 and json.loads(r.stdout) == [300], "vocabulary ids with holes load", r.stderr.decode())
    r = kv("tokenize", "--tokenizer", p, "--text", "[104, 280]", "--decode")
    check(r.returncode in (0, 3) and r.stderr.decode().count("\n") == (r.returncode == 3),
          "--decode of a hole's id: no crash (the hole decodes as nothing)", r.stderr.decode())
    big = good()
    for i in range(300000):
        big["model"]["vocab"]["\u4e00" * 2 + "%d" % i] = 262 + i
    p = write("big.json", big)
    r = kv("tokenize", "--tokenizer", p, "--text", "hello world", "--no-special", timeout=120)
    check(r.returncode == 0 and json.loads(r.stdout) == [260, 259, 111, 114, 108, 100],
          "a 300,262-token vocabulary loads and encodes", r.stderr.decode())


def main():
    r = kv("tokenize", "--tokenizer", write("good.json", good()), "--text", "hello world")
    check(r.returncode == 0 and json.loads(r.stdout) == [261, 260, 259, 111, 114, 108, 100],
          "the unmodified tokenizer works", r.stdout.decode() + r.stderr.decode())
    structure()
    semantic()
    resource()
    inputs()
    valid_oddities()
    hostile.report()
    shutil.rmtree(T, ignore_errors=True)
    sys.exit(finish())


if __name__ == "__main__":
    main()
