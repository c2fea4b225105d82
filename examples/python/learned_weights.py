"""learned_weights: a linear policy whose weights were fitted offline, loaded from learned_weights.npy beside
this file.

Each candidate gets five features (features() below: a constant, the key's norm, its cosine with the mean
normalised key, log(1 + its age), whether it is one of the first 4 positions); the score is their dot product
with the weights, a prediction of the attention the candidate will get. make_learned_weights.py fitted the
committed weights by least squares on the demo trace (stories260K); refit them on your own traces with it.

    kvtrace sim TRACE --plugin examples/python/learned_weights.py --policies learned,learned:scale=0,knorm \
        --budgets 32,64 --chunk 32 -o res/
"""
import functools
import os

import numpy as np

WEIGHTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "learned_weights.npy")


@functools.lru_cache(maxsize=None)
def weights():
    """The 5 float64 weights, read once (at the first step; make_learned_weights.py imports this file
    before the weights exist)."""
    return np.load(WEIGHTS_FILE)


def features(keys, pos, now):
    """keys [n][D] float64, pos [n], now -> [n][5]. Shared with make_learned_weights.py."""
    norms = np.linalg.norm(keys, axis=1)
    unit = keys / np.where(norms > 0, norms, 1.0)[:, None]
    mu = unit.mean(axis=0)
    mu_norm = np.linalg.norm(mu)
    cos = unit @ mu / mu_norm if mu_norm > 0 else np.zeros(len(keys))
    age = np.log1p(np.maximum(now - pos, 0))
    return np.stack([np.ones(len(keys)), norms, cos, age, (pos < 4).astype(np.float64)], axis=1)


def score(view, params, state):
    f = features(view.keys.astype(np.float64), view.pos, view.now)
    w = weights().copy()
    w[3] *= params["scale"]          # scale=0 drops the age term: a content-only variant
    return f @ w


KVTRACE_POLICIES = [dict(
    name="learned",
    summary="a linear score of five key features, weights fitted offline (learned_weights.npy)",
    params=[dict(key="scale", default=1.0, min=0.0, max=10.0, doc="the weight of the age feature, times this")],
    score=score,
)]
