"""The root attributes of a hand-made schema-1.0 trace (docs/trace.md), for tests that write
their own small traces with h5py."""
import numpy as np


def write_root_attrs(f, creator, L, H, K, D, T, P, vocab=100):
    a = f.attrs
    a["kvtrace_schema"] = np.array([1, 0], dtype=np.int32)
    for k, v in dict(creator=creator, model_name="brute", architecture="llama", rope_style="neox",
                     capture_mode="full", storage_dtype="f32").items():
        a[k] = v
    for k, v in dict(n_layers=L, n_heads=H, n_kv_heads=K, head_dim=D, n_tokens=T, prompt_len=P,
                     vocab_size=vocab, capture_chunk=0).items():
        a[k] = np.int64(v)
    a["rope_theta"] = 10000.0
