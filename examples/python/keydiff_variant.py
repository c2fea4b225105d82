"""keydiff_variant: KeyDiff (Park et al. 2025) with attention sinks and a remembered anchor.

KeyDiff keeps the keys least similar to the anchor mu, the mean of the candidates' normalised
keys: s_j = -cos(k_j, mu). This variant changes two things, both parameters:
  sinks=N       the first N positions of the sequence are always kept (+inf), as StreamingLLM does;
  anchor=ema    mu is an exponential moving average over the steps of the stream (kept in the
                stream's state, created by create()), decay `decay`, instead of this step's mean.
With sinks=0 and anchor=mean it is the built-in keydiff (up to rounding: numpy sums in another order).

    kvtrace sim TRACE --plugin examples/python/keydiff_variant.py \
        --policies keydiff_variant,keydiff,keydiff_variant:anchor=ema:decay=0.5 --budgets 32,64 --chunk 32 -o res/
"""
import numpy as np


def create(params):
    # one per (layer, kv head) stream: the moving anchor, unset until the first step
    return {"mu": None}


def score(view, params, state):
    k = view.keys.astype(np.float64)                 # (n, D), a copy: view.keys is read-only
    norms = np.linalg.norm(k, axis=1)
    unit = k / np.where(norms > 0, norms, 1.0)[:, None]
    mu = unit.mean(axis=0)
    if params["anchor"] == "ema":
        if state["mu"] is not None:
            mu = params["decay"] * state["mu"] + (1.0 - params["decay"]) * mu
        state["mu"] = mu
    mu_norm = np.linalg.norm(mu)
    cos = unit @ mu / mu_norm if mu_norm > 0 else np.zeros(view.n)
    s = -cos
    s[view.pos < params["sinks"]] = np.inf          # the attention sinks stay
    return s                                         # float64, one per candidate


KVTRACE_POLICIES = [
    dict(
        name="keydiff_variant",
        summary="KeyDiff with attention sinks and an optional moving-average anchor (Python example)",
        params=[
            dict(key="sinks", default=4, min=0, max=1 << 20, doc="the first sinks positions are always kept"),
            dict(key="anchor", choices=["mean", "ema"], default="mean",
                 doc="mean: this step's mean normalised key; ema: a moving average over the stream's steps"),
            dict(key="decay", default=0.9, min=0.0, max=1.0, doc="anchor=ema: the weight of the previous anchor"),
        ],
        create=create,
        score=score,
    ),
]
