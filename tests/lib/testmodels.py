"""Every test model file made from the one GGUF (stories260K.gguf), by our own
code and independent of kvtrace's C code:

- derived/stories260K.bin: a llama2.c legacy checkpoint. A header of 7 int32
  (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; vocab_size
  negative when the classifier is not the embedding), then float32 weights in
  llama2.c's order: tok_emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3,
  rms_final, freq_cis_real, freq_cis_imag [seq_len][head_dim / 2] (and the
  classifier when not shared). GGUF matrices are row-major W[out][in], as
  llama2.c's, so they are copied byte for byte.
- derived/tok512.bin: a llama2.c tokenizer, made as llama2.c's `tokenizer.py
  export` makes it: uint32 max_token_length, then per token a float32 score, a
  uint32 length and the bytes; "\u2581" becomes " ", BOS "\\n<s>\\n", EOS "\\n</s>\\n".
- stories260K.golden.json: reference values from a float64 numpy forward pass
  (hfmodel.forward_all) and a SentencePiece-BPE encoder written from llama2.c's
  algorithm (dummy-prefix space, codepoints or byte fallback, then merging the
  best-scored pair, leftmost on ties, until none is in the vocabulary).

    /usr/bin/python3 tests/lib/testmodels.py GGUF OUTDIR

writes OUTDIR/{stories260K.gguf (a copy), derived/stories260K.bin,
derived/tok512.bin, stories260K.golden.json} through a temporary directory
renamed into place, so OUTDIR is complete or absent."""
import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ggufio  # noqa: E402
import hfmodel  # noqa: E402

SEQ_LEN = 512  # stories260K was trained with 512 (the GGUF's context_length 2048 is the converter's default)
FORWARD_TOKENS = [1, 403, 407, 261, 378, 432, 383, 286]
TOKENIZE_TEXT = "Once upon a time, there was a little girl named Lily."
GREEDY_NEW = 60
ABOUT = ("Reference values computed with an independent float64 forward pass of stories260K.gguf (llama "
         "architecture: RMSNorm eps 1e-5, RoPE theta 10000 on interleaved pairs (x[2i], x[2i+1]), GQA with "
         "query head h using kv head h // 2, SwiGLU, no bias, untied output). Keys/queries are post-RoPE, "
         "laid out [layer][head][position][dim].")
COLSUM_ABOUT = "sum over query positions i >= j of the full causal attention weight a[i][j]"


class Model:
    """The GGUF's llama config, float32 tensors (rows = ne1) and vocabulary."""

    def __init__(self, path):
        self.meta, self.t = ggufio.read(path)
        m = self.meta
        arch = m["general.architecture"]
        if arch != "llama":
            raise ValueError("%s: architecture %r, not llama" % (path, arch))
        g = lambda k: m["%s.%s" % (arch, k)]
        self.dim, self.hidden, self.n_layers = g("embedding_length"), g("feed_forward_length"), g("block_count")
        self.n_heads = g("attention.head_count")
        self.n_kv = m.get("llama.attention.head_count_kv", self.n_heads)
        self.eps = g("attention.layer_norm_rms_epsilon")
        self.theta = m.get("llama.rope.freq_base", 10000.0)
        self.pieces = m["tokenizer.ggml.tokens"]
        self.scores = m["tokenizer.ggml.scores"]
        self.vocab = len(self.pieces)
        self.head_dim = self.dim // self.n_heads
        if g("rope.dimension_count") != self.head_dim:
            raise ValueError("%s: partial RoPE is not supported here" % path)

    def layer(self, l, name):
        return self.t["blk.%d.%s.weight" % (l, name)]

    def classifier(self):
        return self.t.get("output.weight", self.t["token_embd.weight"])

    def cfg(self):
        return {"hidden_size": self.dim, "intermediate_size": self.hidden, "num_hidden_layers": self.n_layers,
                "num_attention_heads": self.n_heads, "num_key_value_heads": self.n_kv, "vocab_size": self.vocab,
                "rms_norm_eps": self.eps, "rope_theta": self.theta}

    def weights(self):
        """hfmodel's weight dict; GGUF llama Q/K rows are already in the interleaved RoPE order."""
        w = {"embed": self.t["token_embd.weight"], "norm": self.t["output_norm.weight"],
             "lm_head": self.classifier(), "layers": []}
        names = {"attn_norm": "attn_norm", "wq": "attn_q", "wk": "attn_k", "wv": "attn_v", "wo": "attn_output",
                 "ffn_norm": "ffn_norm", "wg": "ffn_gate", "wu": "ffn_up", "wd": "ffn_down"}
        for l in range(self.n_layers):
            w["layers"].append({k: self.layer(l, n) for k, n in names.items()})
        return w


# ---- llama2.c files -------------------------------------------------------------

def freq_cis(head_dim, seq_len, theta):
    """(cos, sin) [seq_len][head_dim / 2] as llama2.c's export computes them in float32:
    freqs = 1 / theta^(2i/d), angles t * freqs rounded to float32, then cos and sin
    (here in float64, rounded once to float32)."""
    i = np.arange(0, head_dim, 2, dtype=np.float32)[: head_dim // 2] / np.float32(head_dim)
    freqs = (np.float32(1.0) / np.power(np.float32(theta), i).astype(np.float32)).astype(np.float32)
    ang = (np.arange(seq_len, dtype=np.float32)[:, None] * freqs[None, :]).astype(np.float32)
    a = ang.astype(np.float64)
    return np.cos(a).astype(np.float32), np.sin(a).astype(np.float32)


def llama2c_checkpoint(m, seq_len=SEQ_LEN):
    """The llama2.c legacy checkpoint's bytes."""
    shared = np.array_equal(m.classifier(), m.t["token_embd.weight"])
    head = struct.pack("<7i", m.dim, m.hidden, m.n_layers, m.n_heads, m.n_kv,
                       m.vocab if shared else -m.vocab, seq_len)
    parts = [m.t["token_embd.weight"]]
    per_layer = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_down",
                 "ffn_up"]
    for name in per_layer:  # llama2.c: each kind for all layers, then the next kind
        parts += [m.layer(l, name) for l in range(m.n_layers)]
    parts.append(m.t["output_norm.weight"])
    parts += list(freq_cis(m.head_dim, seq_len, m.theta))
    if not shared:
        parts.append(m.classifier())
    return head + b"".join(np.ascontiguousarray(p, dtype="<f4").tobytes() for p in parts)


def llama2c_strings(m):
    """The tokenizer strings as llama2.c's export writes them (bytes)."""
    bos, eos = m.meta.get("tokenizer.ggml.bos_token_id", 1), m.meta.get("tokenizer.ggml.eos_token_id", 2)
    out = []
    for i, p in enumerate(m.pieces):
        p = "\n<s>\n" if i == bos else "\n</s>\n" if i == eos else p
        out.append(p.replace("\u2581", " ").encode("utf-8"))
    return out


def llama2c_tokenizer(m):
    """tok512.bin's bytes: max_token_length, then (score, length, bytes) per token."""
    strings = llama2c_strings(m)
    body = b"".join(struct.pack("<fI", s, len(b)) + b for s, b in zip(m.scores, strings))
    return struct.pack("<I", max(len(b) for b in strings)) + body


# ---- SentencePiece BPE as llama2.c encodes ----------------------------------------

def codepoints(data):
    """Split UTF-8 bytes as llama2.c does: a leading byte and at most 3 continuation bytes."""
    out, i = [], 0
    while i < len(data):
        j = i + 1
        while j < len(data) and data[j] & 0xC0 == 0x80 and j - i < 4:
            j += 1
        out.append(data[i:j])
        i = j
    return out


def spm_encode(strings, scores, text, bos=True):
    """Token ids of text (str) under llama2.c-style strings (bytes) and scores."""
    index = {}
    for i, s in enumerate(strings):
        index.setdefault(s, i)
    ids = [1] if bos else []
    data = text.encode("utf-8")
    if not data:
        return ids
    toks = [index[b" "]]
    for cp in codepoints(data):
        toks += [index[cp]] if cp in index else [b + 3 for b in cp]
    while True:
        best, best_i = None, -1
        for i in range(len(toks) - 1):
            j = index.get(strings[toks[i]] + strings[toks[i + 1]])
            if j is not None and (best is None or scores[j] > scores[best]):
                best, best_i = j, i
        if best is None:
            return ids + toks
        toks[best_i: best_i + 2] = [best]


def decode(m, ids):
    """The pieces' text, "\u2581" as a space and byte tokens as their bytes (no space stripped)."""
    out = b""
    for i in ids:
        p = m.pieces[i]
        if len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
            out += bytes([int(p[3:5], 16)])
        else:
            out += p.replace("\u2581", " ").encode("utf-8")
    return out.decode("utf-8", errors="replace")


# ---- the golden values ----------------------------------------------------------------

def greedy(m, w, cfg, n_new):
    """BOS and n_new greedy tokens (argmax of the float64 logits)."""
    ids = [1]
    for _ in range(n_new):
        logits = hfmodel.forward_all(w, cfg, ids, style="interleaved")["logits"]
        ids.append(int(np.argmax(logits[-1])))
    return ids


def g6(a):
    """An array as a flat list of 6-significant-digit numbers."""
    return [float("%.6g" % x) for x in np.asarray(a, dtype=np.float64).ravel()]


def tensor(a, about=None):
    d = {"shape": list(np.shape(a))}
    if about:
        d["about"] = about
    d["data"] = g6(a)
    return d


def golden(m):
    w, cfg = m.weights(), m.cfg()
    strings = llama2c_strings(m)
    g = greedy(m, w, cfg, GREEDY_NEW)
    r = hfmodel.forward_all(w, cfg, FORWARD_TOKENS, style="interleaved")
    return {"model": "stories260K.gguf", "about": ABOUT,
            "tokenize": {"text": TOKENIZE_TEXT, "tokens_with_bos": spm_encode(strings, m.scores, TOKENIZE_TEXT)},
            "greedy_from_bos": {"n_new": GREEDY_NEW, "tokens": g, "text": decode(m, g[1:])},
            "forward": {"tokens": FORWARD_TOKENS, "logits": tensor(r["logits"]), "keys": tensor(r["keys"]),
                        "queries": tensor(r["queries"]), "values": tensor(r["values"]),
                        "attention_colsum": tensor(r["colsum"], COLSUM_ABOUT)}}


def write(gguf, outdir):
    """Makes outdir (see the module's text); returns it."""
    m = Model(gguf)
    tmp = "%s.tmp.%d" % (outdir.rstrip("/"), os.getpid())
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "derived"))
    try:
        shutil.copyfile(gguf, os.path.join(tmp, "stories260K.gguf"))
        with open(os.path.join(tmp, "derived", "stories260K.bin"), "wb") as f:
            f.write(llama2c_checkpoint(m))
        with open(os.path.join(tmp, "derived", "tok512.bin"), "wb") as f:
            f.write(llama2c_tokenizer(m))
        with open(os.path.join(tmp, "stories260K.golden.json"), "w") as f:
            json.dump(golden(m), f, indent=1)
        os.rename(tmp, outdir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return outdir


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: testmodels.py GGUF OUTDIR")
    write(sys.argv[1], sys.argv[2])
