"""make bench (tokenizer, docs/tokenize.md): `kvtrace tokenize` MB/s on a 10 MB text against the reference
encoders of the tests, in the same run, with the ids checked to be identical.

The text: the corpus strings of tests/tokenizers/fixtures/corpus.json.gz (2,429 strings: prose,
code, numbers, whitespace runs, CJK, Arabic, emoji, special-token look-alikes; the invalid UTF-8
cases are kept apart there and not used), shuffled with random.Random(16) and appended round
after round until the next string would pass BENCH_TOKENIZE_MB * 10^6 bytes (default 10), joined
by newlines: about 60 copies of each string, so the word cache is used as on real text.

For each tokenizer (llama3_1, qwen3; tests/lib/fetch_tokenizers.sh):
  - kvtrace: `kvtrace tokenize --tokenizer T --file TEXT --no-special` (ids written to a file),
    timed as a whole (best of 3: the machines are shared); the load time is that of the same
    command on the text "a" (best of 3), and encode = whole - load (writing the 3.3M ids as JSON is counted in encode);
  - each reference (ref_hf: @huggingface/tokenizers, ref_lenml: @lenml/tokenizers; run by node,
    bench/bench_tokenize_ref.mjs): encode(text, add_special_tokens=false) timed inside node;
  - the id sequences must be identical: a mismatch prints a MISMATCH line with the first
    differing position and the bench exits 1 after the other rows.
MB/s = text bytes / 10^6 / encode seconds; ratio = kvtrace MB/s / the reference's.

    /usr/bin/python3 bench/bench_tokenize.py [BUILD_DIR]
Environment: BENCH_TOKENIZE_MB (10), BENCH_TOKENIZE_IDS ("llama3_1 qwen3"),
BENCH_TOKENIZE_REFS ("ref_hf ref_lenml"), KVTRACE (the binary; default BUILD_DIR/kvtrace).
Without the tokenizer files or node: one "bench-tokenize: skipped: REASON" line, exit 0, as
bench_gpu.sh skips without a GPU."""
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, BUILD, "kvtrace")
MB = float(os.environ.get("BENCH_TOKENIZE_MB", "10"))
IDS = os.environ.get("BENCH_TOKENIZE_IDS", "llama3_1 qwen3").split()
REFS = os.environ.get("BENCH_TOKENIZE_REFS", "ref_hf ref_lenml").split()
SEED = 16


def make_text(path):
    """The bench text (see above) into path; its size in bytes."""
    with gzip.open(os.path.join(ROOT, "tests", "tokenizers", "fixtures", "corpus.json.gz"), "rt",
                   encoding="utf-8") as f:
        strings = json.load(f)["strings"]
    rng, limit, out, n = random.Random(SEED), int(MB * 1e6), [], -1
    while True:
        order = strings[:]
        rng.shuffle(order)
        for s in order:
            b = len(s.encode("utf-8")) + 1  # with its newline (none after the last)
            if n + b > limit:
                data = "\n".join(out).encode("utf-8")
                with open(path, "wb") as f:
                    f.write(data)
                return len(data)
            out.append(s)
            n += b


def skip(reason):
    print("bench-tokenize: skipped: " + reason)
    sys.exit(0)


def fetch():
    """{id: directory} of the tokenizers and encoders, or skip with the fetch script's lines."""
    r = subprocess.run([os.path.join(ROOT, "tests", "lib", "fetch_tokenizers.sh"), *IDS, *REFS],
                       capture_output=True, text=True)
    if r.returncode != 0:
        skip(" ".join(r.stderr.strip().splitlines()))
    return dict(line.split(" ", 1) for line in r.stdout.splitlines())


def kvtrace(tok, args, out_path):
    """Seconds of one `kvtrace tokenize` run, stdout to out_path; exits on failure."""
    t0 = time.perf_counter()
    with open(out_path, "wb") as out:
        r = subprocess.run([KV, "tokenize", "--tokenizer", tok, "--no-special", *args], stdout=out,
                           stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        print("bench-tokenize: FAILED: kvtrace tokenize exited %d: %s" % (r.returncode, r.stderr.decode().strip()))
        sys.exit(1)
    return dt


def reference(ref, enc_dir, tok_dir, text, out_path):
    """(load s, encode s) of one reference encoder run by node; exits on failure."""
    r = subprocess.run(["node", os.path.join(ROOT, "bench", "bench_tokenize_ref.mjs"), ref, enc_dir, tok_dir, text,
                        out_path], capture_output=True, text=True)
    if r.returncode != 0:
        print("bench-tokenize: FAILED: %s: %s" % (ref, (r.stderr.strip() or r.stdout.strip())[-300:]))
        sys.exit(1)
    v = r.stdout.split()
    return float(v[v.index("load_s") + 1]), float(v[v.index("encode_s") + 1])


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def bench_one(tid, dirs, text, size, tmp):
    """Prints the rows of one tokenizer; returns False on an id mismatch."""
    tok = os.path.join(dirs[tid], "tokenizer.json")
    load = min(kvtrace(tok, ["--text", "a"], os.path.join(tmp, "load.json")) for _ in range(3))
    ids_path = os.path.join(tmp, tid + ".kvtrace.json")
    whole = min(kvtrace(tok, ["--file", text], ids_path) for _ in range(3))
    with open(ids_path, encoding="utf-8") as f:
        ids = json.load(f)
    enc = max(whole - load, 1e-6)
    rows, ok = [("kvtrace", load, enc, len(ids))], True
    for ref in REFS:
        ref_path = os.path.join(tmp, tid + "." + ref + ".json")
        rload, renc = reference(ref, dirs[ref], dirs[tid], text, ref_path)
        with open(ref_path, encoding="utf-8") as f:
            want = json.load(f)
        if want != ids:
            i = first_difference(ids, want)
            print("bench-tokenize: MISMATCH: %s: kvtrace gave %d ids, %s %d; first difference at id %d: "
                  "kvtrace %s, %s %s" % (tid, len(ids), ref, len(want), i, ids[i:i + 5], ref, want[i:i + 5]))
            ok = False
        rows.append((ref, rload, renc, len(want)))
    mbs = {name: size / 1e6 / e for name, _, e, _ in rows}
    for name, l, e, n in rows:
        ratios = "  ".join("%7.2fx %s" % (mbs["kvtrace"] / mbs[r], r) for r in REFS if name == "kvtrace")
        print(("%-10s %-10s %8.2f %9.2f %8.2f %9d  %s" % (tid, name, l, e, mbs[name], n, ratios)).rstrip())
    return ok


def main():
    if not os.access(KV, os.X_OK):
        skip("no kvtrace binary at %s" % KV)
    if REFS and not shutil.which("node"):
        skip("node is not installed (the reference encoders run on it)")
    dirs = fetch()
    tmp = tempfile.mkdtemp(prefix="kvtrace_bench_tok")
    try:
        text = os.path.join(tmp, "text.txt")
        size = make_text(text)
        print("# text: %d bytes (%.1f MB), corpus strings shuffled with seed %d; ids checked identical"
              % (size, size / 1e6, SEED))
        print("%-10s %-10s %8s %9s %8s %9s  %s" % ("tokenizer", "encoder", "load_s", "encode_s", "MB/s", "tokens",
                                                   "kvtrace/reference"))
        ok = True
        for tid in IDS:
            ok = bench_one(tid, dirs, text, size, tmp) and ok
        print("(kvtrace: best of 3 whole --file runs less the best of 3 loads (a 1-byte run); references: one "
              "encode() inside node, add_special_tokens false)")
        if not ok:
            sys.exit(1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
