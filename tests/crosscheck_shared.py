"""make crosscheck: the test models tests/lib/testmodels.py makes, against the
trusted copies in ../shared/models beside this checkout (where CI and the
project's machines have them): made afresh from ../shared/models/stories260K.gguf,
derived/tok512.bin must be byte-identical; derived/stories260K.bin byte-identical
up to its freq_cis tail (no llama2.c reader uses it; PyTorch's float32 cos/sin
made the shared one, ours is correctly rounded, so a value may differ by 1 ulp);
stories260K.golden.json must have the same keys, order, layouts, strings and token
ids, and our float64 forward pass (before printing) within half a unit of the 6th
significant digit of every number the shared file prints (as close as a 6-digit
rounding of a float64 result can be). Without ../shared/models it reports one
TAP # SKIP line. Not part of make test, whose count must not depend on what lies
beside the checkout. TAP."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import hfmodel  # noqa: E402
import testmodels  # noqa: E402
from tap import check, finish, skip  # noqa: E402

ROOT = os.environ.get("ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared", "models"))
FREQ_CIS_BYTES = 2 * 512 * 4 * 4  # freq_cis_real and _imag [seq_len 512][head_dim / 2 = 4], float32


def structure(a, b, path="$"):
    """The first place where the two JSON values differ in keys, key order, type or list length (or None)."""
    if isinstance(a, dict) != isinstance(b, dict) or isinstance(a, list) != isinstance(b, list):
        return path + ": different types"
    if isinstance(a, dict):
        if list(a) != list(b):
            return "%s: keys %s vs %s" % (path, list(a), list(b))
        return next((d for d in (structure(a[k], b[k], path + "." + k) for k in a) if d), None)
    if isinstance(a, list) and len(a) != len(b):
        return "%s: %d vs %d items" % (path, len(a), len(b))
    return None


def half_digit(exact, printed):
    """|exact - printed| <= half a unit of the 6th significant digit (of the larger of the two, so a value
    rounded up to the next power of ten is judged by its own digit), plus float64 rounding; returns
    (all within, the largest |difference| in units of that digit)."""
    a, b = np.asarray(exact, dtype=np.float64).ravel(), np.asarray(printed, dtype=np.float64)
    big = np.maximum(np.abs(a), np.abs(b))
    unit = 10.0 ** (np.floor(np.log10(np.where(big > 0, big, 1.0))) - 5)
    d = np.abs(a - b)
    return bool((d <= 0.5 * unit + 1e-12 * big).all()), float((d / unit).max())


def derived(mine, theirs):
    a = open(os.path.join(mine, "derived", "tok512.bin"), "rb").read()
    b = open(os.path.join(theirs, "derived", "tok512.bin"), "rb").read()
    check(a == b, "derived/tok512.bin byte-identical to ../shared/models (%d bytes)" % len(b))
    a = open(os.path.join(mine, "derived", "stories260K.bin"), "rb").read()
    b = open(os.path.join(theirs, "derived", "stories260K.bin"), "rb").read()
    n = len(b) - FREQ_CIS_BYTES
    check(len(a) == len(b) and a[:n] == b[:n],
          "derived/stories260K.bin byte-identical to ../shared/models in header and weights (%d bytes)" % n)
    fa = np.frombuffer(a[n:], dtype="<i4").astype(np.int64)
    fb = np.frombuffer(b[n:], dtype="<i4").astype(np.int64)
    ulps = np.abs(fa - fb) if len(fa) == len(fb) else np.array([99])
    print("# freq_cis tail: %d of %d values differ, by at most %d ulp; the whole file is %sbyte-identical"
          % ((ulps > 0).sum(), ulps.size, ulps.max(), "" if a == b else "not "))
    check(ulps.max() <= 1, "derived/stories260K.bin freq_cis tail (unused by llama2.c readers) within 1 ulp")


def golden(mine, theirs, gguf):
    a = json.load(open(os.path.join(mine, "stories260K.golden.json")))
    b = json.load(open(os.path.join(theirs, "stories260K.golden.json")))
    d = structure(a, b)
    check(d is None, "stories260K.golden.json: the same keys, order and layouts as ../shared/models", d)
    if d:
        return
    check(a["model"] == b["model"] and a["about"] == b["about"] and a["tokenize"]["text"] == b["tokenize"]["text"]
          and a["greedy_from_bos"]["text"] == b["greedy_from_bos"]["text"]
          and a["forward"]["attention_colsum"]["about"] == b["forward"]["attention_colsum"]["about"],
          "golden: the same texts (model, about, the sentence, the greedy text)")
    ids = [("tokenize", "tokens_with_bos"), ("greedy_from_bos", "tokens"), ("forward", "tokens")]
    check(all(a[s][k] == b[s][k] for s, k in ids) and a["greedy_from_bos"]["n_new"] == b["greedy_from_bos"]["n_new"],
          "golden: token ids exactly equal (tokenization, 60 greedy tokens, the forward input)",
          [(s, k, a[s][k], b[s][k]) for s, k in ids if a[s][k] != b[s][k]])
    m = testmodels.Model(gguf)
    r = hfmodel.forward_all(m.weights(), m.cfg(), b["forward"]["tokens"], style="interleaved")
    for k, ours in (("logits", "logits"), ("keys", "keys"), ("queries", "queries"), ("values", "values"),
                    ("attention_colsum", "colsum")):
        ok, worst = half_digit(r[ours], b["forward"][k]["data"])
        same = sum(x == y for x, y in zip(a["forward"][k]["data"], b["forward"][k]["data"]))
        check(ok and list(r[ours].shape) == b["forward"][k]["shape"],
              "golden %s: our float64 values within half a unit of the 6th digit of all %d (worst %.3f units); "
              "%d printed identically" % (k, len(b["forward"][k]["data"]), worst, same))
    same = open(os.path.join(mine, "stories260K.golden.json"), "rb").read() == \
        open(os.path.join(theirs, "stories260K.golden.json"), "rb").read()
    print("# stories260K.golden.json is %sbyte-identical to ../shared/models'" % ("" if same else "not "))


def main():
    if not os.path.isfile(os.path.join(SHARED, "stories260K.gguf")):
        skip("the generated test models against ../shared/models",
             "no ../shared/models beside this checkout (%s)" % SHARED)
        return finish()
    tmp = tempfile.mkdtemp(prefix="kvtrace-crosscheck-")
    try:
        mine = testmodels.write(os.path.join(SHARED, "stories260K.gguf"), os.path.join(tmp, "models"))
        print("# made %s from %s/stories260K.gguf" % (mine, SHARED))
        derived(mine, SHARED)
        golden(mine, SHARED, os.path.join(SHARED, "stories260K.gguf"))
    finally:
        shutil.rmtree(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
