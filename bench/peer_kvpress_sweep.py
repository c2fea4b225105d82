"""The kvpress peer of a sweep (make bench, bench/bench_kvpress.py): kvpress 0.5.5 re-runs the model once per
configuration, as a researcher using it does. transformers' SmolLM2-135M-Instruct from the GGUF (float32, sdpa),
one prefill of the context per (press, budget) under `with press(model)` (kvpress compresses each layer's cache
in its forward hook), through the base model as kvpress's pipeline runs it (no output layer on the context);
each cache's length is checked to be N afterwards. The presses are peer_kvpress_pipeline.py's (the
correspondences tests/real/test_kvpress.py measures); N is a budget of kvtrace's, the compression ratio the one
whose compute_n_kept(T, ratio) is N.

  peer_kvpress_sweep.py --model GGUF --tokens FILE --presses knorm,keydiff --budgets 64,128 --threads 2

Prints one line `peer-kvpress-sweep: configurations C seconds S prefill P blas BLAS policies LIST`: S the
configurations' prefills summed, P one prefill without a press (the model alone), model load and torch's start-up
excluded; LIST the kvtrace policies of the presses, in order."""
import argparse
import os
import sys
import time

os.environ.setdefault("TQDM_DISABLE", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_kvpress_pipeline as pkp  # noqa: E402
from peer_sim_torch import blas_core  # noqa: E402


def prefill(model, ids, press=None):
    from transformers import DynamicCache
    cache = DynamicCache()
    t0 = time.perf_counter()
    with torch.inference_mode():
        if press is None:
            model.model(ids, past_key_values=cache, use_cache=True)
        else:
            with press(model):
                model.model(ids, past_key_values=cache, use_cache=True)
    return time.perf_counter() - t0, cache


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--presses", default="knorm,keydiff,snapkv,tova,streaming")
    ap.add_argument("--budgets", default="64,128,256,512")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    pkp.import_kvpress()
    presses = pkp.kvpress_harness.presses()
    d, fname = os.path.split(os.path.abspath(a.model))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=fname, dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    with open(a.tokens) as f:
        ids = torch.tensor([[int(x) for x in f.read().split()]])
    T = ids.shape[1]
    prefill(model, ids)  # warm-up: the first forward allocates and picks kernels
    plain, _ = prefill(model, ids)
    total, n = 0.0, 0
    for name in a.presses.split(","):
        _, mod, cls, kw = pkp.PRESSES[name]
        for N in (int(x) for x in a.budgets.split(",")):
            press = getattr(getattr(presses, mod), cls)(compression_ratio=1 - (N + 0.5) / T, **kw)
            secs, cache = prefill(model, ids, press)
            got = {layer.keys.shape[2] for layer in cache.layers}
            if got != {N}:
                sys.exit("peer-kvpress-sweep: %s at N = %d left caches of %s rows" % (name, N, sorted(got)))
            total, n = total + secs, n + 1
    policies = ",".join(pkp.PRESSES[name][0] for name in a.presses.split(","))
    print("peer-kvpress-sweep: configurations %d seconds %.3f prefill %.3f blas %s policies %s" %
          (n, total, plain, blas_core(), policies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
