"""kvpress's own pipeline beside kvtrace's in-model eviction (make bench-peers; docs/findings.md).

kvpress 0.5.5's KVPressTextGenerationPipeline runs transformers' SmolLM2-135M-Instruct (loaded from the same GGUF
kvtrace reads, dequantised to float32) on each prompt of a `kvtrace prompts ... --chat` file: the user message up
to the prompt's `question` span is the context, compressed once at prefill by the press; the question, the chat
template's end of turn and the answer prefix follow uncompressed at positions after the context; greedy decoding
of up to --max-new-tokens, stopping at the model's EOS. kvtrace runs the same token ids (the pipeline's own
context and question ids, concatenated) with `capture --evict POLICY --budget N --chunk Tc --evict-until Tc
--generate M --retained`, N = kvpress's compute_n_kept(Tc, ratio), Tc the context's ids.

adakv_snapkv is kvpress's AdaKVPress(SnapKVPress, alpha_safeguard=0.2), which keeps every key and masks the ones it
drops (kvpress's attention patch, applied here as its package does), against kvtrace's snapkv:preset=kvpress under
--allocator adakv:alpha=0.2.

Per (prompt, press, ratio): the kept sets after the context (kvpress's top-N of its press's scores per layer and
kv head, taken as its compress takes them; kvtrace's /evict/retained), their mean Jaccard over (layer, kv head);
both answers and whether each is correct (the continuation, leading white space stripped, starts with the answer,
docs/fidelity.md "The answer measures"); whether the generated ids agree. Wall time of each side over the whole
grid, both on this machine, one after the other, with the same threads. Writes DIR/peer_kvpress.csv and
DIR/peer_kvpress_summary.csv and prints the summary table."""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loading bars
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "real"))
import kvpress_harness  # noqa: E402  (kvpress's wheel, fetched and checked once)

# press name -> (kvtrace policy, kvpress class in its module, constructor arguments): the correspondences
# tests/real/test_kvpress.py measures on traces (docs/policies.md, "Agreement with kvpress"); ADAKV wraps a press in
# kvpress's AdaKVPress and runs kvtrace's policy under the adakv allocator
ADAKV = {"adakv_snapkv": "snapkv"}
ADAKV_ALPHA = 0.2
PRESSES = {
    "knorm": ("knorm", "knorm_press", "KnormPress", {}),
    "keydiff": ("keydiff", "keydiff_press", "KeyDiffPress", {}),
    "snapkv": ("snapkv:preset=kvpress", "snapkv_press", "SnapKVPress", {"window_size": 64, "kernel_size": 5}),
    "tova": ("tova", "tova_press", "TOVAPress", {}),
    "streaming": ("streaming", "streaming_llm_press", "StreamingLLMPress", {"n_sink": 4}),
    "expected_attention": ("expected_attention:epsilon=0", "expected_attention_press", "ExpectedAttentionPress", {}),
}
PRESSES.update({name: PRESSES[inner] for name, inner in ADAKV.items()})


def import_kvpress():
    """kvpress's pipeline and utils, imported past the package's __init__ (its other dependencies)."""
    root = kvpress_harness.fetch()
    kvpress_harness.presses()  # the namespace packages kvpress, kvpress.presses
    import importlib
    sys.modules.setdefault("kvpress.utils", importlib.import_module("kvpress.utils"))
    # what kvpress's __init__ does: head-wise masking (AdaKV) in every attention function
    importlib.import_module("kvpress.attention_patch").patch_attention_functions()
    pipeline = importlib.import_module("kvpress.pipeline")
    return root, pipeline, importlib.import_module("kvpress.utils")


def split_prompt(x):
    """(context, question, answer_prefix, answer) of a --chat prompts line: the user message split where its
    question span's text begins."""
    user = [m["content"] for m in x["messages"] if m["role"] == "user"]
    q = [s["text"] for s in x.get("spans", []) if s["name"] == "question"]
    if len(user) != 1 or len(q) != 1 or user[0].count(q[0]) != 1:
        raise SystemExit("peer_kvpress_pipeline: %s: needs one user message and its 'question' span (kvtrace prompts "
                         "TASK --chat)" % x.get("id"))
    at = user[0].index(q[0])
    return user[0][:at], user[0][at:], x.get("answer_prefix", ""), x["answer"]


def answered(text, answer):
    return text.lstrip().startswith(answer.strip())


class KeptRecorder:
    """Wraps a ScorerPress's score so that each layer's kept indices are taken as its compress takes them."""

    def __init__(self, press, n_kept_of):
        self.kept, self.scores = {}, {}
        score = press.score

        def recording(module, hidden_states, keys, values, attentions, kwargs):
            s = score(module, hidden_states, keys, values, attentions, kwargs)
            n = n_kept_of(keys.shape[2], press.compression_ratio)
            self.kept[module.layer_idx] = s.topk(n, dim=-1).indices[0].numpy()  # [K, n]
            self.context_len = keys.shape[2]
            self.scores[module.layer_idx] = s[0].detach().double().numpy()  # [K, Tc]
            return s
        press.score = recording


def run_kvpress(pipe, utils, presses, item, name, ratio, max_new):
    ctx, q, prefix, _ = item
    press, rec = None, None
    if name != "full":
        _, mod, cls, kw = PRESSES[name]
        press = getattr(getattr(presses, mod), cls)(compression_ratio=ratio, **kw)
        rec = KeptRecorder(press, utils.compute_n_kept)
        if name in ADAKV:
            press = presses.adakv_press.AdaKVPress(press=press, alpha_safeguard=ADAKV_ALPHA)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = pipe(ctx, question=q, answer_prefix=prefix, press=press, max_new_tokens=max_new)
    secs = time.perf_counter() - t0
    if name in ADAKV:  # AdaKV keeps every key and masks the dropped ones: kept = the complement, per kv head
        rec.kept, rec.scores = {}, None
        for l, layer in enumerate(pipe.model.model.layers):
            _, heads, pos = layer.self_attn.masked_key_indices
            rec.kept[l] = masked_complement(heads.numpy(), pos.numpy(), pipe.model.config.num_key_value_heads,
                                            rec.context_len)
    return out["answer"], rec, secs


def masked_complement(heads, pos, K, tc):
    """Per kv head, the positions [0, tc) that AdaKV did not mask."""
    kept = []
    for k in range(K):
        m = np.ones(tc, dtype=bool)
        m[pos[heads == k]] = False
        kept.append(np.flatnonzero(m))
    return kept


def run_kvtrace(kv, model, tmp, ids, tc, policy, n, max_new, threads, chunk=None, allocator=None):
    """kvtrace's run of ids: the context (tc ids) compressed once to n, or with chunk (chunked prefill, the paper's
    schedule) every prefill chunk of that size and every decode step evicting."""
    tok = os.path.join(tmp, "ids.txt")
    with open(tok, "w") as f:
        f.write(" ".join(map(str, ids)))
    out = os.path.join(tmp, "run.h5")
    args = [kv, "capture", "--model", model, "--tokens", tok, "--generate", str(max_new), "--record", "keys,values",
            "--dtype", "f16", "--threads", str(threads), "--quiet", "--force", "-o", out]
    if allocator:
        args += ["--allocator", allocator]
    if policy and chunk:
        args += ["--evict", policy, "--budget", str(n), "--chunk", str(chunk)]
    elif policy:
        args += ["--evict", policy, "--budget", str(n), "--chunk", str(tc), "--evict-until", str(tc), "--retained"]
    else:
        args += ["--chunk", str(tc)]
    t0 = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit("peer_kvpress_pipeline: kvtrace capture failed: " + r.stderr.strip())
    with h5py.File(out, "r") as f:
        gen = f["tokens"][len(ids):].tolist()
        kept = f["evict/retained"][0] if policy and not chunk else None  # [L, K, N] after the context's step
        if kept is not None and int(f["evict/step_end"][0]) != tc - 1:
            raise SystemExit("peer_kvpress_pipeline: kvtrace's first step ends at %d, not the context's end %d"
                             % (int(f["evict/step_end"][0]), tc - 1))
    os.remove(out)
    return gen, kept, secs


def jaccard(rec, kv_kept):
    """Mean and least Jaccard index over (layer, kv head) of kvpress's kept sets and kvtrace's; and the largest
    gap, relative to the head's largest |score|, between kvpress's score of a position only one side keeps and
    kvpress's N-th score (the threshold): near 0 when the sets differ only at near-ties."""
    js, gap = [], 0.0  # AdaKV (scores None): its threshold is the layer's, across heads; no gap
    for l in sorted(rec.kept):
        for k in range(kv_kept.shape[1]):
            a, b = set(rec.kept[l][k].tolist()), set(int(p) for p in kv_kept[l, k] if p >= 0)
            js.append(len(a & b) / len(a | b))
            if a != b and rec.scores is not None:
                sc = rec.scores[l][k]
                thr = np.sort(sc)[::-1][len(a) - 1]
                scale = np.max(np.abs(sc)) or 1.0
                gap = max(gap, max(abs(sc[p] - thr) / scale for p in a ^ b))
    return float(np.mean(js)), float(np.min(js)), gap if rec.scores is not None else float("nan")


def until_eos(ids, eos):
    for i, t in enumerate(ids):
        if t in eos:
            return ids[:i + 1]
    return ids


class Peer:
    """transformers' model and tokenizer from the GGUF, kvpress's pipeline on them, kvpress's presses."""

    def __init__(self, model_path, threads):
        torch.set_num_threads(threads)
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()
        _, pipeline_mod, self.utils = import_kvpress()
        self.presses = kvpress_harness.presses()
        d, fname = os.path.split(os.path.abspath(model_path))
        self.model_path, self.threads = model_path, threads
        self.tokenizer = AutoTokenizer.from_pretrained(d, gguf_file=fname)
        self.model = AutoModelForCausalLM.from_pretrained(d, gguf_file=fname, dtype=torch.float32,
                                                          attn_implementation="sdpa").eval()
        self.pipe = pipeline_mod.KVPressTextGenerationPipeline(model=self.model, tokenizer=self.tokenizer,
                                                               device="cpu")
        eos = self.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos])

    def compare(self, kv, tmp, x, names, ratios, max_new, chunk=None):
        """One prompt under every (press, ratio): the rows of peer_kvpress.csv; with chunk, also kvtrace's answer
        under chunked prefill at the same budget (kvtrace_chunked_*)."""
        item = split_prompt(x)
        pre = self.pipe.preprocess(item[0], [item[1]], item[2], int(1e10))
        cids, qids = pre["context_ids"][0].tolist(), pre["questions_ids"][0][0].tolist()
        tc, ids, rows = len(cids), cids + qids, []
        for name in names:
            for ratio in (ratios if name != "full" else [0.0]):
                ans_hf, kept_hf, s_hf = run_kvpress(self.pipe, self.utils, self.presses, item, name, ratio, max_new)
                n = self.utils.compute_n_kept(tc, ratio)
                policy = PRESSES[name][0] if name != "full" else None
                alloc = "adakv:alpha=%g" % ADAKV_ALPHA if name in ADAKV else None
                gen, kept_kv, s_kv = run_kvtrace(kv, self.model_path, tmp, ids, tc, policy, n, max_new, self.threads,
                                                 allocator=alloc)
                gen = until_eos(gen, self.eos)
                ans_kv = self.tokenizer.decode(gen, skip_special_tokens=True)
                jm, jmin, gap = jaccard(kept_hf, kept_kv) if policy else (1.0, 1.0, 0.0)
                chunked = ""
                if chunk and policy:
                    gc, _, s_c = run_kvtrace(kv, self.model_path, tmp, ids, tc, policy, n, max_new, self.threads, chunk,
                                             alloc)
                    chunked = self.tokenizer.decode(until_eos(gc, self.eos), skip_special_tokens=True)
                rows.append({"id": x["id"], "press": name, "policy": (policy or "full") + ("@" + alloc if alloc else ""),
                             "ratio": ratio,
                             "context_tokens": tc, "budget": n if policy else tc, "jaccard_mean": jm,
                             "jaccard_min": jmin, "tie_gap": gap, "answer": item[3], "kvpress_answer": ans_hf,
                             "kvtrace_answer": ans_kv, "kvpress_correct": int(answered(ans_hf, item[3])),
                             "kvtrace_correct": int(answered(ans_kv, item[3])),
                             "same_answer": int(ans_hf == ans_kv), "kvpress_s": s_hf, "kvtrace_s": s_kv})
                if chunk:
                    rows[-1].update({"chunk": chunk, "kvtrace_chunked_answer": chunked if policy else ans_kv,
                                     "kvtrace_chunked_correct": int(answered(chunked if policy else ans_kv, item[3]))})
                print("# %s %s r=%g: J %.3f, kvpress %r (%.2f s), kvtrace %r (%.2f s)" % (
                    x["id"], name, ratio, jm, ans_hf, s_hf, ans_kv, s_kv), flush=True)
        return rows


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def interval(x, seed=0, n=2000):
    """The mean of x and its 95% percentile bootstrap interval (n resamples, seeded)."""
    x = np.asarray(x, dtype=float)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n, len(x)))].mean(axis=1)
    return float(x.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def summarise(rows, names, ratios):
    summary = []
    for name in names:
        for ratio in (ratios if name != "full" else [0.0]):
            g = [r for r in rows if r["press"] == name and r["ratio"] == ratio]
            summary.append({"press": name, "policy": g[0]["policy"], "ratio": ratio, "prompts": len(g),
                            "jaccard_mean": np.mean([r["jaccard_mean"] for r in g]),
                            "jaccard_min": min(r["jaccard_min"] for r in g),
                            "kvpress_accuracy": np.mean([r["kvpress_correct"] for r in g]),
                            "kvtrace_accuracy": np.mean([r["kvtrace_correct"] for r in g]),
                            "same_answer": np.mean([r["same_answer"] for r in g]),
                            "kvpress_s": sum(r["kvpress_s"] for r in g), "kvtrace_s": sum(r["kvtrace_s"] for r in g)})
            for side in ("kvpress", "kvtrace", "kvtrace_chunked"):
                if side + "_correct" in g[0]:
                    m, lo, hi = interval([r[side + "_correct"] for r in g])
                    summary[-1].update({side + "_lo": lo, side + "_hi": hi})
                    summary[-1][side + "_accuracy"] = m
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kvtrace", required=True)
    ap.add_argument("--model", required=True, help="the GGUF both sides read")
    ap.add_argument("--prompts", required=True, help="kvtrace prompts TASK --chat output")
    ap.add_argument("--presses", default=",".join(PRESSES))
    ap.add_argument("--ratios", default="0.5,0.875", help="kvpress compression ratios")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--chunked", type=int, default=0, help="also kvtrace with chunked prefill of this chunk, every "
                    "step evicting (the paper's schedule), at the same budgets")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    names = ["full"] + [p for p in a.presses.split(",") if p]
    for p in names[1:]:
        if p not in PRESSES:
            raise SystemExit("peer_kvpress_pipeline: --presses: unknown '%s' (%s)" % (p, ", ".join(PRESSES)))
    ratios = [float(r) for r in a.ratios.split(",")]
    peer = Peer(a.model, a.threads)
    lines = [json.loads(s) for s in open(a.prompts) if s.strip()]
    os.makedirs(a.output, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for x in lines:
            rows += peer.compare(a.kvtrace, tmp, x, names, ratios, a.max_new_tokens, a.chunked or None)
    write_csv(os.path.join(a.output, "peer_kvpress.csv"), rows)
    summary = summarise(rows, names, ratios)
    write_csv(os.path.join(a.output, "peer_kvpress_summary.csv"), summary)
    em = lambda s, side: "%.2f [%.2f, %.2f]" % (s[side + "_accuracy"], s[side + "_lo"], s[side + "_hi"])  # noqa: E731
    ch = " kvtrace EM, chunk %d |" % a.chunked if a.chunked else ""
    print("| press | kvtrace policy | ratio | prompts | Jaccard mean (min) | kvpress EM | kvtrace EM |%s same answer |"
          " kvpress s | kvtrace s |" % ch)
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|" if a.chunked else ""))
    for s in summary:
        print("| %s | %s | %g | %d | %.3f (%.3f) | %s | %s |%s %.2f | %.1f | %.1f |" % (
            s["press"], s["policy"], s["ratio"], s["prompts"], s["jaccard_mean"], s["jaccard_min"],
            em(s, "kvpress"), em(s, "kvtrace"), " %s |" % em(s, "kvtrace_chunked") if a.chunked else "",
            s["same_answer"], s["kvpress_s"], s["kvtrace_s"]))
    hf_s, kv_s = sum(r["kvpress_s"] for r in rows), sum(r["kvtrace_s"] for r in rows)
    print("# wall over the grid (%d runs each, %d threads, torch %s): kvpress pipeline %.1f s, kvtrace capture %.1f s "
          "(each run a process: model load included); kvtrace's speed %.2fx kvpress's" % (
              len(rows), a.threads, torch.__version__, hf_s, kv_s, hf_s / kv_s))


if __name__ == "__main__":
    main()
