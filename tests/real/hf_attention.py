"""What tests/real's comparisons with transformers share: the post-RoPE queries, keys and values of every
layer, read through a registered attention function (transformers' AttentionInterface; forward hooks
never see post-RoPE tensors), and where a greedy generation first differs from transformers'."""
import numpy as np
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

NAME = "kvtrace_capture"   # attn_implementation=NAME, once register() ran
CAPTURED = {}              # layer -> (queries [H, T, D], keys [K, T, D], values [K, T, D]) of the last forward


def _capture(module, query, key, value, attention_mask, **kw):
    CAPTURED[module.layer_idx] = (query[0].numpy().copy(), key[0].numpy().copy(), value[0].numpy().copy())
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kw)


def register():
    AttentionInterface.register(NAME, _capture)


def first_difference(got, want, step_logits):
    """(the first step where the ids differ or None, transformers' top-2 logit gap there over the logits' scale)."""
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    if first is None:
        return None, 0.0
    top = np.sort(step_logits[first][0].numpy())[::-1]
    return first, float((top[0] - top[1]) / np.abs(top).max())
