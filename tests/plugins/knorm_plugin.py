"""pyknorm: the built-in knorm (s = -|k|) restated in Python, for tests/scripts/test_pyplugin.py: the same
kept sets as knorm. |k|^2 is summed in double in the built-in's order (policies/vecmath.c: 16 lanes over the
whole blocks, combined in a fixed tree, then the tail in order), so the scores are the same doubles."""
import numpy as np


def norm16(k):
    n, D = k.shape
    full = D // 16 * 16
    a = np.zeros((n, 16))
    for b in range(0, full, 16):
        a += k[:, b:b + 16] * k[:, b:b + 16]
    s8 = a[:, :8] + a[:, 8:]
    s = ((s8[:, 0] + s8[:, 4]) + (s8[:, 2] + s8[:, 6])) + ((s8[:, 1] + s8[:, 5]) + (s8[:, 3] + s8[:, 7]))
    for d in range(full, D):
        s = s + k[:, d] * k[:, d]
    return np.sqrt(s)


def score(view, params, state):
    return -norm16(view.keys.astype(np.float64))


KVTRACE_POLICIES = [dict(name="pyknorm", summary="knorm restated in Python (test)", score=score)]
