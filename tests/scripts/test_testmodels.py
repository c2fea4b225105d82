"""The test models tests/run_all.sh made from stories260K.gguf (tests/lib/testmodels.py,
in $KVTRACE_MODEL_DIR) against what is documented about them: the published GGUF,
the llama2.c tokenizer export's sha256, the checkpoint's header, size and weight
order (read back here, independently of the writer), and the golden values'
greedy continuation, tokenization and layouts; the attention column sums add up
to one per query row. Skipped (TAP # SKIP) without the model. TAP."""
import hashlib
import json
import math
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ggufio  # noqa: E402
import testmodels  # noqa: E402
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402

GGUF_SHA256 = "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d"
GGUF_BYTES = 1185376
TOK_SHA256 = "037cb335abb25d1fa9e8ecae30ed2a3a8ace9302862ebcdc05d51a6bbb10c312"
BIN_BYTES = 1056540
# the documented greedy continuation from BOS (llama2.c run -t 0.0), its first 64 ids after BOS
GREEDY = [403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410,
          408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388,
          426, 338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13, 438, 310]
GREEDY_TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, "
               "she saw a big, red ball. She wanted to play with it, but it was too high")
ONCE = [1, 403, 407, 261, 378]  # "Once upon a time"
SENTENCE = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426]


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def read_tokenizer(path):
    """(max_token_length, [(score, bytes)]) of a llama2.c tokenizer file."""
    b = open(path, "rb").read()
    (max_len,), pos, out = struct.unpack_from("<I", b), 4, []
    while pos < len(b):
        score, n = struct.unpack_from("<fI", b, pos)
        out.append((score, b[pos + 8: pos + 8 + n]))
        pos += 8 + n
    return max_len, out


def tokenizer(meta):
    path = model_file("derived/tok512.bin")
    check(sha256(path) == TOK_SHA256, "derived/tok512.bin: the documented sha256 of llama2.c's export (%s...)"
          % TOK_SHA256[:12], sha256(path))
    max_len, toks = read_tokenizer(path)
    pieces, scores = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.scores"]
    want = [p.replace("\u2581", " ").encode() for p in pieces]
    want[1], want[2] = b"\n<s>\n", b"\n</s>\n"
    check(max_len == 7 and [t[1] for t in toks] == want and [t[0] for t in toks] == list(np.float32(scores)),
          "derived/tok512.bin read back: 512 tokens, max length 7, BOS/EOS and spaces as llama2.c exports them, "
          "the GGUF's scores", "max_len %d, %d tokens" % (max_len, len(toks)))
    strings = [t[1] for t in toks]
    scores = [t[0] for t in toks]
    got = testmodels.spm_encode(strings, scores, "Once upon a time")
    check(got == ONCE, "llama2.c-style encoding with tok512.bin: 'Once upon a time' -> %s" % ONCE, got)


def checkpoint(meta, t):
    path = model_file("derived/stories260K.bin")
    b = open(path, "rb").read()
    head = struct.unpack_from("<7i", b)
    check(len(b) == BIN_BYTES and head == (64, 172, 5, 8, 4, 512, 512),
          "derived/stories260K.bin: %d bytes, header dim 64, hidden 172, 5 layers, 8 heads, 4 kv heads, "
          "vocab 512 (shared classifier), seq_len 512" % BIN_BYTES, "%d bytes, header %s" % (len(b), head))
    pos, bad = 28, []
    order = [("token_embd.weight", None)] + [(n, l) for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                                              "ffn_norm", "ffn_gate", "ffn_down", "ffn_up")
                                             for l in range(5)] + [("output_norm.weight", None)]
    for name, l in order:
        a = t[name] if l is None else t["blk.%d.%s.weight" % (l, name)]
        got = np.frombuffer(b, dtype="<f4", count=a.size, offset=pos)
        if not np.array_equal(got.view(np.uint32), np.ascontiguousarray(a, dtype="<f4").ravel().view(np.uint32)):
            bad.append(name if l is None else "%s[%d]" % (name, l))
        pos += 4 * a.size
    check(not bad and np.array_equal(t["output.weight"], t["token_embd.weight"]),
          "derived/stories260K.bin: every weight bitwise the GGUF's, in llama2.c's order (w1 gate, w2 down, w3 up)",
          bad)
    fc = np.frombuffer(b, dtype="<f4", count=2 * 512 * 4, offset=pos).reshape(2, 512, 4)
    ulps = 0
    for p in range(512):
        for i in range(4):
            ang = float(np.float32(p) * np.float32(1.0 / 10000.0 ** (i / 4.0)))
            for k, ref in ((0, math.cos(ang)), (1, math.sin(ang))):
                d = abs(int(fc[k, p, i].view(np.int32)) - int(np.float32(ref).view(np.int32)))
                ulps = max(ulps, d)
    check(ulps <= 1 and pos + fc.nbytes == len(b),
          "derived/stories260K.bin: freq_cis_real/imag [512][4] = cos/sin of pos * 10000^(-2i/8) within 1 ulp, "
          "then the end of the file", "max %d ulp" % ulps)


def golden():
    g = json.load(open(model_file("stories260K.golden.json")))
    gr = g["greedy_from_bos"]
    check(gr["n_new"] == 60 and gr["tokens"] == [1] + GREEDY[:60],
          "golden greedy_from_bos: BOS and the 60 documented greedy ids", gr["tokens"])
    check(gr["text"] == " " + GREEDY_TEXT, "golden greedy text: the documented story, dummy-prefix space kept",
          repr(gr["text"]))
    tk = g["tokenize"]
    check(tk["tokens_with_bos"] == SENTENCE and tk["text"] == GREEDY_TEXT[:53],
          "golden tokenize: '%s' -> the documented ids" % GREEDY_TEXT[:53], tk)
    f = g["forward"]
    shapes = {"logits": [8, 512], "keys": [5, 4, 8, 8], "queries": [5, 8, 8, 8], "values": [5, 4, 8, 8],
              "attention_colsum": [5, 8, 8]}
    check(f["tokens"] == [1] + GREEDY[:7] and all(f[k]["shape"] == s and len(f[k]["data"]) == int(np.prod(s))
                                                  for k, s in shapes.items()),
          "golden forward: the 8 greedy tokens; logits, keys, queries, values, colsum in their layouts",
          {k: f[k]["shape"] for k in shapes})
    logits = np.array(f["logits"]["data"]).reshape(8, 512)
    check(list(np.argmax(logits, 1)) == GREEDY[:8], "golden forward: each position's argmax is the next greedy id",
          list(np.argmax(logits, 1)))
    cs = np.array(f["attention_colsum"]["data"]).reshape(5, 8, 8)
    j = np.arange(8)
    check(np.allclose(cs.sum(2), 8, atol=1e-4) and (cs > 0).all() and (cs <= 8 - j + 1e-5).all(),
          "golden colsum: every head's column sums add up to T = 8 (one per query row), column j at most 8 - j",
          cs.sum(2))


def main():
    gguf = model_file()
    if not gguf:
        skip("the test models made from stories260K.gguf", NO_MODEL)
        return finish()
    check(os.path.getsize(gguf) == GGUF_BYTES and sha256(gguf) == GGUF_SHA256,
          "stories260K.gguf is the published file (%d bytes, sha256 %s...)" % (GGUF_BYTES, GGUF_SHA256[:12]),
          sha256(gguf))
    meta, t = ggufio.read(gguf)
    tokenizer(meta)
    checkpoint(meta, t)
    golden()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
