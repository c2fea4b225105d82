"""`kvtrace tokenize` against the reference encoders (docs/tokenize.md#how-it-is-checked): for every string of the corpus
(tests/tokenizers/corpus.py, 2,429 strings) and each real tokenizer.json (Llama 3.1, Qwen 3,
DeepSeek V3, GPT-4o, and the SentencePiece-style Mistral 7B, also in its Metaspace form;
tests/tokenizers/SOURCES.md), the ids with and without special tokens,
the pieces and decode(encode(s)) must equal what @lenml/tokenizers (a transformers.js fork,
itself checked against @huggingface/tokenizers) gave: tests/tokenizers/fixtures/, made by
tests/tokenizers/make_fixtures.mjs. Prints the match rate per tokenizer and mode; a check
passes at 100% only. Also: --offsets, where given, are byte spans of the input whose bytes
are the token's (tokenizers without a normaliser), and invalid UTF-8 is refused with exit 3
naming the offset of the first bad byte.

The tokenizer.json files are fetched by tests/lib/fetch_tokenizers.sh (user cache, sha256);
when they cannot be had, the run fails with its line. While kvtrace has no `tokenize` verb
every check is a SKIP with that reason, never a pass.

    KVTRACE=build/kvtrace /usr/bin/python3 tests/scripts/test_tokenize_reference.py
    /usr/bin/python3 tests/scripts/test_tokenize_reference.py build   (the same)

Many strings in one process: when `kvtrace tokenize --help` lists `--batch`, each mode is one
run over a JSON Lines file (in: one JSON string per line, or for --decode one JSON array of
ids; out: one JSON value per line, an array, or for --decode the text as a JSON string);
otherwise one run per string, in parallel.

The invalid UTF-8 cases (one run each, in parallel) use Llama 3.1's tokenizer.json; under ASan (the
build-asan leg, tap.sanitized) DeepSeek V3's, which loads in half the time there: both are byte-level
BPE, whose encoder (bpe_encode) checks the UTF-8 before any step of its own tokenizer, so the C path
is the same."""
import concurrent.futures
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish, sanitized, skip  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "tokenizers", "fixtures")
TOKENIZERS = ["llama3_1", "qwen3", "deepseek_v3", "gpt4o", "mistral", "mistral_metaspace"]
# Under ASan the corpus runs through one tokenizer of each kind of C path (byte-level BPE with two
# pre-tokenizer regexes, SentencePiece-style with its normaliser and in its Metaspace form): Llama 3.1's
# and GPT-4o's byte-level BPE take the same paths as Qwen 3's and DeepSeek V3's, and the normal leg runs all.
ASAN_TOKENIZERS = ["qwen3", "deepseek_v3", "mistral", "mistral_metaspace"]
# made from a fetched tokenizer.json as tests/tokenizers/make_fixtures.mjs makes them (DERIVED there)
DERIVED = {"mistral_metaspace": ("mistral", lambda tj: {**tj, "normalizer": None, "pre_tokenizer": {
    "type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}})}
NO_NORMALISER = {"llama3_1", "deepseek_v3", "gpt4o"}
TMP = tempfile.mkdtemp(prefix="kvtrace-tokref-")
KVTRACE = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build",
                                                     "kvtrace")


def load(name):
    with gzip.open(os.path.join(FIXTURES, name + ".json.gz"), "rt", encoding="utf-8") as f:
        return json.load(f)


def verb_help():
    """kvtrace tokenize --help: (text, None), or (None, the reason to skip)."""
    if not os.access(KVTRACE, os.X_OK):
        return None, "no kvtrace binary at %s" % KVTRACE
    r = subprocess.run([KVTRACE, "tokenize", "--help"], capture_output=True, text=True)
    if "unknown verb" in r.stderr:
        return None, "kvtrace has no tokenize verb yet: %s" % r.stderr.strip()
    return r.stdout + r.stderr, None


def fetch():
    """{id: tokenizer.json path}, or (None, the fetch script's error lines)."""
    ids = sorted({DERIVED[t][0] if t in DERIVED else t for t in TOKENIZERS})
    r = subprocess.run([os.path.join(ROOT, "tests", "lib", "fetch_tokenizers.sh"), *ids],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    paths = {line.split(" ", 1)[0]: os.path.join(line.split(" ", 1)[1], "tokenizer.json")
             for line in r.stdout.splitlines()}
    for tid, (src, edit) in DERIVED.items():
        with open(paths[src], encoding="utf-8") as f:
            tj = edit(json.load(f))
        paths[tid] = os.path.join(TMP, tid + ".tokenizer.json")
        with open(paths[tid], "w", encoding="utf-8") as f:
            json.dump(tj, f)
    return paths, None


def run_one(tok, data, flags):
    """One string (bytes) through kvtrace tokenize --file: (rc, stdout, stderr)."""
    with tempfile.NamedTemporaryFile(suffix=".txt") as f:
        f.write(data)
        f.flush()
        r = subprocess.run([KVTRACE, "tokenize", "--tokenizer", tok, "--file", f.name, *flags],
                           capture_output=True)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def parse_json(text):
    try:
        return json.loads(text)
    except ValueError as e:
        return ("error", "not JSON (%s): %r" % (e, text[:200]))


def parse_decode(out):
    return out[:-1] if out.endswith("\n") else out


def run_all(tok, inputs, flags, batch):
    """Every input (str, or a list of ids for --decode) through kvtrace: a list of results
    (the parsed JSON array, the decoded text) or ("error", message) tuples."""
    decode = "--decode" in flags
    if batch:
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8") as f:
            for x in inputs:
                f.write(json.dumps(x) + "\n")  # a JSON string, or for --decode an array of ids
            f.flush()
            r = subprocess.run([KVTRACE, "tokenize", "--tokenizer", tok, "--batch", "--file", f.name, *flags],
                               capture_output=True, text=True)
        if r.returncode != 0:
            return [("error", "batch run exit %d: %s" % (r.returncode, r.stderr.strip()))] * len(inputs)
        lines = r.stdout.split("\n")  # not splitlines(): U+2028 and friends may stand inside a line
        out = [parse_json(x) for x in lines[:len(inputs)]]
        return out + [("error", "no output line")] * (len(inputs) - len(out))

    def one(x):
        data = json.dumps(x).encode() if decode else x.encode("utf-8")
        rc, out, err = run_one(tok, data, flags)
        if rc != 0:
            return ("error", "exit %d: %s" % (rc, err.strip()))
        return parse_decode(out) if decode else parse_json(out)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        return list(ex.map(one, inputs))


def rate(tid, what, got, want, strings):
    """One check: got == want for every string; prints the match rate."""
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    n = len(want)
    print("# %s %s: %d/%d match (%.2f%%)" % (tid, what, n - len(bad), n, 100.0 * (n - len(bad)) / n))
    return check(not bad, "%s: %s match the reference on all %d strings" % (tid, what, n),
                 lambda: "\n".join("string %d %r:\n  got  %s\n  want %s" % (
                     i, strings[i][:80], str(got[i])[:200], str(want[i])[:200]) for i in bad[:4]))


def byte_decoder():
    """The GPT-2 byte-to-unicode map, inverted: piece character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def check_offsets(tid, tok, strings, fx, batch):
    """--offsets --no-special: one [start, end) per token, in order, within the input, and for
    ordinary tokens the input bytes there are the piece's bytes."""
    got = run_all(tok, strings, ["--offsets", "--no-special"], batch)
    pieces = run_all(tok, strings, ["--pieces", "--no-special"], batch)
    dec = byte_decoder()
    bad = []
    for i, s in enumerate(strings):
        data, offs, ps = s.encode("utf-8"), got[i], pieces[i]
        ok = isinstance(offs, list) and isinstance(ps, list) and len(offs) == len(fx["ids_nospecial"][i])
        end = 0
        for k, span in enumerate(offs if ok else []):
            if not (len(span) == 2 and end <= span[0] <= span[1] <= len(data)):
                ok = False
                break
            end = span[1]
            if all(c in dec for c in ps[k]) and bytes(dec[c] for c in ps[k]) != data[span[0]:span[1]]:
                ok = False
                break
        if not ok:
            bad.append(i)
    return check(not bad, "%s: --offsets are the byte spans of each token on all %d strings" % (tid, len(strings)),
                 lambda: "\n".join("string %d %r: offsets %s" % (i, strings[i][:60], str(got[i])[:160])
                                   for i in bad[:4]))


def check_invalid(tok, cases):
    """Invalid UTF-8: exit 3, one error line naming the byte offset, nothing on stdout."""
    def one(c):
        rc, out, err = run_one(tok, bytes.fromhex(c["hex"]), [])
        lines = [x for x in err.splitlines() if x.strip()]
        if not (rc == 3 and not out and len(lines) == 1 and str(c["offset"]) in lines[0]):
            return "%s (offset %d): exit %d, stdout %r, stderr %r" % (c["hex"][:24], c["offset"], rc, out[:60],
                                                                    err[:200])
        return None
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        bad = [x for x in ex.map(one, cases) if x]
    return check(not bad, "invalid UTF-8 (%d cases, %s): exit 3, one line naming the offset, no output" %
                 (len(cases), os.path.basename(os.path.dirname(tok))), "\n".join(bad[:6]))


def main():
    corpus = load("corpus")
    strings = corpus["strings"]
    help_text, reason = verb_help()
    if reason:
        for tid in TOKENIZERS:
            skip("%s: kvtrace tokenize matches the reference on %d strings" % (tid, len(strings)), reason)
        skip("invalid UTF-8 is refused with exit 3 naming the offset", reason)
        return finish()
    paths, err = fetch()
    if not check(paths is not None, "the reference tokenizer.json files can be had", err):
        return finish()
    batch = "--batch" in help_text
    print("# %s mode: %s" % ("batch" if batch else "one run per string", KVTRACE))
    for tid in ASAN_TOKENIZERS if sanitized(KVTRACE) else TOKENIZERS:
        fx, tok = load(tid), paths[tid]
        rate(tid, "ids (default: post-processor applied)", run_all(tok, strings, [], batch), fx["ids"], strings)
        rate(tid, "ids (--no-special)", run_all(tok, strings, ["--no-special"], batch), fx["ids_nospecial"],
             strings)
        rate(tid, "pieces", run_all(tok, strings, ["--pieces"], batch), fx["pieces"], strings)
        want = [s if fx["roundtrip"][i] else fx["decoded"][str(i)] for i, s in enumerate(strings)]
        rate(tid, "--decode of the --no-special ids", run_all(tok, fx["ids_nospecial"], ["--decode"], batch),
             want, strings)
        if tid in NO_NORMALISER and "--offsets" in help_text:
            check_offsets(tid, tok, strings, fx, batch)
    check_invalid(paths["deepseek_v3" if sanitized(KVTRACE) else "llama3_1"], corpus["invalid_utf8"])
    return finish()


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
