"""kvtrace capture of random-weight models of every architecture it runs, written by transformers' own
save_pretrained (safetensors directories, transformers 5.x's config.json: rope_parameters holding
rope_theta), against transformers' forward pass of the same directory, TAP:

- every parameter random (biases and norm weights too); llama with llama3 RoPE scaling (theta 500000: a config whose theta is not 10000, read from
  rope_parameters), mistral, qwen2 (q/k/v biases), qwen3 (per-head q/k norms);
- 200 token ids in chunks of 16 and 128: logits and every layer's post-RoPE queries, keys and values
  (read through a registered attention function) within TOL of each tensor's largest magnitude;
  an HF directory is recorded in transformers' own rotate-half order (rope_style neox);
- greedy generation of 32 tokens: the same ids (or a first difference at a near-tie).
Run by tests/run_all.sh with the test venv's Python; KVTRACE set."""
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
import h5py  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_attention import CAPTURED, NAME, first_difference, register  # noqa: E402
from tap import check, finish, scaled_diff  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
TOL = 1e-4
SHAPE = dict(hidden_size=128, intermediate_size=344, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=1000, max_position_embeddings=4096, initializer_range=0.1, tie_word_embeddings=False)
ARCHS = [
    ("llama (llama3 RoPE scaling, theta 500000)", LlamaConfig, dict(
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 1024})),
    ("mistral", MistralConfig, dict(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                                    sliding_window=None)),
    ("qwen2 (q/k/v biases)", Qwen2Config, dict(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    ("qwen3 (q/k norms)", Qwen3Config, dict(head_dim=32, rope_parameters={"rope_type": "default",
                                                                          "rope_theta": 1000000.0})),
]


def kv_capture(tmp, model_dir, ids, chunk, generate=0):
    toks = os.path.join(tmp, "t.json")
    out = os.path.join(tmp, "%s_c%d_%d.h5" % (os.path.basename(model_dir), chunk, generate))
    with open(toks, "w") as f:
        json.dump(ids, f)
    args = [KVTRACE, "capture", "--model", model_dir, "--tokens", toks, "--chunk", str(chunk), "--attention", "none",
            "--threads", "1", "--quiet", "-o", out] + (["--generate", str(generate)] if generate else ["--logits"])
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    return h5py.File(out, "r")


def one_arch(tmp, what, cls, extra):
    torch.manual_seed(7)
    cfg = cls(**SHAPE, **extra)
    cfg._attn_implementation = NAME
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():   # every tensor random (transformers starts biases at zero and norms at one)
        for name, p in model.named_parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if "norm" in name else 0.1 * torch.randn_like(p))
    d = os.path.join(tmp, cls.__name__)
    model.save_pretrained(d)
    with open(os.path.join(d, "config.json")) as f:
        saved = json.load(f)
    ids = [(37 * i + 11) % SHAPE["vocab_size"] for i in range(200)]
    CAPTURED.clear()
    with torch.no_grad():
        logits = model(torch.tensor([ids]), use_cache=False).logits[0].numpy()
    for chunk in (16, 128):
        with kv_capture(tmp, d, ids, chunk) as tr:
            style = tr.attrs["rope_style"]
            style = style.decode() if isinstance(style, bytes) else str(style)
            worst = {"logits": scaled_diff(logits, tr["logits"][()])}
            for name, i in (("queries", 0), ("keys", 1), ("values", 2)):
                worst[name] = max(scaled_diff(CAPTURED[l][i], tr[name][l]) for l in CAPTURED)
        print("# %s, chunk %d (rope_style %s; config: %s): %s" % (what, chunk, style, sorted(
            k for k in saved if "rope" in k), ", ".join("%s %.2e" % kv for kv in worst.items())))
        check(all(v <= TOL for v in worst.values()), "%s, chunk %d: logits, queries, keys, values of every layer "
              "within %g of each tensor's largest magnitude" % (what, chunk, TOL), str(worst))
    with torch.no_grad():
        out = model.generate(torch.tensor([ids[:40]]), max_new_tokens=32, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
    want = out.sequences[0, 40:].tolist()
    with kv_capture(tmp, d, ids[:40], 16, generate=32) as tr:
        got = tr["tokens"][40:].tolist()
    first, gap = first_difference(got, want, out.logits)
    check(len(got) == 32 and (first is None or gap < TOL), "%s: greedy 32 tokens as transformers' generate" % what,
          "first difference at %s (gap %.2e): %s vs %s" % (first, gap, got, want))


def main():
    hf_logging.set_verbosity_error()
    register()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for what, cls, extra in ARCHS:
            one_arch(tmp, what, cls, extra)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
