"""kvtrace capture of SmolLM2-135M-Instruct (the Q4_1 GGUF) against Hugging Face transformers' forward pass of
the same GGUF (from_pretrained(gguf_file=..., dtype=float32): it dequantises with the gguf package), TAP.

Both sides are fed the same token ids (kvtrace's tokenizer is checked apart, test_smollm2_tokenizer.py).
transformers runs one forward over the whole prompt; its post-RoPE queries, keys and values are read
through a registered attention function (AttentionInterface: forward hooks never see post-RoPE tensors).
kvtrace records a llama GGUF's queries and keys in the GGUF's interleaved pair order (rope_style
interleaved: pair i is elements 2i, 2i+1); transformers un-permutes the weights to rotate-half order
(pair i is elements i, i + D/2), so a kvtrace row r maps to concat(r[0::2], r[1::2]) (docs/capture.md).
Prompts of about 150, 700 and 2,000 tokens (a pass key in repeated filler, as RULER writes it), captured
in chunks of 16 and of 128 (the longest in chunks of 128 only: CI's time), and the first 256 tokens in
chunks of 1: logits and every layer's
queries, keys and values within TOL of each tensor's largest magnitude (measured: see the printed
figures). Greedy generation of 64 tokens after the short prompt: identical ids, or the first
difference at a step whose top-2 logit gap is below TOL of the logits' scale. A chat prompt (capture --chat,
docs/tokenize.md): the ids of transformers' apply_chat_template on the GGUF's template, and greedy generation of 32
tokens from them, up to the end-of-turn token where transformers stops.
Run by tests/run_all.sh with the test venv's Python; KVTRACE and KVTRACE_SMOLLM2 set."""
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_attention import CAPTURED, NAME, first_difference, register  # noqa: E402
from smollm2_tokenizer import gguf_chat_template, hf_reference  # noqa: E402
from tap import check, finish, scaled_diff  # noqa: E402

KVTRACE, GGUF = os.environ["KVTRACE"], os.environ["KVTRACE_SMOLLM2"]
TOL = 1e-4
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "


def prompt_text(n_filler):
    half = FILLER * (n_filler // 2)
    return ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
            + half + "The pass key is 71432. Remember it. 71432 is the pass key. " + half
            + "What is the pass key? The pass key is")


def ids_of(text):
    r = subprocess.run([KVTRACE, "tokenize", "--model", GGUF, "--no-special", "--text", text], capture_output=True,
                       text=True, check=True)
    return json.loads(r.stdout)


def kv_capture(tmp, ids, chunk, generate=0):
    toks, out = os.path.join(tmp, "t.json"), os.path.join(tmp, "c%d_%d_%d.h5" % (len(ids), chunk, generate))
    with open(toks, "w") as f:
        json.dump(ids, f)
    args = [KVTRACE, "capture", "--model", GGUF, "--tokens", toks, "--chunk", str(chunk), "--attention", "none",
            "--threads", "1", "--quiet", "-o", out]  # one thread: the test run's other leg has the other core
    args += ["--generate", str(generate)] if generate else ["--logits"]
    subprocess.run(args, check=True, capture_output=True)
    return h5py.File(out, "r")


def rotate_half(x):
    """kvtrace's interleaved pairs (2i, 2i+1) in transformers' rotate-half order (i, i + D/2)."""
    return np.concatenate([x[..., 0::2], x[..., 1::2]], axis=-1)


def compare(tr, hf_logits, T, what):
    worst = {"logits": scaled_diff(hf_logits[:T], tr["logits"][:T])}
    for name, idx, perm in (("queries", 0, True), ("keys", 1, True), ("values", 2, False)):
        e = 0.0
        for layer, t in CAPTURED.items():
            got = tr[name][layer][:, :T]
            e = max(e, scaled_diff(t[idx][:, :T], rotate_half(got) if perm else got))
        worst[name] = e
    print("# %s: worst |kvtrace - transformers| / max|transformers| per tensor: %s" % (
        what, ", ".join("%s %.2e" % kv for kv in worst.items())))
    check(all(v <= TOL for v in worst.values()), "%s: logits, queries, keys, values of every layer within %g of "
          "each tensor's largest magnitude" % (what, TOL), str(worst))


QUESTION = "What is the capital of France?"


def chat_greedy(model, tmp):
    """capture --chat --generate 32 against transformers' generate on apply_chat_template's ids."""
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_object=hf_reference(GGUF), bos_token="<|im_start|>",
                                  eos_token="<|im_end|>")
    tok.chat_template = gguf_chat_template(GGUF)
    ids = tok.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"]) if not isinstance(ids, list) else ids
    out = os.path.join(tmp, "chat.h5")
    r = subprocess.run([KVTRACE, "capture", "--model", GGUF, "--chat", "--prompt", QUESTION, "--generate", "32",
                        "--attention", "none", "--threads", "1", "--quiet", "--print", "-o", out],
                       capture_output=True, text=True)
    check(r.returncode == 0, "capture --chat --prompt %r --generate 32 --print" % QUESTION, r.stderr)
    if r.returncode != 0:
        return
    with h5py.File(out, "r") as f:
        P = int(f.attrs["prompt_len"])
        toks = f["tokens"][()].tolist()
    check(toks[:P] == ids, "capture --chat: the prompt's ids == apply_chat_template's (%d tokens)" % len(ids),
          "%s vs %s" % (toks[:P], ids))
    with torch.no_grad():
        g = model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False, output_logits=True,
                           return_dict_in_generate=True, pad_token_id=2)
    want = g.sequences[0, len(ids):].tolist()
    got = toks[P:]
    first, gap = first_difference(got[:len(want)], want, g.logits)
    print("# chat greedy: transformers generated %d tokens (stopping at <|im_end|>: %s); kvtrace %s" %
          (len(want), want[-1:] == [2], "identical" if first is None else "differs at step %s (gap %.2e)" % (first, gap)))
    print("# capture --chat --print:\n#   " + r.stdout.strip().replace("\n", "\n#   "))
    check(len(got) == 32 and (first is None or gap < TOL), "capture --chat: greedy ids == transformers' generate from "
          "apply_chat_template (to its end of turn)", "%s vs %s" % (got, want))


def main():
    hf_logging.set_verbosity_error()
    register()
    torch.set_num_threads(1)
    d, name = os.path.split(GGUF)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation=NAME).eval()
    prompts = [ids_of(prompt_text(n)) for n in (4, 28, 82)]
    print("# prompts of %s tokens" % [len(p) for p in prompts])
    with tempfile.TemporaryDirectory() as tmp:
        for ids in prompts:
            CAPTURED.clear()
            t0 = time.time()
            with torch.no_grad():
                hf = model(torch.tensor([ids]), use_cache=False).logits[0].numpy()
            t1 = time.time()
            for chunk in (16, 128) if len(ids) < 1000 else (128,):
                with kv_capture(tmp, ids, chunk) as tr:
                    compare(tr, hf, len(ids), "T %d, chunk %d" % (len(ids), chunk))
            print("# T %d: transformers %.1f s, kvtrace's captures and the comparisons %.1f s"
                  % (len(ids), t1 - t0, time.time() - t1))
            if len(ids) >= 256 and len(ids) < 1000:
                with kv_capture(tmp, ids[:256], 1) as tr:
                    compare(tr, hf, 256, "T 256 (a prefix), chunk 1")
        ids = prompts[0]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False, output_logits=True,
                                 return_dict_in_generate=True, pad_token_id=2)
        want = out.sequences[0, len(ids):].tolist()
        with kv_capture(tmp, ids, 16, generate=64) as tr:
            got = tr["tokens"][len(ids):].tolist()
        first, gap = first_difference(got, want, out.logits)
        print("# greedy, 64 tokens after %d: %s" % (len(ids), "identical" if first is None and len(got) == 64 else
                                                  "first difference at step %s (top-2 gap %.2e)" % (first, gap)))
        check(len(got) == 64 and (first is None or gap < TOL), "greedy generation of 64 tokens: the same ids as "
              "transformers' generate (or a first difference at a near-tie)", "%s vs %s" % (got, want))
        chat_greedy(model, tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
