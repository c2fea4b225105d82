"""Record a trace from a transformers model with kvtrace.record, replay KV-cache eviction on it with
`kvtrace sim`, and read the results back with kvtrace.load_results.

    python record_and_replay.py -o out/                               # a small random llama: runs offline
    python record_and_replay.py --model HuggingFaceTB/SmolLM2-135M-Instruct --prompt "..." -o out/
    python record_and_replay.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf --generate 32 -o out/

Writes OUT/trace.h5 and OUT/results/ (kvtrace sim's directory: summary.csv, results.csv, ...) and
prints the summary: per policy and budget, the attention output's error against the full cache and
the attention mass the kept cache still holds (docs/outputs.md).
"""
import argparse
import os
import shutil
import subprocess
import sys

import torch

import kvtrace

PROMPT = ("There is an important piece of information hidden in this text. The grass is green. The sky is blue. "
          "The sun is yellow. Here we go. There and back again. The pass key is 71432. Remember it. " * 3
          + "What is the pass key? The pass key is")


def random_llama():
    """A small llama with random weights (no download): the default, so that the example runs anywhere."""
    from transformers import AutoModelForCausalLM, LlamaConfig
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=128, intermediate_size=344, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=1000, max_position_embeddings=4096, tie_word_embeddings=False,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if "norm" in name else 0.1 * torch.randn_like(p))
    return model.eval(), None


def load(args):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if args.gguf:
        d, name = os.path.split(os.path.abspath(args.gguf))
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
        try:
            tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
        except Exception:   # a GGUF without a tokenizer transformers can read: token ids only
            tok = None
        return model.eval(), tok
    if args.model:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
        try:
            tok = AutoTokenizer.from_pretrained(args.model)
        except Exception:
            tok = None
        return model.eval(), tok
    return random_llama()


def prompt_ids(args, tok, vocab):
    """(ids, text): --tokens as given; else the prompt text through the tokenizer; else ids made up."""
    if args.tokens:
        return [int(x) for x in args.tokens.replace(",", " ").split()], None
    if tok is not None:
        text = args.prompt or PROMPT
        return tok(text)["input_ids"], text
    return [(37 * i + 11) % vocab for i in range(args.length)], None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--model", help="a Hugging Face model id or directory (default: a small random llama)")
    src.add_argument("--gguf", help="a GGUF file, loaded by transformers (dequantised to float32)")
    ap.add_argument("--prompt", help="prompt text (needs the model's tokenizer; default: a pass-key text)")
    ap.add_argument("--tokens", help="prompt token ids, comma or space separated")
    ap.add_argument("--length", type=int, default=256, help="tokens of the made-up prompt without a tokenizer")
    ap.add_argument("--generate", type=int, default=0, help="tokens to generate greedily after the prompt")
    ap.add_argument("--chunk", type=int, default=64, help="prefill chunk B, for the recording and the replay")
    ap.add_argument("--policies", default="keydiff,snapkv,tova,h2o,streaming,knorm")
    ap.add_argument("--budgets", default="32,64")
    ap.add_argument("--kvtrace", default=shutil.which("kvtrace"), help="the kvtrace binary (default: on PATH)")
    ap.add_argument("--threads", type=int, default=0, help="torch and kvtrace sim threads (default: theirs)")
    ap.add_argument("-o", "--output", required=True, help="output directory")
    args = ap.parse_args()
    if not args.kvtrace:
        sys.exit("record_and_replay: kvtrace is not on PATH: give --kvtrace")
    if args.threads:
        torch.set_num_threads(args.threads)
    os.makedirs(args.output, exist_ok=True)
    trace, results = os.path.join(args.output, "trace.h5"), os.path.join(args.output, "results")

    model, tok = load(args)
    ids, text = prompt_ids(args, tok, model.config.vocab_size)
    name = os.path.basename(args.gguf)[:-5] if args.gguf and args.gguf.endswith(".gguf") else None
    with torch.no_grad(), kvtrace.record(model, trace, chunk=args.chunk, text=text, model_id=name) as rec:
        if args.generate:
            x = torch.tensor([ids])
            model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=args.generate, do_sample=False,
                           pad_token_id=getattr(model.config, "eos_token_id", None) or 0)
        else:
            model(torch.tensor([ids]))
    print("recorded %s: %d tokens (prompt %d) in chunks of %d, %s" % (trace, rec.pos, rec.prompt_len, args.chunk,
                                                                      model.config.model_type))

    cmd = [args.kvtrace, "sim", trace, "--policies", args.policies, "--budgets", args.budgets, "--chunk",
           str(args.chunk), "--quiet", "--force", "-o", results]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    subprocess.run(cmd, check=True)

    res = kvtrace.load_results(results)
    s = res.summary
    s = s[s["phase"] == "all"] if "all" in set(s["phase"]) else s
    print("summary (%s/summary.csv, phase all):" % results)
    print(s[["config", "budget", "out_rel_err_mean", "attn_recall_mean"]].to_string(index=False))


if __name__ == "__main__":
    main()
