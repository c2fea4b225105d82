"""KVzip (docs/policies.md#kvzip). `capture --kvzip` on the default model against a float64
numpy forward (tests/lib/hfmodel.py) over the sequence, the reconstruction template
(tokenised here with `kvtrace tokenize --no-special`, as kvpress's kvzip_press.py
encodes its prompt and suffix) and the sequence again: the largest softmax weight each
context key gets from the pass's queries, per layer and query head. The pass leaves the
rest of the trace as it was. The kvzip policy with one chunk holding the prompt keeps
numpy's top N of the source's score (max over the kv group, sinks at 1), the same with
any thread count. Refusals: no dataset (sim), a weight above 1 (sim), too long for the
model's context, --evict, a model without a tokenizer. TAP."""
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import ggufio  # noqa: E402
import hfmodel  # noqa: E402
from tap import NO_MODEL, check, close, finish, model_file, skip  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
CFG = {"hidden_size": 64, "num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 4,
       "vocab_size": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
L, H, K, D = 5, 8, 4, 8
G = H // K
PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."


def kv(*args):
    return subprocess.run([KVTRACE, *args], capture_output=True, text=True)


def gguf_weights(path):
    g = ggufio.read(path)[1]
    w = {"embed": g["token_embd.weight"], "norm": g["output_norm.weight"], "lm_head": g["output.weight"],
         "layers": []}
    for l in range(L):
        p = lambda n: g["blk.%d.%s.weight" % (l, n)]
        w["layers"].append({"attn_norm": p("attn_norm"), "wq": p("attn_q"), "wk": p("attn_k"), "wv": p("attn_v"),
                            "wo": p("attn_output"), "ffn_norm": p("ffn_norm"), "wg": p("ffn_gate"),
                            "wu": p("ffn_up"), "wd": p("ffn_down")})
    return w


def template_ids(model):
    ids = []
    for text in ("\n\nRepeat the previous context exactly.", "\n"):
        r = kv("tokenize", "--model", model, "--no-special", "--text", text)
        if r.returncode:
            raise RuntimeError(r.stderr)
        ids += json.loads(r.stdout)
    return ids


def numpy_kvzip(w, tokens, tmpl):
    """[L, H, T]: max over the reconstruction pass's queries of their causal softmax weight on key j < T."""
    T = len(tokens)
    seq = list(tokens) + list(tmpl) + list(tokens)
    r = hfmodel.forward_all(w, CFG, np.array(seq), style="interleaved")
    q, k = r["queries"], r["keys"]  # [L, H, S, D], [L, K, S, D]
    S = len(seq)
    mask = np.tril(np.ones((S, S), dtype=bool))[T:]
    out = np.zeros((L, H, T))
    for l in range(L):
        for h in range(H):
            s = q[l, h, T:] @ k[l, h // G].T / np.sqrt(D)
            s = np.where(mask, s, -np.inf)
            a = np.exp(s - s.max(1, keepdims=True))
            a /= a.sum(1, keepdims=True)
            out[l, h] = a[:, :T].max(0)
    return out


def topn(score, N):
    """The N highest, ties towards the later position (policy_select), ascending."""
    order = sorted(range(len(score)), key=lambda j: (-score[j], -j))
    return sorted(order[:N])


def capture_checks(tmp, model):
    out, plain = os.path.join(tmp, "kz.h5"), os.path.join(tmp, "plain.h5")
    r = kv("capture", "--quiet", "--model", model, "--prompt", PROMPT, "--chunk", "16", "--kvzip", "-o", out)
    check(r.returncode == 0, "capture --kvzip runs", r.stderr)
    r2 = kv("capture", "--quiet", "--model", model, "--prompt", PROMPT, "--chunk", "16", "-o", plain)
    check(r2.returncode == 0, "the same capture without --kvzip", r2.stderr)
    if r.returncode or r2.returncode:
        return None
    with h5py.File(out, "r") as f, h5py.File(plain, "r") as p:
        tokens = f["tokens"][:]
        got = f["attention/kvzip"][:]
        same = all(np.array_equal(f[n][:], p[n][:], equal_nan=True) for n in ("tokens", "keys", "values", "queries",
                                                               "attention/colsum", "logprobs"))
        check(same, "the reconstruction pass leaves keys, values, queries, colsum and logprobs as they were")
        check("attention/kvzip" not in p, "no /attention/kvzip without --kvzip")
        check("reconstruction" in f["attention/kvzip"].attrs["description"], "the dataset says what it holds")
    T = len(tokens)
    ref = numpy_kvzip(gguf_weights(model), tokens, template_ids(model))
    check(got.shape == (L, H, T), "/attention/kvzip is [L, H, T]", got.shape)
    close("kvzip = numpy's max attention from the reconstruction pass", got, ref, 2e-5, 1e-4)
    return out, got


def policy_checks(tmp, trace, score):
    T = score.shape[2]
    budgets = [5, 12, T - 3]
    specs = {"kvzip": 4, "kvzip:sinks=0": 0, "kvzip:sinks=9": 9}
    labels = {"kvzip": "kvzip:sinks=4", "kvzip:sinks=0": "kvzip:sinks=0", "kvzip:sinks=9": "kvzip:sinks=9"}
    got = {}
    for threads in ("1", "2"):
        o = os.path.join(tmp, "sim" + threads)
        r = kv("sim", trace, "--policies", ",".join(specs), "--budgets", ",".join(map(str, budgets)), "--chunk",
               str(T), "--threads", threads, "--quiet", "-o", o)
        check(r.returncode == 0, "sim kvzip with one chunk holding the prompt (threads %s)" % threads, r.stderr)
        if r.returncode:
            return
        with h5py.File(os.path.join(o, "results.h5"), "r") as rh:
            got[threads] = {(g.attrs["config"], int(g.attrs["budget"])): g["retained"][:] for g in rh["runs"].values()}
    check(all(np.array_equal(got["1"][k], got["2"][k]) for k in got["1"]), "kept sets do not depend on --threads")
    bad = []
    for spec, sinks in specs.items():
        for N in budgets:
            kept = got["1"].get((labels[spec], N))
            if kept is None:
                bad.append((spec, N, "no run", sorted(got["1"])))
                continue
            for l in range(L):
                for g in range(K):
                    s = score[l, g * G:(g + 1) * G].astype(np.float64).max(0)
                    s[:sinks] = 1.0
                    have = [int(y) for y in kept[l, g] if y >= 0]
                    if have != topn(s, N):
                        bad.append((spec, N, l, g, topn(s, N), have))
    check(not bad, "kvzip keeps numpy's top N of max-over-group attention (sinks score 1)", str(bad[:2]))


def refusals(tmp, model, trace):
    plain = os.path.join(tmp, "plain.h5")
    o = os.path.join(tmp, "nokz")
    r = kv("sim", plain, "--policies", "kvzip", "--budgets", "4", "--chunk", "8", "--quiet", "-o", o)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 3 and len(lines) == 1 and plain in lines[0] and "--kvzip" in lines[0]
          and not os.path.exists(o), "sim kvzip on a trace without /attention/kvzip: exit 3, one line", r.stderr)
    bad = os.path.join(tmp, "above1.h5")
    with h5py.File(trace, "r") as f, h5py.File(bad, "w") as b:
        for k in f.attrs:
            b.attrs[k] = f.attrs[k]
        for n in ("tokens", "keys", "values", "queries", "attention/kvzip"):
            b[n] = f[n][:]
        b["attention/kvzip"][1, 2, 3] = 1.5
    o = os.path.join(tmp, "above1")
    r = kv("sim", bad, "--policies", "kvzip", "--budgets", "4", "--chunk", "8", "--quiet", "-o", o)
    check(r.returncode == 3 and "above 1" in r.stderr and "layer 1, head 2, position 3" in r.stderr
          and not os.path.exists(o), "a kvzip weight above 1 is refused naming where", r.stderr)
    long_prompt = "the cat sat on the mat and " * 200
    o = os.path.join(tmp, "long.h5")
    r = kv("capture", "--quiet", "--model", model, "--prompt", long_prompt, "--kvzip", "-o", o)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(lines) == 1 and "reconstruction pass" in lines[0] and "2048" in lines[0]
          and not os.path.exists(o), "capture --kvzip past the model's context: exit 2, one line with the lengths",
          r.stderr)
    r = kv("capture", "--quiet", "--model", model, "--prompt", "hi", "--kvzip", "--evict", "h2o", "--budget", "4",
           "-o", o)
    check(r.returncode == 2 and "--evict" in r.stderr and not os.path.exists(o), "--kvzip with --evict: exit 2",
          r.stderr)
    r = kv("capture", "--quiet", "--model", "random:stories260k", "--kvzip", "-o", o)
    check(r.returncode == 2 and "tokenizer" in r.stderr and not os.path.exists(o),
          "--kvzip on a model without a tokenizer: exit 2", r.stderr)


def main():
    model = model_file()
    if not model:
        skip("kvzip capture and policy", NO_MODEL)
        return finish()
    with tempfile.TemporaryDirectory() as tmp:
        got = capture_checks(tmp, model)
        if got:
            policy_checks(tmp, got[0], got[1])
            refusals(tmp, model, got[0])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
