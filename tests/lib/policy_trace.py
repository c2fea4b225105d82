"""Helpers for the per-policy numpy checks (tests/scripts/test_policy_*.py): a small synthetic trace
from given arrays, a sim run, and the kept sets of one run of results.h5."""
import os
import subprocess

import h5py
import numpy as np


def write_trace(path, keys, values, queries, prompt_len, rope_style="neox", rope_theta=10000.0, creator="test"):
    """keys, values [L][K][T][D], queries [L][H][T][D] (float32 on disk)."""
    L, K, T, D = keys.shape
    with h5py.File(path, "w") as f:
        a = f.attrs
        a["kvtrace_schema"] = np.array([1, 0], dtype=np.int32)
        for k, v in dict(creator=creator, model_name="brute", architecture="llama", rope_style=rope_style,
                         capture_mode="full", storage_dtype="f32").items():
            a[k] = v
        for k, v in dict(n_layers=L, n_heads=queries.shape[1], n_kv_heads=K, head_dim=D, n_tokens=T,
                         prompt_len=prompt_len, vocab_size=100, capture_chunk=0).items():
            a[k] = np.int64(v)
        a["rope_theta"] = rope_theta
        f["tokens"] = (np.arange(T) % 100).astype(np.int32)
        f["keys"], f["values"], f["queries"] = (x.astype(np.float32) for x in (keys, values, queries))


def run_sim(trace, out, policies, budgets, B, dc, threads="2"):
    return subprocess.run([os.environ["KVTRACE"], "sim", trace, "--policies", ",".join(policies), "--budgets",
                           ",".join(map(str, budgets)), "--chunk", str(B), "--decode-chunk", str(dc),
                           "--threads", threads, "--quiet", "-o", out], capture_output=True, text=True)


def kept(out, policy, params, N):
    """[layer][kv head] -> the run's final kept positions."""
    with h5py.File(os.path.join(out, "results.h5"), "r") as rh:
        for g in rh["runs"].values():
            if g.attrs["policy"] == policy and g.attrs["params"] == params and int(g.attrs["budget"]) == N:
                r = g["retained"][:]
                return [[list(x[x >= 0]) for x in r[l]] for l in range(r.shape[0])]
    raise KeyError((policy, params, N))


def load(trace):
    """queries, keys, values in float64."""
    with h5py.File(trace, "r") as f:
        return tuple(f[n][:].astype(np.float64) for n in ("queries", "keys", "values"))


def one_thread_same(trace, out_two, policies, budgets, B, dc):
    """Runs sim again with 1 thread: (results.csv byte-identical to out_two's, sim's stderr)."""
    import filecmp
    one = out_two + "_1thread"
    r = run_sim(trace, one, policies, budgets, B, dc, threads="1")
    same = r.returncode == 0 and filecmp.cmp(os.path.join(out_two, "results.csv"), os.path.join(one, "results.csv"),
                                             shallow=False)
    return same, r.stderr
