"""pytova: the built-in tova restated in Python, for tests/scripts/test_pyplugin.py: the attention the
chunk's last query gives each candidate (mean over the layer's or the kv group's query heads, as the engine
averages it), with tova's scope parameter deciding one kept set per layer or per kv head."""
import numpy as np


def score(view, params, state):
    if view.attn is None or view.n_queries == 0:
        return np.zeros(view.n)
    return view.attn[-1].astype(np.float64)


KVTRACE_POLICIES = [dict(
    name="pytova",
    summary="tova restated in Python (test)",
    params=[dict(key="scope", choices=["layer", "group"], default="layer",
                 doc="layer: one kept set for all kv heads of a layer; group: one per kv head")],
    needs_attention=True,
    layer_scope=("scope", "layer"),
    scores_comparable=True,
    score=score,
)]
