"""capture of Hugging Face checkpoint directories written here with numpy. TAP output.

- format equivalence: stories260K.gguf rewritten as an HF directory (Q/K rows permuted
  to the rotate-half layout as transformers' convert_llama_weights_to_hf does; single
  file, shards, F32/F16/BF16) gives the GGUF's logits and attention column sums, and
  its keys with each head's dimensions in the rotate-half order;
- tiny random qwen2 (QKV bias), qwen3 (q/k norm, head_dim != hidden/heads) and llama
  with llama3 rope scaling against an independent float64 forward pass
  (tests/lib/hfmodel.py), each feature shown to change the result;
- sliding windows, unsupported architectures, tokenizer.json vocabularies;
- bad inputs: exit 3, one line naming the file, nothing left behind.
Run by tests/run_all.sh with KVTRACE and KVTRACE_MODEL_DIR set."""
import json
import os
import shutil
import struct
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ggufio  # noqa: E402
import hfmodel  # noqa: E402
from kvrun import capture, run, write_tokens  # noqa: E402
from tap import NO_MODEL, check, close, finish, skip  # noqa: E402

MODELS = os.environ.get("KVTRACE_MODEL_DIR", "")
GGUF = os.path.join(MODELS, "stories260K.gguf")
TOKENS = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267]


def permute(w, n_heads):
    """convert_llama_weights_to_hf's permute: interleaved pairs -> rotate-half halves."""
    rows, cols = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


STORIES_CFG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
               "intermediate_size": 172, "num_hidden_layers": 5, "num_attention_heads": 8,
               "num_key_value_heads": 4, "vocab_size": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
               "max_position_embeddings": 512, "hidden_act": "silu", "tie_word_embeddings": False,
               "torch_dtype": "float32"}


def stories_weights():
    g = ggufio.read(GGUF)[1]
    w = {"embed": g["token_embd.weight"], "norm": g["output_norm.weight"], "lm_head": g["output.weight"],
         "layers": []}
    for l in range(5):
        p = lambda n: g["blk.%d.%s.weight" % (l, n)]
        w["layers"].append({"attn_norm": p("attn_norm"), "wq": permute(p("attn_q"), 8),
                            "wk": permute(p("attn_k"), 4), "wv": p("attn_v"), "wo": p("attn_output"),
                            "ffn_norm": p("ffn_norm"), "wg": p("ffn_gate"), "wu": p("ffn_up"),
                            "wd": p("ffn_down")})
    return w


def stories_equivalence(tmp):
    toks = write_tokens(tmp, "stories.tokens", TOKENS)
    w = stories_weights()
    hf = os.path.join(tmp, "stories-hf")
    hfmodel.write_hf_dir(hf, STORIES_CFG, w)
    a = capture(os.path.join(tmp, "gguf.h5"), GGUF, toks, "--chunk", "7")
    b = capture(os.path.join(tmp, "hf.h5"), hf, toks, "--chunk", "7")
    check(b.attrs["rope_style"] == "neox" and a.attrs["rope_style"] == "interleaved",
          "HF directory: rope_style neox (the GGUF: interleaved)")
    check(b.attrs["architecture"] == "llama" and b.attrs["model_name"] == "stories-hf",
          "HF directory: architecture and model name", dict(b.attrs))
    close("stories HF vs GGUF: logits", b["logits"][:], a["logits"][:], 1e-4, 1e-4)
    close("stories HF vs GGUF: colsum", b["attention/colsum"][:], a["attention/colsum"][:], 1e-5, 1e-4)
    close("stories HF vs GGUF: values", b["values"][:], a["values"][:], 1e-5, 1e-5)
    D = 8
    perm = [2 * i + h for h in range(2) for i in range(D // 2)]  # neox dim j holds interleaved dim perm[j]
    close("stories HF keys = GGUF keys, each head's dims in rotate-half order", b["keys"][:],
          a["keys"][:][..., perm], 1e-4, 1e-4)
    close("stories HF queries = GGUF queries, rotate-half order", b["queries"][:], a["queries"][:][..., perm],
          1e-4, 1e-4)
    ref = a["logits"][:]
    a.close()
    b.close()
    sh = os.path.join(tmp, "stories-shards")
    hfmodel.write_hf_dir(sh, STORIES_CFG, w, shards=3)
    with capture(os.path.join(tmp, "shards.h5"), sh, toks) as c:
        close("stories in 3 shards + index = one file", c["logits"][:], ref, 1e-4, 1e-4)
    for dt, tol in (("F16", 2e-2), ("BF16", 1e-1)):
        d = os.path.join(tmp, "stories-" + dt)
        hfmodel.write_hf_dir(d, dict(STORIES_CFG, torch_dtype=dt), w, dtype=dt)
        wd = {k: v for k, v in w.items()}
        wd["embed"], wd["lm_head"], wd["norm"] = (hfmodel.stored(w[k], dt) for k in ("embed", "lm_head", "norm"))
        wd["layers"] = [{k: hfmodel.stored(v, dt) for k, v in y.items()} for y in w["layers"]]
        logits, colsum, _ = hfmodel.forward(wd, STORIES_CFG, TOKENS)
        with capture(os.path.join(tmp, dt + ".h5"), d, toks) as c:
            close("stories %s: logits = float64 pass over the %s-rounded weights" % (dt, dt), c["logits"][:],
                  logits, 1e-4, 1e-4)
            close("stories %s: colsum" % dt, c["attention/colsum"][:], colsum, 1e-5, 1e-4)
            close("stories %s: logits within %s precision of F32" % (dt, dt), c["logits"][:], ref, tol, tol)
    return w


def tiny_cfg(arch, **kw):
    cfg = {"model_type": arch, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 40, "rms_norm_eps": 1e-6,
           "rope_theta": 10000.0, "max_position_embeddings": 128, "tie_word_embeddings": False}
    cfg.update(kw)
    return cfg


def tiny_models(tmp):
    ids = [int(x) for x in np.random.default_rng(5).integers(0, 40, 24)]
    toks = write_tokens(tmp, "tiny.tokens", ids)
    cases = [
        ("qwen2", tiny_cfg("qwen2", rope_theta=1000000.0), dict(bias=True), "QKV bias",
         dict(use_bias=False)),
        ("qwen3", tiny_cfg("qwen3", head_dim=16, tie_word_embeddings=True), dict(qk_norm=True),
         "q/k RMSNorm (head_dim 16 != 32/4)", dict(use_qk_norm=False)),
        ("llama", tiny_cfg("llama", num_attention_heads=2, num_key_value_heads=1,
                           rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
         {}, "llama3 rope scaling", dict(div=None)),
    ]
    for arch, cfg, feats, what, off in cases:
        w = hfmodel.random_weights(cfg, seed=len(arch), **feats)
        d = os.path.join(tmp, "tiny-" + arch)
        hfmodel.write_hf_dir(d, cfg, w)
        div = None
        if "rope_scaling" in cfg:
            rs = cfg["rope_scaling"]
            D = cfg["hidden_size"] // cfg["num_attention_heads"]
            div = hfmodel.llama3_divisors(D, cfg["rope_theta"], rs["factor"], rs["low_freq_factor"],
                                          rs["high_freq_factor"], rs["original_max_position_embeddings"])
        logits, colsum, keys = hfmodel.forward(w, cfg, ids, div=div)
        with capture(os.path.join(tmp, arch + ".h5"), d, toks, "--chunk", "5") as t:
            check(t.attrs["architecture"] == arch, "%s: architecture attribute" % arch)
            close("%s: logits vs float64 reference" % arch, t["logits"][:], logits, 1e-4, 1e-4)
            close("%s: colsum vs float64 reference" % arch, t["attention/colsum"][:], colsum, 1e-5, 1e-4)
            close("%s: keys vs float64 reference" % arch, t["keys"][:], keys, 1e-4, 1e-4)
            off_args = dict(div=div)
            off_args.update(off)
            l_off, c_off, _ = hfmodel.forward(w, cfg, ids, **off_args)
            gap = np.abs(l_off - t["logits"][:]).max()
            check(gap > 1e-2, "%s: without the %s the result differs (max logit gap %.3g)" % (arch, what, gap))
            if div is not None:
                check(t.attrs["rope_scaling"].startswith("llama3 factor=8"), "llama3: rope_scaling attribute",
                      t.attrs.get("rope_scaling"))
                close("llama3: rope_freq_factors attribute", t.attrs["rope_freq_factors"], div, 1e-12, 1e-12)
                check(div.min() == 1.0 and div.max() == 8.0 and len(set(div)) >= 3,
                      "llama3 divisors cover the high, medium and low bands", str(list(div)))


def bad(tmp, name, model, word, tokens, code=3):
    out = os.path.join(tmp, "bad.h5")
    before = set(os.listdir(tmp))
    r = run("capture", "--model", model, "--tokens", tokens, "-o", out)
    lines = r.stderr.strip().splitlines()
    left = set(os.listdir(tmp)) - before
    check(r.returncode == code and len(lines) == 1 and lines[0].startswith("kvtrace: error:") and word in lines[0]
          and not left, "%s: exit %d, one line naming %s" % (name, code, word),
          "rc %d, left %s: %s" % (r.returncode, sorted(left), r.stderr))


def bad_inputs(tmp, w):
    toks = write_tokens(tmp, "bad.tokens", TOKENS[:4])
    base = os.path.join(tmp, "base")
    hfmodel.write_hf_dir(base, STORIES_CFG, w)
    st = open(os.path.join(base, "model.safetensors"), "rb").read()
    (hlen,) = struct.unpack_from("<Q", st, 0)

    def variant(name, data=None, cfg=None, drop=None):
        d = os.path.join(tmp, name)
        shutil.copytree(base, d)
        if data is not None:
            open(os.path.join(d, "model.safetensors"), "wb").write(data)
        if cfg is not None:
            json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
        if drop:
            os.remove(os.path.join(d, drop))
        return d

    f = os.path.join("model.safetensors")
    bad(tmp, "malformed JSON header", variant("json", data=st[:8] + b"[" + st[9:]), f, toks)
    bad(tmp, "header length past the end", variant("hlen", data=struct.pack("<Q", len(st)) + st[8:]), f, toks)
    bad(tmp, "truncated tensor data", variant("trunc", data=st[: len(st) - 100]), f, toks)
    bad(tmp, "unknown dtype", variant("dtype", data=st.replace(b'"F32"', b'"F33"', 1)), "F33", toks)
    bad(tmp, "missing config.json", variant("nocfg", drop="config.json"), "config.json", toks)
    bad(tmp, "config contradicting tensor shapes", variant("shape", cfg=dict(STORIES_CFG, intermediate_size=170)),
        "170", toks)
    bad(tmp, "a dtype kvtrace does not convert", variant("i64", data=st.replace(b'"F32"', b'"I32"', 1)), "I32", toks)
    nan = bytearray(st)
    nan[8 + hlen: 8 + hlen + 4] = struct.pack("<f", float("nan"))
    bad(tmp, "a NaN weight", variant("nan", data=bytes(nan)), "NaN", toks)
    bad(tmp, "architecture not supported", variant("arch", cfg=dict(STORIES_CFG, model_type="gemma",
                                                                   architectures=["GemmaForCausalLM"])),
        "gemma", toks)
    bad(tmp, "rope scaling not supported", variant("yarn", cfg=dict(STORIES_CFG, rope_scaling={
        "rope_type": "yarn", "factor": 4.0})), "yarn", toks)
    sh = os.path.join(tmp, "shards")
    hfmodel.write_hf_dir(sh, STORIES_CFG, w, shards=2)
    os.remove(os.path.join(sh, "model-00002-of-00002.safetensors"))
    bad(tmp, "missing shard", sh, "model-00002-of-00002.safetensors", toks)
    ev = os.path.join(tmp, "evil")
    hfmodel.write_hf_dir(ev, STORIES_CFG, w, shards=2)
    idx = json.load(open(os.path.join(ev, "model.safetensors.index.json")))
    idx["weight_map"]["model.norm.weight"] = "../base/model.safetensors"
    json.dump(idx, open(os.path.join(ev, "model.safetensors.index.json"), "w"))
    bad(tmp, "a shard path leaving the directory", ev, "../base", toks)
    bad(tmp, "empty directory", variant("empty", drop="model.safetensors"), "no model.safetensors", toks)


def sliding_window(tmp, w):
    toks = write_tokens(tmp, "sw.tokens", TOKENS)
    d = os.path.join(tmp, "mistral")
    hfmodel.write_hf_dir(d, dict(STORIES_CFG, model_type="mistral", sliding_window=16), w)
    bad(tmp, "mistral: sliding window 16 shorter than 20 tokens refused", d, "sliding-window", toks, code=2)
    d2 = os.path.join(tmp, "mistral-wide")
    hfmodel.write_hf_dir(d2, dict(STORIES_CFG, model_type="mistral", sliding_window=4096), w)
    with capture(os.path.join(tmp, "mw.h5"), d2, toks) as t:
        check(t.attrs["architecture"] == "mistral" and t.attrs["n_tokens"] == 20,
              "mistral: a window covering the sequence runs")
    d3 = os.path.join(tmp, "qwen-sw")
    cfg = dict(tiny_cfg("qwen2"), use_sliding_window=True, sliding_window=8)
    hfmodel.write_hf_dir(d3, cfg, hfmodel.random_weights(cfg, 1, bias=True))
    bad(tmp, "qwen2 use_sliding_window refused past the window", d3, "window 8",
        write_tokens(tmp, "q.tokens", range(12)), code=2)


def tokenizers(tmp, w):
    """tokenizer.json: SentencePiece-style BPE encodes like the GGUF; byte-level BPE decodes, refuses to encode."""
    gold = json.load(open(os.path.join(MODELS, "stories260K.golden.json")))
    meta = ggufio.read(GGUF)[0]
    pieces, scores = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.scores"]
    vocab = {p: i for i, p in enumerate(pieces)}
    merges = []
    for i in sorted(range(259, 512), key=lambda i: -scores[i]):
        p = pieces[i]
        split = next(((p[:k], p[k:]) for k in range(1, len(p)) if p[:k] in vocab and p[k:] in vocab), None)
        if split:
            merges.append(" ".join(split))
    tj = {"version": "1.0", "added_tokens": [{"id": 0, "content": "<unk>", "special": True},
                                             {"id": 1, "content": "<s>", "special": True},
                                             {"id": 2, "content": "</s>", "special": True}],
          "normalizer": {"type": "Sequence", "normalizers": [
              {"type": "Prepend", "prepend": "\u2581"},
              {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
          "pre_tokenizer": None,
          "post_processor": {"type": "TemplateProcessing",
                             "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                        {"Sequence": {"id": "A", "type_id": 0}}],
                             "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
          "decoder": {"type": "Sequence", "decoders": [
              {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
              {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
          "model": {"type": "BPE", "vocab": vocab, "merges": merges, "byte_fallback": True, "unk_token": "<unk>"}}
    d = os.path.join(tmp, "stories-tok")
    hfmodel.write_hf_dir(d, STORIES_CFG, w)
    json.dump(tj, open(os.path.join(d, "tokenizer.json"), "w"))
    tk = gold["tokenize"]
    r = run("capture", "--quiet", "--print", "--model", d, "--prompt", tk["text"], "--generate", "8",
            "-o", os.path.join(tmp, "tok.h5"))
    check(r.returncode == 0, "tokenizer.json (SentencePiece-style BPE): --prompt runs", r.stderr)
    if r.returncode == 0:
        with h5py.File(os.path.join(tmp, "tok.h5"), "r") as t:
            got = list(t["tokens"][: t.attrs["prompt_len"]])
            check(got == tk["tokens_with_bos"], "tokenizer.json encodes like the GGUF's vocabulary",
                  "got %s\nref %s" % (got, tk["tokens_with_bos"]))
        # as the tokenizer.json's decoder does (the references' decode): BOS as its text, the
        # Strip decoder takes only the text's own first space, so the one after <s> stays
        check(r.stdout.startswith("<s> " + tk["text"][:10]), "--print decodes with tokenizer.json's decoder",
              r.stdout[:80])
    bl = {"version": "1.0", "added_tokens": [{"id": 39, "content": "<|endoftext|>", "special": True}],
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
          "model": {"type": "BPE", "vocab": {c: i for i, c in enumerate("abcdefghij\u0120")}, "merges": []}}
    cfg = tiny_cfg("qwen2")
    d2 = os.path.join(tmp, "qwen-tok")
    hfmodel.write_hf_dir(d2, cfg, hfmodel.random_weights(cfg, 2, bias=True))
    json.dump(bl, open(os.path.join(d2, "tokenizer.json"), "w"))
    r = run("capture", "--quiet", "--model", d2, "--prompt", "abc d", "-o", os.path.join(tmp, "bl0.h5"))
    check(r.returncode == 0, "byte-level BPE tokenizer.json: --prompt encodes", r.stderr)
    r = run("capture", "--model", d2, "--prompt", "xyz", "-o", os.path.join(tmp, "bl2.h5"))
    check(r.returncode == 3 and "byte 0x78" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          "byte-level BPE: a byte the vocabulary has no token for is refused, one line", r.stderr)
    toks = write_tokens(tmp, "bl.tokens", [0, 1, 2, 10, 3])
    r = run("capture", "--quiet", "--print", "--model", d2, "--tokens", toks, "-o", os.path.join(tmp, "bl.h5"))
    check(r.returncode == 0 and r.stdout.startswith("abc d"), "byte-level BPE: --print decodes (\u0120 = space)",
          "rc %d out %r err %s" % (r.returncode, r.stdout, r.stderr))


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-hf-")
    try:
        tiny_models(tmp)
        if not MODELS:
            skip("stories260K as an HF directory: equivalence, bad inputs, sliding windows, tokenizer.json",
                 NO_MODEL)
        else:
            w = stories_equivalence(tmp)
            bad_inputs(tmp, w)
            sliding_window(tmp, w)
            tokenizers(tmp, w)
    finally:
        shutil.rmtree(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
