"""Hostile inputs of classes 3, 4 and 7 (docs/reliability.md#the-failure-classes; TAP;
tests/lib/hostile.py tallies them):

- numbers-overflow: finite inputs whose float32 arithmetic overflows (GGUFs with huge but
  finite weights, traces with huge keys, queries or values): capture, fidelity and sim stop
  with exit 3 naming layer, head and position, and write nothing; analyze of huge finite
  keys either refuses or writes finite numbers only;
- metadata-disagrees: model files whose metadata disagrees with the tensors present
  (GGUF block_count, head counts, vocabulary; llama2.c header vs file size; Hugging Face
  config.json vs safetensors): exit 3, one line;
- beyond-context: more positions than the model's trained context (GGUF context_length,
  llama2.c seq_len, config.json max_position_embeddings, random: shapes' real lengths):
  exit 2 naming both lengths, unless --allow-beyond-context.

    KVTRACE=build/kvtrace /usr/bin/python3 tests/scripts/test_hostile_numerics.py build"""
import glob
import json
import os
import struct
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ggufio as G  # noqa: E402
import hfmodel  # noqa: E402
import hostile  # noqa: E402
from kvrun import run, write_tokens  # noqa: E402
from tap import check, finish, skip  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_gguf_types import kv_list, write_gguf  # noqa: E402

MODELS = os.environ.get("KVTRACE_MODEL_DIR", "")
GGUF = os.path.join(MODELS, "stories260K.gguf")
BIN = os.path.join(MODELS, "derived", "stories260K.bin")
TOK = os.path.join(MODELS, "derived", "tok512.bin")
EMUL = os.path.abspath(os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build", "emul", "libkvcuda_emul.so"))
IDS = [1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426]



def csv_rows(path):
    import csv as csvmod
    with open(path, newline="") as f:
        return list(csvmod.DictReader(f))

def scaled_gguf(path, meta, tensors, scale):
    """stories260K with the tensors named in `scale` multiplied (finite results only)."""
    ts = []
    for name, a in tensors.items():
        f = next((s for k, s in scale.items() if k in name), 1.0)
        b = a.astype(np.float64) * f if f < 1e38 else a / np.abs(a).max() * f  # f >= 1e38: max |w| = f
        assert np.isfinite(b.astype(np.float32)).all(), name
        ts.append((name, b.astype(np.float32)))
    write_gguf(path, meta, ts)


def overflow_cases(tmp):
    h = hostile.Tally("numbers-overflow")
    meta, tensors = G.read(GGUF)
    toks = write_tokens(tmp, "ids.json", IDS)
    cases = [("every weight x1e30", {"": 1e30}), ("wq and wk x1e19 (scores)", {"attn_q": 1e19, "attn_k": 1e19}),
             ("wv and wo at 3e38 (values)", {"attn_v": 3e38, "attn_output": 3e38}), ("ffn x1e20 (SwiGLU)", {"ffn_gate": 1e20, "ffn_up": 1e20}),
             ("output at 3e38 (logits)", {"output.weight": 3e38}), ("wk x3e38 (keys)", {"attn_k": 3e38})]
    for i, (what, scale) in enumerate(cases):
        m = os.path.join(tmp, "huge%d.gguf" % i)
        scaled_gguf(m, meta, tensors, scale)
        out = os.path.join(tmp, "huge%d.h5" % i)
        h.attempt("capture, GGUF " + what, ["capture", "--quiet", "--model", m, "--tokens", toks, "-o", out],
                  codes=(3,), outputs=[out], keep=[m], must_say="not finite")
        if i == 1:
            out = os.path.join(tmp, "huge-ev.h5")
            h.attempt("capture --evict, GGUF " + what, ["capture", "--quiet", "--model", m, "--tokens", toks,
                      "--evict", "keydiff", "--budget", "4", "--chunk", "4", "-o", out], codes=(3,),
                      outputs=[out], must_say="not finite")
            out = os.path.join(tmp, "fid-huge")
            h.attempt("fidelity, GGUF " + what, ["fidelity", "--quiet", "--model", m, "--tokens", toks,
                      "--policies", "keydiff", "--budgets", "4", "--chunk", "4", "-o", out], codes=(3,),
                      outputs=[out], must_say="not finite")
        if i == 0 and os.path.exists(EMUL):
            out = os.path.join(tmp, "huge-cuda.h5")
            h.attempt("capture --device cuda (emulated), GGUF " + what,
                      ["capture", "--quiet", "--device", "cuda", "--model", m, "--tokens", toks, "-o", out],
                      codes=(3,), outputs=[out], must_say="not finite",
                      env={"KVTRACE_CUDA_LIB": EMUL})
    base = os.path.join(tmp, "base.h5")
    r = run("synth", "--like", "stories260k", "--tokens", "48", "--seed", "3", "-o", base)
    check(r.returncode == 0, "synth a base trace", r.stderr)
    for what, ds, f in (("keys x3e38", "keys", 3e38), ("keys and queries x1e30", ("keys", "queries"), 1e30),
                        ("queries x3e38", "queries", 3e38)):
        t = os.path.join(tmp, "t-%s.h5" % what.replace(" ", "_"))
        with open(base, "rb") as src, open(t, "wb") as dst:
            dst.write(src.read())
        with h5py.File(t, "r+") as hf:
            for d in (ds if isinstance(ds, tuple) else (ds,)):
                a = hf[d][...].astype(np.float64)
                a = a / np.abs(a).max() * f
                hf[d][...] = a.astype(np.float32)
        out = os.path.join(tmp, "sim-" + os.path.basename(t))
        h.attempt("sim, trace " + what, ["sim", t, "--policies", "full,keydiff,tova", "--budgets", "8,16",
                  "--chunk", "8", "-o", out], codes=(3,), outputs=[out], keep=[t], must_say="not finite")
        if what.startswith("keys x3e38"):  # huge values alone: averages of finite values stay finite
            with h5py.File(t, "r+") as hf:
                a = hf["values"][...].astype(np.float64)
                hf["values"][...] = (a / np.abs(a).max() * 3e38).astype(np.float32)
                hf["keys"][...] = h5py.File(base, "r")["keys"][...]
            out = os.path.join(tmp, "sim-values")
            r = run("sim", t, "--policies", "full,keydiff", "--budgets", "8", "--chunk", "8", "-o", out)
            # every column but head_budget_mean, which is nan by definition where nothing evicted (full), of the
            # rows that measured a query (a phase without one is nan by definition: docs/sim.md#metrics)
            txt = "\n".join(",".join(v for k, v in row.items() if k != "head_budget_mean") for row in
                             csv_rows(os.path.join(out, "results.csv")) if row["n_queries"] != "0").lower() \
                if r.returncode == 0 else ""
            check(r.returncode == 0 and "nan" not in txt and "inf" not in txt,
                  "sim, trace values x3e38: computed, finite results", r.stderr.strip())
        # analyze computes in double: huge finite keys give finite numbers, or a clean refusal
        out = os.path.join(tmp, "an-" + os.path.basename(t))
        r = run("analyze", t, "-o", out)
        bad = []
        for csv in glob.glob(os.path.join(out, "*.csv")):
            for ln in open(csv).read().splitlines()[1:]:
                if any(x.strip().lower() in ("nan", "-nan", "inf", "-inf") for x in ln.split(",")):
                    bad.append(os.path.basename(csv))
                    break
        check((r.returncode == 0 and not bad) or (r.returncode == 3 and not os.path.exists(out)),
              "analyze, trace %s: finite outputs or a clean refusal" % what,
              "exit %d, non-finite in %s; %s" % (r.returncode, sorted(set(bad)), r.stderr.strip()))
    return h


def write_llama2c(path, header, payload):
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", *header) + payload)


def metadata_cases(tmp):
    h = hostile.Tally("metadata-disagrees")
    meta, tensors = G.read(GGUF)
    toks = write_tokens(tmp, "ids.json", IDS)

    def gguf_case(what, meta2, tensors2):
        m = os.path.join(tmp, "meta-%d.gguf" % h.counts["attempts"])
        write_gguf(m, meta2, list(tensors2.items()))
        out = m + ".h5"
        h.attempt("GGUF " + what, ["capture", "--quiet", "--model", m, "--tokens", toks, "-o", out],
                  codes=(3,), outputs=[out])

    gguf_case("block_count 4 with blk.0..4", dict(meta, **{"llama.block_count": 4}), tensors)
    gguf_case("block_count 3 with blk.0..4", dict(meta, **{"llama.block_count": 3}), tensors)
    gguf_case("block_count 6 with blk.0..4", dict(meta, **{"llama.block_count": 6}), tensors)
    gguf_case("an extra tensor blk.0.attn_extra.weight", meta,
              dict(tensors, **{"blk.0.attn_extra.weight": np.ones(64, np.float32)}))
    gguf_case("an extra tensor blk.7.attn_q.weight", meta, dict(tensors, **{"blk.7.attn_q.weight":
                                                                           tensors["blk.0.attn_q.weight"]}))
    gguf_case("a missing blk.2.ffn_up.weight", meta, {k: v for k, v in tensors.items() if k != "blk.2.ffn_up.weight"})
    gguf_case("head_count_kv 2 (tensors have 4)", dict(meta, **{"llama.attention.head_count_kv": 2}), tensors)
    gguf_case("head_count 4 (tensors have 8)", dict(meta, **{"llama.attention.head_count": 4}), tensors)
    gguf_case("vocabulary of 500 (embedding 512)", dict(meta, **{k: meta[k][:500] for k in meta
                                                                 if k.startswith("tokenizer.ggml.") and
                                                                 isinstance(meta[k], list)}), tensors)
    gguf_case("embedding of 600 rows (vocabulary 512)", meta,
              dict(tensors, **{"token_embd.weight": np.vstack([tensors["token_embd.weight"]] * 2)[:600]}))
    # llama2.c: header vs file size
    raw = open(BIN, "rb").read()
    hdr, payload = list(struct.unpack_from("<7i", raw)), raw[28:]
    for what, h2, p2 in (("n_layers 4 of 5", [hdr[0], hdr[1], 4] + hdr[3:], payload),
                         ("n_layers 6 of 5", [hdr[0], hdr[1], 6] + hdr[3:], payload),
                         ("12 trailing bytes", hdr, payload + b"\0" * 12),
                         ("seq_len 256 of 512 (freq tables)", hdr[:6] + [256], payload)):
        m = os.path.join(tmp, "meta-%d.bin" % h.counts["attempts"])
        write_llama2c(m, h2, p2)
        out = m + ".h5"
        h.attempt("llama2.c " + what, ["capture", "--quiet", "--model", m, "--tokenizer", TOK, "--tokens", toks,
                                       "-o", out], codes=(3,), outputs=[out])
    # Hugging Face directories: config.json vs the safetensors
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "intermediate_size": 48,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 64, "tie_word_embeddings": False}
    w = hfmodel.random_weights(cfg, 5)

    def hf_case(what, cfg2, names_edit):
        d = os.path.join(tmp, "hf-%d" % h.counts["attempts"])
        hfmodel.write_hf_dir(d, cfg, w)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg2, f)
        if names_edit:
            names_edit(d)
        out = d + ".h5"
        h.attempt("HF " + what, ["capture", "--quiet", "--model", d, "--tokens", write_tokens(tmp, "hid.json", [1, 2, 3]),
                                 "-o", out], codes=(3,), outputs=[out])

    hf_case("num_hidden_layers 1 of 2", dict(cfg, num_hidden_layers=1), None)
    hf_case("num_hidden_layers 3 of 2", dict(cfg, num_hidden_layers=3), None)
    hf_case("vocab_size 60 (embedding 64)", dict(cfg, vocab_size=60), None)
    hf_case("num_key_value_heads 1 (tensors have 2)", dict(cfg, num_key_value_heads=1), None)

    def add_extra_plain(d):
        st = glob.glob(os.path.join(d, "*.safetensors"))[0]
        t = read_safetensors(st)
        t["model.layers.5.self_attn.q_proj.weight"] = np.ones((4, 4), np.float32)
        hfmodel.write_safetensors(st, list(t.items()))

    hf_case("an extra tensor model.layers.5.*", cfg, add_extra_plain)
    return h


def read_safetensors(path):
    b = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", b, 0)
    head = json.loads(b[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s: 8 + n + e], dtype="<f4").reshape(v["shape"])
    return out


def context_cases(tmp):
    h = hostile.Tally("beyond-context")
    meta, tensors = G.read(GGUF)
    long600 = write_tokens(tmp, "long600.json", [1] + [400 + (i % 50) for i in range(599)])
    short = write_tokens(tmp, "short.json", IDS)
    ctx64 = os.path.join(tmp, "ctx64.gguf")
    write_gguf(ctx64, dict(meta, **{"llama.context_length": 64}), list(tensors.items()))
    long80 = write_tokens(tmp, "long80.json", [1] + [400 + (i % 50) for i in range(79)])
    cases = [("GGUF context_length 64, 80 tokens", ["--model", ctx64, "--tokens", long80]),
             ("GGUF context_length 64, 16 + --generate 60", ["--model", ctx64, "--tokens", short, "--generate", "60"]),
             ("llama2.c seq_len 512, 600 tokens", ["--model", BIN, "--tokenizer", TOK, "--tokens", long600]),
             ("random:stories260k (512), 600 tokens", ["--model", "random:stories260k", "--tokens", long600])]
    for i, (what, args) in enumerate(cases):
        out = os.path.join(tmp, "ctx%d.h5" % i)
        h.attempt("capture, " + what, ["capture", "--quiet"] + args + ["-o", out], codes=(2,), outputs=[out],
                  must_say="context")
    out = os.path.join(tmp, "ctx-fid")
    h.attempt("fidelity, GGUF context_length 64, 80 tokens",
              ["fidelity", "--quiet", "--model", ctx64, "--tokens", long80, "--policies", "keydiff", "--budgets", "8",
               "--chunk", "16", "-o", out], codes=(2,), outputs=[out], must_say="context")
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "intermediate_size": 48,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 16, "tie_word_embeddings": False}
    d = os.path.join(tmp, "hf16")
    hfmodel.write_hf_dir(d, cfg, hfmodel.random_weights(cfg, 5))
    out = os.path.join(tmp, "ctx-hf.h5")
    h.attempt("capture, HF max_position_embeddings 16, 20 tokens",
              ["capture", "--quiet", "--model", d, "--tokens", write_tokens(tmp, "t20.json", list(range(1, 21))),
               "-o", out], codes=(2,), outputs=[out], must_say="context")
    # --allow-beyond-context runs (RoPE positions the model never trained on)
    out = os.path.join(tmp, "ctx-allowed.h5")
    r = run("capture", "--quiet", "--allow-beyond-context", "--model", ctx64, "--tokens", long80, "-o", out)
    check(r.returncode == 0 and os.path.exists(out), "--allow-beyond-context runs past the context", r.stderr)
    return h


def main():
    if not os.path.exists(GGUF):
        skip("hostile numerics", "no stories260K.gguf in KVTRACE_MODEL_DIR")
        return finish()
    with tempfile.TemporaryDirectory() as tmp:
        for part in (overflow_cases, metadata_cases, context_cases):
            d = os.path.join(tmp, part.__name__)
            os.mkdir(d)
            part(d)
    hostile.report()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
