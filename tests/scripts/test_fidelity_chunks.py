"""`kvtrace fidelity --chunks LIST` on stories260K (docs/fidelity.md#several-chunk-sizes---chunks-list): every
configuration at each prefill chunk, the chunk a column of fidelity.csv, positions.csv and misordered.csv and
part of summary.csv's groups; the per-position KL of each (policy, budget, chunk) equals numpy's KL between the
logits of a full capture and of `capture --evict --chunk B` on the same tokens (the lockstep at several chunks,
with chunks 4 and 6 that do not divide each other); sim's columns are sim --chunks' summary.csv; the rank groups
are (budget, chunk); with --prompts, answer.csv and summary.csv carry the chunk. --chunk with --chunks, or a chunk
twice, exits 2 with one line and nothing written. TAP."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvrun import capture, run, write_tokens  # noqa: E402
from test_fidelity import kl_rows, rows  # noqa: E402  (numpy's per-position KL, written apart from fidelity/kl.c)
from tap import NO_MODEL, check, close, finish, model_file, skip  # noqa: E402

MODEL = model_file()
CHUNKS = (4, 6)
BUDGETS = (8, 12)
POLICIES = ("keydiff", "streaming", "h2o")
IDS = [1, 400, 500, 401, 402, 403, 404, 405, 300, 200, 100, 50, 60, 70, 80, 90, 99, 120, 130, 140, 150, 160, 170,
       180, 190, 210, 220, 230, 240, 250, 260, 270, 280]


def check_positions(tmp, out, tok):
    pos = rows(os.path.join(out, "positions.csv"))
    with capture(os.path.join(tmp, "full.h5"), MODEL, tok, "--attention", "none", "--chunk", "2") as f:
        full = f["logits"][:]
    for policy in POLICIES:
        for b in BUDGETS:
            for c in CHUNKS:
                with capture(os.path.join(tmp, "ev_%s_%d_%d.h5" % (policy, b, c)), MODEL, tok, "--attention", "none",
                             "--chunk", str(c), "--evict", policy, "--budget", str(b)) as f:
                    ev = f["logits"][:]
                want = kl_rows(full, ev)[b:]
                got = [float(p["kl"]) for p in pos
                       if (p["policy"], p["budget"], p["chunk"]) == (policy, str(b), str(c))]
                close("%s N=%d B=%d: per-position KL equals numpy's on the capture logits" % (policy, b, c), got,
                      want, 1e-6, 1e-4)


def check_tables(out):
    cfg = rows(os.path.join(out, "fidelity.csv"))
    want_keys = [(p, str(b), str(c)) for p in POLICIES for c in CHUNKS for b in BUDGETS]
    check([(r["policy"], r["budget"], r["chunk"]) for r in cfg] == want_keys,
          "fidelity.csv: one row per configuration at each chunk, policy-major, then chunk, then budget (sim's order)",
          [(r["policy"], r["budget"], r["chunk"]) for r in cfg])
    sim = {(s["config"], s["budget"], s["chunk"]): s for s in rows(os.path.join(out, "sim", "summary.csv"))
           if s["phase"] == "all"}
    cols = ("out_rel_err_mean", "out_rel_err_p95", "attn_recall_mean")
    check(all(r[k] == sim[(r["config"], r["budget"], r["chunk"])][k] for r in cfg for k in cols),
          "sim's columns are sim --chunks' summary.csv of the same (config, budget, chunk)")
    summ = rows(os.path.join(out, "summary.csv"))
    groups = [(s["budget"], s["chunk"]) for s in summ]
    check(groups == [("", "")] + [(str(b), str(c)) for c in CHUNKS for b in BUDGETS],
          "summary.csv: the pooled row (no budget, no chunk), then one per (budget, chunk)", groups)
    bad = []
    for s in summ[1:]:
        mine = [r for r in cfg if (r["budget"], r["chunk"]) == (s["budget"], s["chunk"])]
        pairs = sum(1 for i, a in enumerate(mine) for b in mine[i + 1:] if a["out_rel_err_mean"] != b["out_rel_err_mean"])
        mis = sum(1 for a in mine for b in mine if float(a["out_rel_err_mean"]) < float(b["out_rel_err_mean"]) and
                  float(a["kl_mean"]) > float(b["kl_mean"]))
        if (int(s["n_configs"]), int(s["n_pairs"]), int(s["n_misordered"])) != (len(mine), pairs, mis):
            bad.append((s, len(mine), pairs, mis))
    check(not bad, "summary.csv: each group's configurations, pairs and mis-ordered pairs are those of one budget at "
          "one chunk", bad)
    mis = rows(os.path.join(out, "misordered.csv"))
    byk = {(r["config"], r["budget"], r["chunk"]): r for r in cfg}
    check(all((m["config_a"], m["budget"], m["chunk"]) in byk and (m["config_b"], m["budget"], m["chunk"]) in byk
              for m in mis), "misordered.csv: both sides of a pair at its budget and chunk (%d pairs)" % len(mis))


def check_prompts(tmp):
    pf = os.path.join(tmp, "p.jsonl")
    with open(pf, "w") as f:
        f.write('{"id": "tom", "text": "Tom had a red ball. He threw the ball to his friend Sam. Sam was happy.", '
                '"answer": " Sam was happy."}\n')
    out = os.path.join(tmp, "fidp")
    r = run("fidelity", "--quiet", "--model", MODEL, "--prompts", pf, "--policies", "streaming", "--budgets", "8",
            "--chunks", "4,6", "--threads", "2", "-o", out)
    if not check(r.returncode == 0, "fidelity --prompts --chunks runs", r.stderr):
        return
    ans, summ = rows(os.path.join(out, "answer.csv")), rows(os.path.join(out, "summary.csv"))
    check([a["chunk"] for a in ans] == ["4", "6"] and [s["chunk"] for s in summ] == ["4", "6"],
          "--prompts: answer.csv and summary.csv, one row per chunk", ([a["chunk"] for a in ans], len(summ)))


def check_refusals(tmp, tok):
    for what, args in (("--chunk with --chunks", ["--chunk", "4", "--chunks", "4,6"]),
                       ("a chunk twice", ["--chunks", "4,04"]), ("a chunk of 0", ["--chunks", "0,4"])):
        out = os.path.join(tmp, "refused")
        r = run("fidelity", "--model", MODEL, "--tokens", tok, "--policies", "streaming", "--budgets", "8", *args,
                "-o", out)
        check(r.returncode == 2 and r.stderr.strip().count("\n") == 0 and not os.path.exists(out),
              "%s: exit 2, one line, nothing written" % what, (r.returncode, r.stderr))


def main():
    if not MODEL:
        skip("fidelity --chunks on stories260K", NO_MODEL)
        return finish()
    with tempfile.TemporaryDirectory() as tmp:
        tok = write_tokens(tmp, "ids.json", IDS)
        out = os.path.join(tmp, "fid")
        r = run("fidelity", "--quiet", "--model", MODEL, "--tokens", tok, "--policies", ",".join(POLICIES),
                "--budgets", ",".join(map(str, BUDGETS)), "--chunks", ",".join(map(str, CHUNKS)), "--threads", "2",
                "-o", out)
        if check(r.returncode == 0, "fidelity --chunks 4,6 runs", r.stderr):
            check_tables(out)
            check_positions(tmp, out, tok)
        check_prompts(tmp)
        check_refusals(tmp, tok)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
