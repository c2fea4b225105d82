#!/usr/bin/env python3
"""Seed corpus for fuzz_hf_config: config.json files shaped like real
checkpoints' (one of each architecture kvtrace runs, with their features).

    python3 tests/fuzz_hf_config/make_seeds.py DIR

llama32.json   a Llama 3.2 style config: GQA, tied embeddings, llama3 rope_scaling
llama2.json    a Llama 2 style config by "architectures" only, rope_scaling null
mistral.json   sliding_window, explicit head_dim
qwen2.json     use_sliding_window false, large rope_theta
qwen3.json     head_dim not hidden / heads, attention_bias false
tiny.json      the smallest config that passes model_config_check
"""
import json
import os
import sys

BASE = {"hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "torch_dtype": "bfloat16"}

SEEDS = {
    "llama32.json": dict(BASE, model_type="llama", architectures=["LlamaForCausalLM"],
                         tie_word_embeddings=True, rope_theta=500000.0, attention_bias=False,
                         mlp_bias=False, head_dim=16,
                         rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                       "original_max_position_embeddings": 8192, "rope_type": "llama3"}),
    "llama2.json": {k: v for k, v in dict(BASE, architectures=["LlamaForCausalLM"], rope_scaling=None,
                                          num_key_value_heads=None).items()},
    "mistral.json": dict(BASE, model_type="mistral", sliding_window=4096, head_dim=16),
    "qwen2.json": dict(BASE, model_type="qwen2", use_sliding_window=False, sliding_window=32768,
                       rope_theta=1000000.0, tie_word_embeddings=True, max_window_layers=21),
    "qwen3.json": dict(BASE, model_type="qwen3", head_dim=32, attention_bias=False,
                       use_sliding_window=True, sliding_window=128, rope_scaling={"rope_type": "default"}),
    "tiny.json": {"model_type": "llama", "hidden_size": 2, "intermediate_size": 1, "num_hidden_layers": 1,
                  "num_attention_heads": 1, "vocab_size": 1},
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    for name, cfg in SEEDS.items():
        with open(os.path.join(out, name), "w") as f:
            json.dump(cfg, f, indent=2)
    print("%d seeds in %s" % (len(SEEDS), out))


if __name__ == "__main__":
    main()
