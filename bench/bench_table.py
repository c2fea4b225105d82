"""make bench (the baseline table, bench/README.md): every row measured against its baseline in the
same run, then one markdown table `what | now | baseline | ratio | goal | met?` (bench/README.md says how
to read it). Rows:
  sim-rate   `kvtrace sim` (tova, keydiff; N = 128, 256; B = 64; 2 threads) on a synthetic llama-3.2-1b
             trace (T = 2048, 16 layers) against bench/peer_sim_torch.py (torch 2.13, batched over heads and
             configurations, the recorded full-cache reference read as sim reads it) on the same trace (its summary
             metrics and kept sets compared: same computation), GFLOP/s counted alike (every configuration's chunks
             over their candidates; both sides skip what the replay need not compute, so the rate is nominal); and
             against OpenBLAS sgemm (1024^3, 2 threads, the better of a run before and one after)
  keydiff    keydiff's scoring ns per candidate (timing.csv of that run) / reading its N + B keys once into
             float sums (the goal's baseline) and into double sums (the floor for a score in double), both ratios shown
  sim-T      `kvtrace sim` wall vs T (keydiff, tova, snapkv; N = 256, B = 64; llama-3.2-1b heads, 2 layers)
             at T = 1024 ... 8192: log-log least-squares exponent
  analyze    bench/bench_analyze.py's exponent (T = 2048 ... 8192, the traces' /queries and a sim's --results)
  llamacpp   bench/bench_llamacpp.py: `kvtrace capture` against llama.cpp on the same GGUF files
  capture    `kvtrace capture` of random:llama-3.2-1b against bench/peer_capture_torch.py (torch 2.13), the same
             token ids and recording: tokens/s and peak RSS, kvtrace with f32 and with bf16 weights in memory,
             the peer with f32 (T = 1024; T = 4096 too with BENCH_FULL=1)
  sweep      `kvtrace sim` of 40 configurations (10 policies x 4 budgets) on the f32 capture's trace / the
             capture's seconds (T = 1024; T = 8192 too with BENCH_FULL=1), with the work floor: the
             replay's attention FLOP over the capture's
  kvpress    bench/bench_kvpress.py: the sweep's configurations kvpress has presses for, kvtrace (one capture,
             one sim) against kvpress re-running the model per configuration (SmolLM2-135M, T = 1024)
Each ratio's row names the BLAS each side ran (bench_common.py: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are
unset for both). The peers need `make bench-deps` (the test venv with torch 2.13, node-llama-cpp, kvpress);
without them their rows say so and the rest run. BENCH_ROWS=sim-rate,capture,... runs some rows;
BENCH_THREADS (2) the threads of both sides."""
import csv
import math
import os
import re
import subprocess
import sys
import tempfile
import time

from bench_common import (FULL, KEYREAD, KV, ROOT, SGEMM, THREADS, capture_stats, env, exponent, kv_blas, met,
                          peer_python, ratio, run, timed, token_file)

ROWS = os.environ.get("BENCH_ROWS", "sim-rate,sim-T,analyze,llamacpp,capture,sweep,kvpress").split(",")
SWEEP_POLICIES = "keydiff,knorm,streaming,tova,snapkv,h2o,random,oracle,primekv,scissorhands"
SWEEP_BUDGETS = "64,128,256,512"
WEIGHTS = ("f32", "bf16")  # kvtrace capture's weights in memory (the peer: f32)
TABLE = []  # (tag, (what, now, baseline, ratio, goal, met)), printed in ORDER
ORDER = ("sim-peer", "sim-sgemm", "sim-T", "analyze", "keydiff", "llamacpp", "capture", "sweep", "kvpress")


def sgemm_gflops():
    return float(run([SGEMM, "1024", "1024", "1024", "2"]).stdout.split()[-1])


def attention_flops(L, H, D, T, budgets, B, n_policies):
    """As bench_sim.py: the causal full-cache reference once, plus each configuration's chunk attention."""
    ref = L * H * T * (T + 1) / 2 * 4 * D
    per = sum(L * H * sum(min(i + 1, N + B) * 4 * D for i in range(T)) for N in budgets) * n_policies
    return ref + per


def compare_sim(out, npz, budgets):
    """(worst relative difference of the summary metrics, kept positions that differ, kept positions)."""
    import h5py
    import numpy as np
    z = np.load(npz)
    worst, differ, total = 0.0, 0, 0
    with open(os.path.join(out, "summary.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["phase"] == "all"]
    runs = {}
    with h5py.File(os.path.join(out, "results.h5"), "r") as rh:
        for g in rh["runs"].values():
            runs[(g.attrs["policy"], int(g.attrs["budget"]))] = g["retained"][:]
    for r in rows:
        key = "%s_%s" % (r["policy"], r["budget"])
        got = [float(r[c]) for c in ("out_rel_err_mean", "out_rel_err_p95", "attn_recall_mean", "attn_recall_min")]
        for a, b in zip(got, z[key + "_summary"]):
            worst = max(worst, abs(a - b) / max(abs(a), 1e-30))
        mine, theirs = runs[(r["policy"], int(r["budget"]))], z[key + "_kept"]
        for x, y in zip(mine.reshape(-1, mine.shape[-1]), theirs.reshape(-1, theirs.shape[-1])):
            differ += len(set(x.tolist()) ^ set(y.tolist())) // 2
            total += len(x)
    return worst, differ, total


def row_sim_rate(tmp):
    T, B, budgets, pols = 2048, 64, [128, 256], ["tova", "keydiff"]
    trace = os.path.join(tmp, "r1b-%d.h5" % T)
    run([KV, "synth", "--like", "llama-3.2-1b", "--tokens", str(T), "--quiet", "-o", trace])
    L, H, D = 16, 32, 64
    # the replay's attention, every configuration's chunks over their candidates: sim reads the full-cache
    # reference the trace records (as capture writes it), and so does the peer (--reference recorded)
    flops = (attention_flops(L, H, D, T, budgets, B, len(pols)) - L * H * T * (T + 1) / 2 * 4 * D) / 1e9
    before = sgemm_gflops()
    out = os.path.join(tmp, "sim-rate")
    t0 = time.perf_counter()
    run([KV, "sim", trace, "--policies", ",".join(pols), "--budgets", ",".join(map(str, budgets)), "--chunk",
         str(B), "--threads", str(THREADS), "--quiet", "--force", "-o", out])
    wall = time.perf_counter() - t0
    base = max(before, sgemm_gflops())
    blas = kv_blas()
    rate = flops / wall
    print("sim-rate: llama-3.2-1b T=%d, %s x N=%s, B=%d, %d threads: kvtrace %.2f s = %.1f GFLOP/s (%.1f GFLOP); "
          "sgemm %.1f GFLOP/s; %s" % (T, "+".join(pols), budgets, B, THREADS, wall, rate, flops, base, blas))
    TABLE.append(("sim-sgemm", ("`sim` attention rate vs sgemm (T=%d)" % T, "%.1f GFLOP/s" % rate, "sgemm %.1f GFLOP/s" % base,
                  "%.0f%%" % (100 * rate / base), ">= 80%", met(rate / base, goal_min=0.8))))
    row_keydiff(out, D, B)
    py = peer_python()
    if not py:
        print("sim-rate: peer skipped: the test venv with torch 2.13 is not made (make bench-deps)")
        TABLE.append(("sim-peer", ("`sim` attention rate vs PyTorch replay", "%.1f GFLOP/s" % rate,
                      "not run (make bench-deps)", "—", ">= 2.5x", "—")))
        return
    npz = os.path.join(tmp, "peer-sim.npz")
    r = run([py, os.path.join(ROOT, "bench", "peer_sim_torch.py"), trace, "--policies", ",".join(pols),
             "--budgets", ",".join(map(str, budgets)), "--chunk", str(B), "--threads", str(THREADS), "--reference",
             "recorded", "-o", npz])
    f = r.stdout.split()
    psecs, pblas = float(f[2]), f[4]
    worst, differ, total = compare_sim(out, npz, budgets)
    same = worst <= 1e-5
    print("sim-rate: PyTorch replay %.2f s = %.1f GFLOP/s; %s; summary metrics within %.1e relative of "
          "kvtrace's, kept positions differing %d of %d" % (psecs, flops / psecs, pblas, worst, differ, total))
    rt = ratio(rate, flops / psecs)
    if not same:
        rt = "ratio withheld: the metrics differ by %.1e relative (not the same computation)" % worst
    TABLE.append(("sim-peer", ("`sim` attention rate vs PyTorch replay (T=%d)" % T, "%.1f GFLOP/s (%s)" % (rate, blas),
                  "PyTorch %.1f GFLOP/s (%s)" % (flops / psecs, pblas), rt, ">= 2.5x",
                  met(rate * psecs / flops if same else None, goal_min=2.5))))


def keyread(n, D):
    """bench_keyread: ns per candidate to read n keys of D floats once, into float sums and into double sums."""
    f = run([KEYREAD, str(n), str(D), "0.4"]).stdout.split()
    return float(f[4]), float(f[6])


def keydiff_entry(meas):
    """meas: (N, ns per candidate, float read, double read) per budget -> the table row at the worst N. The
    goal is judged against the float read; the double read, the floor for a score accumulated in double
    (docs/sim.md#the-eviction-step-step-by-step), is shown beside it with its ratio."""
    N, ns, fr, dr = max(meas, key=lambda m: m[1] / m[2])
    return ("keydiff", ("keydiff scoring per candidate (worst N=%d)" % N, "%.2f ns" % ns,
                        "key read %.2f ns (float sums) / %.2f ns (double sums)" % (fr, dr),
                        "%.1fx float / %.1fx double" % (ns / fr, ns / dr), "<= 2x float", met(ns / fr, goal_max=2.0)))


def row_keydiff(out, D, B):
    meas = []
    with open(os.path.join(out, "timing.csv")) as f:
        for r in csv.DictReader(f):
            if r["policy"] != "keydiff":
                continue
            N, ns = int(r["budget"]), float(r["score_ns_per_candidate"])
            fr, dr = keyread(N + B, D)
            print("keydiff: N=%d scoring %.2f ns/candidate; reading its keys once %.2f ns into float sums (%.1fx), "
                  "%.2f ns into double sums (%.1fx)" % (N, ns, fr, ns / fr, dr, ns / dr))
            meas.append((N, ns, fr, dr))
    TABLE.append(keydiff_entry(meas))


def row_sim_T(tmp):
    ts = (1024, 2048, 4096, 8192)
    walls = []
    for T in ts:
        t = os.path.join(tmp, "h%d.h5" % T)
        run([KV, "synth", "--layers", "2", "--heads", "32", "--kv-heads", "8", "--head-dim", "64", "--rope-theta",
             "500000", "--tokens", str(T), "--seed", "24", "--quiet", "-o", t])
        t0 = time.perf_counter()
        run([KV, "sim", t, "--policies", "keydiff,tova,snapkv", "--budgets", "256", "--chunk", "64", "--threads",
             str(THREADS), "--quiet", "--force", "-o", os.path.join(tmp, "simT")])
        walls.append(time.perf_counter() - t0)
        os.remove(t)
    e = exponent(ts, walls)
    last = math.log(walls[-1] / walls[-2]) / math.log(2)
    print("sim-T: wall at T = %s: %s s; exponent %.2f (last doubling %.2f)" %
          (", ".join(map(str, ts)), ", ".join("%.2f" % w for w in walls), e, last))
    TABLE.append(("sim-T", ("`sim` wall vs T (keydiff, tova, snapkv; N=256, B=64; 1k→8k)", "exponent %.2f" % e,
                  "last doubling %.2f" % last, "—", "<= 1.2", met(e, goal_max=1.2))))


def row_analyze():
    r = run(["/usr/bin/python3", os.path.join(ROOT, "bench", "bench_analyze.py")], env(KVTRACE=KV))
    sys.stdout.write(r.stdout)
    e = float(re.search(r"with /queries and --results.*?exponent ([-\d.]+)", r.stdout).group(1))
    TABLE.append(("analyze", ("`analyze` time vs T (2k→8k, with /queries and --results)", "exponent %.2f" % e, "—", "—",
                  "<= 1.1", met(e, goal_max=1.1))))


def capture_kv(tok, trace, weights):
    r, rss = timed([KV, "capture", "--quiet", "--stats", "--model", "random:llama-3.2-1b:1", "--tokens", tok, "--chunk",
                    "128", "--threads", str(THREADS), "--weights", weights, "--force", "-o", trace])
    st = capture_stats(r.stderr)
    return st["tokens_per_s"], st["seconds"], rss, trace, st["gemm_gflop"] + st["attn_gflop"]


def capture_peer(py, tmp, T):
    out = os.path.join(tmp, "peer%d.h5" % T)
    p, rss = timed([py, os.path.join(ROOT, "bench", "peer_capture_torch.py"), "--tokens", str(T), "--chunk", "128",
                    "--threads", str(THREADS), "-o", out])
    os.remove(out)
    f = p.stdout.split()
    return float(f[6]), rss, f[8]


def capture_one(tmp, T, with_peer):
    """kvtrace with float32 and with bfloat16 weights in memory: {weights: (tokens/s, seconds, peak RSS MiB,
    trace, GFLOP)}; the peer (float32 weights, as PyTorch runs on a CPU): (tokens/s, peak RSS MiB, BLAS) or
    None. With the peer, each side runs BENCH_CAPTURE_REPS (2) times, alternating, the best rate of each kept:
    a neighbour's load during one run cannot decide the ratio. The f32 trace is the one the sweep replays."""
    tok = token_file(os.path.join(tmp, "tokens%d" % T), T)
    trace = {w: os.path.join(tmp, "cap%d_%s.h5" % (T, w)) for w in WEIGHTS}
    weights = WEIGHTS if with_peer else ("f32",)
    py = peer_python() if with_peer else None
    reps = int(os.environ.get("BENCH_CAPTURE_REPS", "2")) if py else 1
    mine, peer = {}, None
    for _ in range(reps):
        for w in weights:
            m = capture_kv(tok, trace[w], w)
            mine[w] = m if w not in mine or m[0] > mine[w][0] else mine[w]
        if py:
            p = capture_peer(py, tmp, T)
            peer = p if peer is None or p[0] > peer[0] else peer
    for w in weights[1:]:
        os.remove(trace[w])
    return mine, peer


def row_capture_and_sweep(tmp, do_capture, do_sweep):
    blas = kv_blas()
    caps = (1024, 4096) if FULL else (1024,)
    sweeps = (1024, 8192) if FULL else (1024,)
    for T in sorted(set(caps if do_capture else ()) | set(sweeps if do_sweep else ())):
        mine, peer = capture_one(tmp, T, do_capture and T in caps)
        for w, m in mine.items():
            print("capture: random:llama-3.2-1b T=%d, %s weights: kvtrace %.1f tokens/s (%.1f s), peak RSS %.0f MiB; "
                  "%s" % (T, w, m[0], m[1], m[2], blas))
        if peer:
            print("capture: PyTorch eager T=%d, f32 weights: %.1f tokens/s, peak RSS %.0f MiB; %s" %
                  (T, peer[0], peer[1], peer[2]))
            need, sg = 1.5 * peer[0] * mine["f32"][4] / T, sgemm_gflops()
            print("capture: 1.5x the peer's tokens/s at this T needs %.1f GFLOP/s of kvtrace's whole forward (its "
                  "GEMMs and attention, %.2f GFLOP per token); OpenBLAS sgemm 1024^3 runs at %.1f GFLOP/s here" %
                  (need, mine["f32"][4] / T, sg))
            for w, m in mine.items():
                TABLE.append(("capture", ("`capture` tokens/s vs PyTorch eager (T=%d, kvtrace %s weights)" % (T, w),
                              "%.1f tok/s (%s)" % (m[0], blas), "PyTorch %.1f tok/s (%s)" % (peer[0], peer[2]),
                              ratio(m[0], peer[0]), ">= 1.5x", met(m[0] / peer[0], goal_min=1.5))))
                TABLE.append(("capture", ("`capture` peak RSS vs PyTorch eager (T=%d, kvtrace %s weights)" % (T, w),
                              "%.0f MiB" % m[2], "PyTorch %.0f MiB" % peer[1], ratio(m[2], peer[1]), "—", "—")))
        elif do_capture and T in caps:
            print("capture: peer skipped: the test venv with torch 2.13 is not made (make bench-deps)")
            m = mine["f32"]
            TABLE.append(("capture", ("`capture` vs PyTorch eager (T=%d)" % T, "%.1f tok/s, %.0f MiB" % (m[0], m[2]),
                          "not run (make bench-deps)", "—", ">= 1.5x", "—")))
        if do_sweep and T in sweeps:
            row_sweep(tmp, T, mine["f32"])
        os.remove(mine["f32"][3])


def row_sweep(tmp, T, mine):
    t0 = time.perf_counter()
    run([KV, "sim", mine[3], "--policies", SWEEP_POLICIES, "--budgets", SWEEP_BUDGETS, "--chunk", "64", "--threads",
         str(THREADS), "--quiet", "--force", "-o", os.path.join(tmp, "sweep")])
    wall = time.perf_counter() - t0
    # The replay's attention alone (the reference is recorded by capture, so not recomputed): at the capture's
    # own rate this much work is a floor for the ratio that no scoring or bookkeeping speed-up can pass.
    budgets = [int(b) for b in SWEEP_BUDGETS.split(",")]
    n_pol = len(SWEEP_POLICIES.split(","))
    work = attention_flops(16, 32, 64, T, budgets, 64, n_pol) - 16 * 32 * T * (T + 1) / 2 * 4 * 64
    print("sweep: 40 configurations (%s x %s, B=64) on the T=%d capture: %.2f s; the capture %.2f s: %.3fx" %
          (SWEEP_POLICIES, SWEEP_BUDGETS, T, wall, mine[1], wall / mine[1]))
    print("sweep: work: the replay's attention %.2f TFLOP (%.1f GFLOP/s), the capture's GEMMs and attention %.2f "
          "TFLOP (%.1f GFLOP/s): at equal rates the ratio cannot go below %.3f" %
          (work / 1e12, work / 1e9 / wall, mine[4] / 1e3, mine[4] / mine[1], work / 1e9 / mine[4]))
    TABLE.append(("sweep", ("sweep economics: 40 configurations vs one capture (T=%d)" % T, "%.1f s" % wall,
                  "capture %.1f s" % mine[1], "%.3fx (work floor %.3fx)" % (wall / mine[1], work / 1e9 / mine[4]),
                  "<= 0.3x", met(wall / mine[1], goal_max=0.3))))


def print_table():
    print("\n## kvtrace against its baselines (this run; %d threads%s)\n" %
          (THREADS, "" if FULL else "; quick: BENCH_FULL=1 adds T=4096 captures and the sweep at T=8192"))
    print("| what | now | baseline | ratio | goal | met? |")
    print("|---|---|---|---|---|---|")
    for _, r in sorted(TABLE, key=lambda x: ORDER.index(x[0])):  # stable: a tag's rows as measured
        print("| " + " | ".join(r) + " |")


def row_llamacpp(tmp):
    import bench_llamacpp
    TABLE.extend(("llamacpp", r) for r in bench_llamacpp.rows(tmp))


def row_kvpress(tmp):
    import bench_kvpress
    TABLE.extend(("kvpress", r) for r in bench_kvpress.rows(tmp, SWEEP_BUDGETS))


def main():
    sys.stdout.reconfigure(line_buffering=True)
    for p in (KV, SGEMM, KEYREAD):
        if not os.access(p, os.X_OK):
            print("bench-table: skipped: %s is not built" % p)
            return 0
    print("bench-table: kvtrace's BLAS: %s; OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for both sides" % kv_blas())
    with tempfile.TemporaryDirectory(prefix="kvtrace-bench-table-") as tmp:
        parts = (("sim-rate", lambda: row_sim_rate(tmp)), ("sim-T", lambda: row_sim_T(tmp)), ("analyze", row_analyze),
                 ("llamacpp", lambda: row_llamacpp(tmp)),
                 ("capture", lambda: row_capture_and_sweep(tmp, "capture" in ROWS, "sweep" in ROWS)),
                 ("kvpress", lambda: row_kvpress(tmp)))
        for name, part in parts:
            if name in ROWS or (name == "capture" and "sweep" in ROWS):
                try:
                    part()
                except subprocess.CalledProcessError as e:  # one part's failure: said, and the others run
                    why = (e.stderr or "").strip().splitlines()[-1:] or ["exit %d" % e.returncode]
                    print("%s: failed: %s: %s" % (name, " ".join(map(str, e.cmd[:3])), why[0]))
                    TABLE.append(({"sim-rate": "sim-peer"}.get(name, name),
                                  ("%s: failed (%s)" % (name, why[0]), "—", "—", "—", "—", "—")))
    print_table()
    return 0


if __name__ == "__main__":
    sys.exit(main())
