"""pyh2o: the built-in h2o (normalize=none) restated in Python, for tests/scripts/test_pyplugin.py: observe()
adds every query row of each chunk's attention to the candidates' sums, kept by position in the stream's state
(create), in the built-in's order (policies/attn_hist.c: the previous sum, then the rows in order, in double);
score() looks them up (0 for a position never seen) and protects the most recent floor(recent * N)."""
import math

import numpy as np


def create(params):
    return {"pos": np.zeros(0, np.int64), "acc": np.zeros(0)}


def lookup(state, pos):
    i = np.searchsorted(state["pos"], pos)
    hit = i < len(state["pos"])
    hit[hit] = state["pos"][i[hit]] == pos[hit]
    out = np.zeros(len(pos))
    out[hit] = state["acc"][i[hit]]
    return out


def observe(view, params, state):
    attn = view.attn
    if attn is None or view.n == 0:
        return
    pos = view.pos.copy()                  # the view's memory is reused after the call
    acc = lookup(state, pos)
    for r in range(view.n_queries):
        acc += attn[r]
    state["pos"], state["acc"] = pos, acc


def score(view, params, state):
    s = lookup(state, view.pos)
    k = min(int(math.floor(params["recent"] * view.budget + 1e-9)), view.budget, view.n) if params["recent"] > 0 else 0
    if k > 0:
        s[view.n - k:] = np.inf
    return s


KVTRACE_POLICIES = [dict(
    name="pyh2o",
    summary="h2o restated in Python (test)",
    params=[dict(key="recent", default=0.5, min=0.0, max=1.0, doc="fraction of the budget kept for the most recent")],
    needs_attention=True,
    scores_comparable=True,
    create=create,
    observe=observe,
    score=score,
)]
