"""kvtrace's policies against NVIDIA kvpress's own scoring code (docs/policies.md#agreement-with-kvpress), TAP.

kvpress (the PyPI wheel, version and sha256 in kvpress_harness.py) scores each layer of a trace through a stub
attention layer made from the trace alone (kvpress_harness.py: pre-RoPE queries, RoPE, /wo, attentions), in
float64 unless said; its kept set at budget N is the top N of its scores per kv head (what ScorerPress.compress
keeps), or for AdaKV and CriticalAdaKV the complement of the positions its compress masks. kvtrace's kept set is
`sim --chunk T+1` (one-shot prefill: one eviction of the whole prompt) from results.h5. Per configuration and
budget: the mean Jaccard index over (layer, kv head), and the verdict docs/policies.md gives it:
  exact      every kept set equal;
  ties       kvtrace's kept set is a top-N set of kvpress's own scores in every head (they differ only in the
             order of exact ties, which torch.topk leaves to its implementation);
  near J     documented edges (docs/policies.md says which), the Jaccard at least J.
Two traces: a 427-token stories260K run (head dimension 8) and 300 ids through random:llama-3.2-1b (16 layers,
32 query heads on 8 kv heads of dimension 64). Prints the table of Jaccard indices per press and budget.
Run by tests/run_all.sh with the test venv's Python (torch, transformers); KVTRACE and KVTRACE_MODEL_DIR set."""
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TQDM_DISABLE", "1")
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kvpress_harness as kh  # noqa: E402
from tap import check, finish, skip  # noqa: E402

KVTRACE = os.environ["KVTRACE"]
MODEL_DIR = os.environ.get("KVTRACE_MODEL_DIR")
ALIASES = ["--alias", "s64=snapkv:preset=kvpress"]
SIM_LABEL = {c: "snapkv:kernel=5:pool=avg:window=64" for c in ("s64", "snapkv:preset=kvpress")}  # presets expanded


def unpadded_chunk(T):
    """The largest Compactor chunk of at most 256 that divides the T - 12 candidates it scores (first 8, last 4
    protected): kvpress pads no chunk."""
    m = T - 12
    return max(c for c in range(1, 257) if m % c == 0)


def configurations(p, T):
    """(kvtrace config, allocator, the press's factory, inputs, verdict) per comparison; inputs: attentions (the
    press reads them), adakv (kept sets from its compress), per_budget (its scores depend on the ratio)."""
    snap = lambda: p.snapkv_press.SnapKVPress(window_size=64, kernel_size=5)  # noqa: E731
    rows = [
        ("knorm", "uniform", lambda: p.knorm_press.KnormPress(), {}, "exact"),
        ("keydiff", "uniform", lambda: p.keydiff_press.KeyDiffPress(), {}, "exact"),
        ("streaming", "uniform", lambda: p.streaming_llm_press.StreamingLLMPress(n_sink=4), {"per_budget": True},
         "exact"),   # its scores mark the budget's newest
        ("capkv", "uniform", lambda: p.cap_press.CapPress(), {}, "exact"),
        ("h2o:normalize=age:recent=0", "uniform", lambda: p.observed_attention_press.ObservedAttentionPress(),
         {"attentions": True}, "exact"),
        ("snapkv:preset=kvpress", "uniform", snap, {}, "near 0.98"),
        ("tova", "uniform", lambda: p.tova_press.TOVAPress(), {}, "near 0.98"),
        ("s64", "adakv:alpha=0.2", lambda: p.adakv_press.AdaKVPress(press=snap(), alpha_safeguard=0.2),
         {"adakv": True}, "near 0.98"),
        ("criticalkv:base=s64", "uniform", lambda: p.criticalkv_press.CriticalKVPress(press=snap()),
         {"per_budget": True}, "near 0.98"),   # its first stage keeps a share of the budget
        ("lagkv", "uniform", lambda: p.lagkv_press.LagKVPress(), {}, "ties"),
        ("expected_attention:epsilon=0", "uniform", lambda: p.expected_attention_press.ExpectedAttentionPress(), {},
         "exact"),
    ]
    # Compactor's attention term alone (blending 0: its sketch is torch.randn's, kvtrace's is its own generator):
    # exact where no chunk is padded, and the measured effect of kvpress's padding at the default chunk of 256
    c = unpadded_chunk(T)
    rows.append(("compactor:blending=0:chunk=%d" % c, "uniform",
                 lambda: p.compactor_press.CompactorPress(blending=0.0, chunk_size=c), {}, "exact"))
    rows.append(("compactor:blending=0:chunk=256", "uniform", lambda: p.compactor_press.CompactorPress(blending=0.0), {},
                 "near 0.5"))
    for lev in ("kv_product", "kv_avg", "key", "value"):
        cur = lambda lev=lev: p.cur_press.CURPress(leverage_type=lev)  # noqa: E731
        rows.append(("cur:leverage=" + lev, "uniform", cur, {}, "exact"))
    rows.append(("cur", "adakv:alpha=0.2", lambda: p.adakv_press.AdaKVPress(press=p.cur_press.CURPress(),
                                                                               alpha_safeguard=0.2),
                 {"adakv": True}, "exact"))
    return rows


def capture(out, *args):
    r = subprocess.run([KVTRACE, "capture", "--quiet", "--record", "keys,values,queries,wo", "--attention", "none",
                        "-o", out, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("capture failed: " + r.stderr.strip())


def kvtrace_kept(tmp, trace, T, rows, budgets):
    """{(config, allocator, budget): {(layer, kv head): set}} from one sim run per allocator."""
    out = {}
    for alloc in sorted({r[1] for r in rows}):
        configs = ",".join(r[0] for r in rows if r[1] == alloc)
        res = os.path.join(tmp, "res_%s_%s" % (os.path.basename(trace), alloc.split(":")[0]))
        r = subprocess.run([KVTRACE, "sim", trace, *ALIASES, "--policies", configs, "--allocators", alloc,
                            "--budgets", ",".join(map(str, budgets)), "--chunk", str(T + 1), "--quiet", "-o", res],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("sim failed: " + r.stderr.strip())
        with h5py.File(os.path.join(res, "results.h5"), "r") as f:
            for name in f["runs"]:
                g = f["runs"][name]
                label = g.attrs["config"]
                label = label.decode() if isinstance(label, bytes) else str(label)
                ret = g["retained"][:]
                sets = {(layer, h): {int(x) for x in ret[layer, h] if x >= 0}
                        for layer in range(ret.shape[0]) for h in range(ret.shape[1])}
                out[(label, alloc, int(g.attrs["budget"]))] = sets
    return out


def label_of(config, known):
    """The config label sim wrote for a --policies entry (defaults filled, an alias resolved)."""
    name = config.split(":")[0]
    hits = [k for k in known if k == config or k.split(":")[0] == name and all(
        part in k.split(":") for part in config.split(":")[1:])]
    return hits[0] if len(hits) == 1 else None


def compare(tmp, tag, trace, budgets, p, table):
    tr = kh.Trace(trace)
    rows = configurations(p, tr.T)
    ours = kvtrace_kept(tmp, trace, tr.T, rows, budgets)
    for config, alloc, make, inputs, verdict in rows:
        labels = sorted({k[0] for k in ours if k[1] == alloc})
        lab = label_of(SIM_LABEL.get(config, config), labels)
        if config.startswith("criticalkv"):
            lab = next((k for k in labels if k.startswith("criticalkv")), None)
        at = kh.kept_sets_at(tr, make, budgets, per_budget=inputs.get("per_budget", False),
                             attentions=inputs.get("attentions", False), adakv=inputs.get("adakv", False))
        for n in budgets:
            theirs, scores = at[n]
            mine = ours.get((lab, alloc, n))
            if mine is None:
                check(False, "%s: %s under %s at N=%d: sim wrote no such run" % (tag, config, alloc, n), labels)
                continue
            j = kh.jaccard(mine, theirs)
            table.append((tag, config, alloc, n, j, verdict))
            what = "%s: %s under %s at N=%d against kvpress: Jaccard %.3f" % (tag, config, alloc, n, j)
            if verdict == "exact":
                check(j == 1.0, what + " (exact)")
            elif verdict == "ties":
                check(kh.valid_top(mine, scores, n), what + " (kvtrace's sets are top-N sets of kvpress's scores: "
                      "equal up to the order of exact ties)")
            else:
                check(j >= float(verdict.split()[1]), what + " (documented edges)")
    return tr


def check_expected_attention_float32(tag, tr, p, n, table):
    """kvpress's float32 run of ExpectedAttention: scores that underflow to 0 and tie (docs/policies.md)."""
    make = lambda: p.expected_attention_press.ExpectedAttentionPress()  # noqa: E731
    exact, _ = kh.kept_sets(tr, make, n)
    f32, scores = kh.kept_sets(tr, make, n, dtype=torch.float32)
    zeros = sum(int((s[:, 4:] == 0).sum()) for s in scores)
    total = sum(s[:, 4:].size for s in scores)
    j = kh.jaccard(exact, f32)
    table.append((tag, "expected_attention (kvpress float32)", "uniform", n, j, "float32"))
    print("# %s: kvpress ExpectedAttention in float32: %d of %d scores are 0 (underflow); Jaccard %.3f against "
          "float64" % (tag, zeros, total, j))
    return zeros, j


def main():
    if not MODEL_DIR:
        skip("kvpress comparison", "KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)")
        return finish()
    try:
        p = kh.presses()
    except RuntimeError as e:
        check(False, "kvpress %s: %s" % (kh.KVPRESS_VERSION, e))
        return finish()
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        story, stories = os.path.join(tmp, "story.h5"), os.path.join(tmp, "stories.h5")
        model = os.path.join(MODEL_DIR, "stories260K.gguf")
        capture(story, "--model", model, "--prompt", "Once upon a time", "--generate", "422", "--chunk", "64")
        with h5py.File(story, "r") as f:   # the story as a prompt: replay evicts once, after the whole of it
            ids = [int(t) for t in f["tokens"][:]]
        with open(os.path.join(tmp, "story.json"), "w") as f:
            f.write("[" + ",".join(map(str, ids)) + "]")
        capture(stories, "--model", model, "--tokens", os.path.join(tmp, "story.json"), "--chunk", "64")
        with h5py.File(stories, "r") as f:
            T = f["keys"].shape[2]
        check(T == 427, "stories260K trace: 427 tokens", T)
        tr = compare(tmp, "stories260K", stories, (128, 256), p, table)
        check_expected_attention_float32("stories260K", tr, p, 128, table)
        ids = os.path.join(tmp, "ids.json")
        rng = np.random.default_rng(7)
        with open(ids, "w") as f:
            f.write("[" + ",".join(str(int(x)) for x in [1] + list(rng.integers(2, 32000, 299))) + "]")
        big = os.path.join(tmp, "llama1b.h5")
        capture(big, "--model", "random:llama-3.2-1b", "--tokens", ids, "--chunk", "64")
        tr = compare(tmp, "llama-3.2-1b (random)", big, (96, 192), p, table)
        zeros, j = check_expected_attention_float32("llama-3.2-1b (random)", tr, p, 96, table)
    print("# kvpress %s against kvtrace sim --chunk T+1: mean Jaccard over (layer, kv head)" % kh.KVPRESS_VERSION)
    print("# %-22s %-38s %-16s %5s %7s  %s" % ("trace", "configuration", "allocator", "N", "Jaccard", "verdict"))
    for tag, config, alloc, n, jac, verdict in table:
        print("# %-22s %-38s %-16s %5d %7.3f  %s" % (tag, config, alloc, n, jac, verdict))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
