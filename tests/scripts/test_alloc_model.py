"""Budget allocators inside the model run (capture --evict P --allocator A,
docs/allocators.md#in-the-model-capture---evict-p---allocator-a-fidelity---allocators) on stories260K (L = 5, K = 4):

- with every allocator at a budget where no stream can fill (N >= T; for
  pyramid N large enough that its top layer's capacity is >= T too) the
  evicting run equals the full run exactly (logits, log-probabilities, keys,
  values, queries);
- the first eviction keeps what sim keeps: the run's /evict/retained snapshot
  at its first evicting step (the first where some (layer, kv head) holds
  fewer rows than positions seen) equals, set for set, sim's final kept sets
  under the same policy, allocator, N and B on the full-cache trace cut at
  that step (for policies with comparable scores, one without, and one of
  layer scope);
- the trace records the allocator (evict_allocator) and per-head kept counts
  (snapshots -1 padded to the most one head can keep), and every snapshot
  keeps what the allocator says: static, each head its capacity once full;
  adakv, each layer K*N once full, each head >= 1;
- memory: the rows in use together (--stats rows_peak) never exceed
  L*K*N + L*K*B;
- fidelity --allocators: one row per (policy, allocator, budget), in-model
  numbers per allocator, sim's replay under the same allocator (its
  sim/summary.csv row), rows_peak within L*K*N + L*K*B;
- the head-score allocators (headkv, duo) with `--head-scores FILE` (a
  seeded random ranking), duo's streaming heads running streaming:sinks=S as
  sim's do; the whole-model ones (cake, global) evicting every layer
  together at the chunk's end: the same three properties, each static
  stream holding min(its capacity, positions seen), each model-wide
  snapshot holding L*K*N once evicting, and rows_peak exactly
  L*K*N + L*K*B for the model-wide ones (every layer holds its chunk at
  once before the step);
- bad input (--allocator without --evict, unknown allocator or parameter, a
  budget too small for pyramid, --head-scores that no allocator reads, a
  head-score file with a missing row: exit 3 naming the file and the row,
  duo or headkv without a ranking, global with a policy whose scores do not
  compare): exit 2 (3 for the file), one line, nothing written; fidelity
  refuses the same. TAP."""
import csv
import os
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kvrun import run, write_tokens  # noqa: E402
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402

MODEL = model_file()
N, B = 32, 16
ALLOCATORS = ["uniform", "pyramid:window=8", "adakv", "adakv:alpha=0.5", "headkv", "duo", "cake", "global"]
LABELS = {"uniform": "uniform", "pyramid:window=8": "pyramid:beta=20:window=8", "adakv": "adakv:alpha=0.2",
          "adakv:alpha=0.5": "adakv:alpha=0.5", "headkv": "headkv:beta=1.01",
          "duo": "duo:ratio=0.5:recent=-1:sinks=4", "cake": "cake:tau1=1.6:tau2=0.6:window=32",
          "global": "global"}  # canonical: every parameter, defaults filled
POLICIES = ["snapkv:window=8", "h2o", "keydiff", "tova:scope=layer"]
COMPARABLE = ("snapkv", "h2o", "tova")  # kvtrace policies: scores global can pool (keydiff's cannot)
MODEL_WIDE = ("cake", "global")
HEAD_SCORES = None  # the --head-scores file (main writes it)


def ranked(alloc):
    """The options an allocator reading a head ranking needs."""
    return ["--head-scores", HEAD_SCORES] if alloc.split(":")[0] in ("headkv", "duo") else []


def capture(tmp, name, tokens, *args):
    out = os.path.join(tmp, name)
    r = run("capture", "--quiet", "--logits", "--model", MODEL, "--tokens", tokens, "--chunk", str(B), "--force",
            "-o", out, *args)
    if r.returncode != 0:
        raise RuntimeError("capture %s failed (%d): %s" % (name, r.returncode, r.stderr.strip()))
    return out, r.stderr


def pyramid_caps(N, L, w, beta=20.0):
    """docs/allocators.md's closed form, rounded by largest remainder (test_alloc.py's)."""
    lo = (N - w) / beta
    hi = 2 * (N - w) - lo
    x = np.array([w + hi - l * (hi - lo) / (L - 1) for l in range(L)])
    f = np.floor(x)
    extra = int(round(L * N - f.sum()))
    out = f.astype(np.int64)
    for l in sorted(range(L), key=lambda l: (-(x[l] - f[l]), l))[:extra]:
        out[l] += 1
    return out


def sets(snap):
    """[L][K] -> sorted kept positions of each (layer, kv head), padding dropped."""
    return [[tuple(sorted(int(p) for p in row if p >= 0)) for row in layer] for layer in snap]


def full_equals(tmp, long_tok, full):
    with h5py.File(full, "r") as f:
        ref = {d: f[d][:] for d in ("logits", "logprobs", "keys", "values", "queries")}
        T = len(f["tokens"])
    # pyramid's top layer: 8 + 1992/20 >= T; headkv's least important head keeps about N/100 + its share;
    # duo's streaming heads keep 4 + 100 and its full heads (20*200 - 10*104)/10
    budgets = {"pyramid:window=8": 2000, "headkv": 20000, "duo:recent=100": 200}
    for alloc in [a for a in ALLOCATORS if a != "duo"] + ["duo:recent=100"]:
        budget = budgets.get(alloc, T)
        path, _ = capture(tmp, "big.h5", long_tok, "--evict", "snapkv", "--budget", str(budget), "--allocator", alloc,
                          "--retained", *ranked(alloc))
        with h5py.File(path, "r") as e:
            same = all(np.array_equal(ref[d], e[d][:], equal_nan=True) for d in ref)
            kept = (e["evict/retained"][-1] >= 0).sum(-1)
            check(same and (kept == T).all(), "%s at N = %d (no stream fills): the run equals the full run exactly"
                  % (alloc, budget))


def first_evicting_step(snaps, ends):
    for s in range(len(ends)):
        if ((snaps[s] >= 0).sum(-1) < ends[s] + 1).any():
            return s
    return None


def conservation(alloc, snaps, ends, L, K):
    """Every snapshot against the allocator's rule; True when all hold."""
    counts = (snaps >= 0).sum(-1)  # [S, L, K]
    if alloc in MODEL_WIDE:  # the model's pool: L*K*N once evicting, each head >= 1
        return all(counts[s].sum() == L * K * min(N, ends[s] + 1) and counts[s].min() >= 1 for s in range(len(ends)))
    if alloc in ("headkv", "duo"):  # static, capacities from the ranking: the final (full) counts
        caps = counts[-1]
        return all((counts[s] == np.minimum(caps, ends[s] + 1)).all() for s in range(len(ends))) and \
            caps.sum() == L * K * N
    for s in range(len(ends)):
        seen = ends[s] + 1
        if alloc.startswith("adakv"):
            for l in range(L):
                if counts[s, l].sum() < K * seen and (counts[s, l].sum() != K * N or counts[s, l].min() < 1):
                    return False
        else:
            caps = pyramid_caps(N, L, 8) if alloc.startswith("pyramid") else np.full(L, N)
            want = np.minimum(caps[:, None], seen)
            if not (counts[s] == np.broadcast_to(want, (L, K))).all():
                return False
    return alloc.startswith("adakv") or counts[-1].sum() == L * K * N  # static: every stream full at the end


def first_eviction_is_sims(tmp, ids, long_tok):
    L = K = None
    for alloc in ALLOCATORS:
        for policy in POLICIES:
            if alloc == "global" and not policy.startswith(COMPARABLE):
                continue
            path, stats = capture(tmp, "ev.h5", long_tok, "--evict", policy, "--budget", str(N), "--allocator",
                                  alloc, "--retained", "--stats", *ranked(alloc))
            with h5py.File(path, "r") as e:
                L, K = int(e.attrs["n_layers"]), int(e.attrs["n_kv_heads"])
                label = e.attrs["evict_allocator"]
                snaps, ends = e["evict/retained"][:], e["evict/step_end"][:]
            check(label == LABELS[alloc],
                  "%s %s: the trace's evict_allocator is %s" % (policy, alloc, label))
            check(conservation(alloc, snaps, ends, L, K),
                  "%s %s: every snapshot keeps what the allocator says" % (policy, alloc))
            words = next(x for x in stats.splitlines() if x.startswith("capture-stats:")).split()[1:]
            peak = int(dict(zip(words[::2], words[1::2]))["rows_peak"])
            check(peak <= L * K * N + L * K * B, "%s %s: rows in use at most L*K*N + L*K*B (%d <= %d)"
                  % (policy, alloc, peak, L * K * N + L * K * B))
            if alloc in MODEL_WIDE:  # a full chunk after an eviction: every layer holds it before the step
                check(peak == L * K * N + L * K * B, "%s %s: the whole-model scope reaches the bound (rows_peak %d)"
                      % (policy, alloc, peak))
            s = first_evicting_step(snaps, ends)
            if s is None:
                check(False, "%s %s: the run evicts" % (policy, alloc))
                continue
            cut = int(ends[s]) + 1
            short_tok = write_tokens(tmp, "short.ids", ids[:cut])
            short, _ = capture(tmp, "short.h5", short_tok, "--attention", "none")
            res = os.path.join(tmp, "res")
            r = run("sim", short, "--quiet", "--force", "--policies", policy, "--allocators", alloc, "--budgets",
                    str(N), "--chunk", str(B), "--threads", "2", "-o", res, *ranked(alloc))
            if r.returncode != 0:
                check(False, "%s %s: sim runs" % (policy, alloc), r.stderr)
                continue
            with h5py.File(os.path.join(res, "results.h5"), "r") as f:
                want = [g["retained"][:] for g in f["runs"].values()][0]
            got = sets(snaps[s])
            check(got == sets(want), "%s %s: the first eviction (step %d, positions < %d) keeps what sim keeps"
                  % (policy, alloc, s, cut), lambda: "in-model %s\nsim %s" % (got[0], sets(want)[0]))


def fidelity_rows(out):
    """fidelity.csv's rows, their (policy, allocator, budget), and whether each row's offline
    numbers are sim/summary.csv's (phase all) for the same configuration."""
    with open(os.path.join(out, "fidelity.csv"), newline="") as f:
        cfg = list(csv.DictReader(f))
    with open(os.path.join(out, "sim", "summary.csv"), newline="") as f:
        sim = {(s["policy"], s["allocator"], s["budget"]): s for s in csv.DictReader(f) if s["phase"] == "all"}
    keys = [(c["policy"], c["allocator"], c["budget"]) for c in cfg]
    same = all(k in sim and abs(float(c["out_rel_err_mean"]) - float(sim[k]["out_rel_err_mean"])) <=
               1e-5 * abs(float(sim[k]["out_rel_err_mean"])) for k, c in zip(keys, cfg))
    return cfg, keys, same


def fidelity(tmp, tok):
    out = os.path.join(tmp, "fid")
    allocs = ["uniform", "adakv", "pyramid:window=8"]
    r = run("fidelity", "--quiet", "--model", MODEL, "--tokens", tok, "--policies", "h2o,keydiff", "--allocators",
            ",".join(allocs), "--budgets", "32,48", "--chunk", str(B), "--threads", "2", "-o", out)
    if not check(r.returncode == 0, "fidelity --allocators runs", r.stderr):
        return
    cfg, keys, offline_is_sims = fidelity_rows(out)
    want = [(p, LABELS[a], b) for p in ("h2o", "keydiff") for a in allocs for b in ("32", "48")]
    check(keys == want, "fidelity.csv: one row per (policy, allocator, budget), sim's order", keys)
    check(offline_is_sims, "fidelity.csv: each row's offline numbers are sim's replay under the same allocator")
    check(all(int(c["rows_peak"]) <= 5 * 4 * (int(c["budget"]) + B) for c in cfg),
          "fidelity.csv: rows_peak <= L*K*N + L*K*B")
    kl = {k: float(c["kl_mean"]) for k, c in zip(keys, cfg)}
    check(kl[("h2o", "uniform", "32")] != kl[("h2o", LABELS["pyramid:window=8"], "32")],
          "fidelity: the allocator changes the in-model run")
    with open(os.path.join(out, "misordered.csv")) as f:
        head = f.readline().strip().split(",")
    check(head[:8] == ["config_a", "policy_a", "params_a", "allocator_a", "config_b", "policy_b", "params_b",
                       "allocator_b"], "misordered.csv names each side's allocator", head)


def fidelity_ranked(tmp, tok):
    """headkv and duo with --head-scores, cake and global: each row's offline numbers are sim's."""
    out = os.path.join(tmp, "fid2")
    allocs = ["headkv", "duo", "cake", "global"]
    r = run("fidelity", "--quiet", "--model", MODEL, "--tokens", tok, "--policies", "h2o,snapkv:window=8",
            "--allocators", ",".join(allocs), "--head-scores", HEAD_SCORES, "--budgets", "32", "--chunk", str(B),
            "--threads", "2", "-o", out)
    if not check(r.returncode == 0, "fidelity --allocators headkv,duo,cake,global --head-scores runs", r.stderr):
        return
    cfg, keys, offline_is_sims = fidelity_rows(out)
    want = [(p, LABELS[a], "32") for p in ("h2o", "snapkv") for a in allocs]
    check(keys == want, "fidelity.csv: one row per (policy, allocator), headkv, duo, cake, global", keys)
    check(offline_is_sims,
          "fidelity.csv: each row's offline numbers are sim's replay under the same allocator and ranking")
    bound = 5 * 4 * (32 + B)
    check(all(int(c["rows_peak"]) == bound if c["allocator"].split(":")[0] in MODEL_WIDE else
              int(c["rows_peak"]) <= bound for c in cfg),
          "fidelity.csv: rows_peak <= L*K*N + L*K*B, reached by cake and global", [c["rows_peak"] for c in cfg])
    with open(os.path.join(out, "provenance.json")) as f:
        check('"head_scores"' in f.read(), "fidelity: provenance.json records the --head-scores file")


def one_line(r, code, out):
    lines = r.stderr.strip().splitlines()
    return r.returncode == code and len(lines) == 1 and lines[0].startswith("kvtrace: error:") and \
        not os.path.exists(out)


def bad_head_scores(tmp, tok):
    out = os.path.join(tmp, "x.h5")
    missing = os.path.join(tmp, "missing.csv")
    with open(HEAD_SCORES) as f:
        rows = f.read().splitlines()
    with open(missing, "w") as f:
        f.write("\n".join(rows[:3] + rows[4:]) + "\n")  # (layer 0, kv head 2) left out
    ev = ["--evict", "h2o", "--budget", "8"]
    for args, code, what in (
            (ev + ["--allocator", "adakv", "--head-scores", HEAD_SCORES], 2, "--head-scores that adakv does not read"),
            (ev + ["--head-scores", HEAD_SCORES], 2, "--head-scores under uniform"),
            (ev + ["--allocator", "duo"], 2, "duo without --head-scores (no ranking before the run)"),
            (ev + ["--allocator", "headkv"], 2, "headkv without --head-scores"),
            (["--evict", "keydiff", "--budget", "8", "--allocator", "global"], 2,
             "global with keydiff (scores not comparable)"),
            (ev + ["--allocator", "headkv", "--head-scores", missing], 3, "a head-score file with a missing row")):
        r = run("capture", "--quiet", "--model", MODEL, "--tokens", tok, "-o", out, *args)
        check(one_line(r, code, out), "capture refused (exit %d, one line, nothing written): %s" % (code, what),
              r.stderr)
    r = run("capture", "--quiet", "--model", MODEL, "--tokens", tok, "-o", out, *ev, "--allocator", "duo",
            "--head-scores", missing)
    check(missing in r.stderr and "layer 0, kv head 2" in r.stderr, "the bad file's message names it and the row",
          r.stderr)
    fid = os.path.join(tmp, "badfid")
    base = ["fidelity", "--quiet", "--model", MODEL, "--tokens", tok, "--policies", "h2o", "--budgets", "8", "-o", fid]
    for args, code, what in ((["--head-scores", HEAD_SCORES], 2, "--head-scores with no allocator reading it"),
                             (["--allocators", "duo"], 2, "duo without --head-scores"),
                             (["--allocators", "headkv", "--head-scores", missing], 3, "a bad head-score file")):
        r = run(*base, *args)
        check(one_line(r, code, fid), "fidelity refused (exit %d, one line, nothing written): %s" % (code, what),
              r.stderr)


def bad_input(tmp, tok):
    out = os.path.join(tmp, "x.h5")
    for args, what in ((["--allocator", "adakv"], "--allocator without --evict"),
                       (["--evict", "h2o", "--budget", "8", "--allocator", "nosuch"], "an unknown allocator"),
                       (["--evict", "h2o", "--budget", "8", "--allocator", "adakv:alpha=7"], "a parameter out of range"),
                       (["--evict", "h2o", "--budget", "8", "--allocator", "adakv:beta=1"], "an unknown parameter"),
                       (["--evict", "h2o", "--budget", "8", "--allocator", "pyramid"], "N below pyramid's window")):
        r = run("capture", "--quiet", "--model", MODEL, "--tokens", tok, "-o", out, *args)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and lines[0].startswith("kvtrace: error:")
              and not os.path.exists(out), "refused (exit 2, one line, nothing written): %s" % what, r.stderr)


def write_head_scores(tmp):
    """A seeded random ranking of the 5 x 4 heads (distinct scores: no ties)."""
    global HEAD_SCORES
    HEAD_SCORES = os.path.join(tmp, "heads.csv")
    rng = np.random.default_rng(17)
    with open(HEAD_SCORES, "w") as f:
        f.write("layer,kv_head,score\n")
        for i, s in enumerate(rng.permutation(20) + 1):
            f.write("%d,%d,%g\n" % (i // 4, i % 4, s / 20.0))


def main():
    if not MODEL:
        skip("allocators inside the model on stories260K", NO_MODEL)
        return finish()
    with tempfile.TemporaryDirectory() as tmp:
        path, _ = capture(tmp, "seq.h5", write_tokens(tmp, "bos.ids", [1]), "--generate", "99")
        with h5py.File(path, "r") as f:
            ids = f["tokens"][:]
        long_tok = write_tokens(tmp, "long.ids", ids)
        write_head_scores(tmp)
        full, _ = capture(tmp, "full.h5", long_tok)
        full_equals(tmp, long_tok, full)
        first_eviction_is_sims(tmp, ids, long_tok)
        fidelity(tmp, long_tok)
        fidelity_ranked(tmp, long_tok)
        bad_input(tmp, long_tok)
        bad_head_scores(tmp, long_tok)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
