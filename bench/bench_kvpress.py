"""make bench (kvpress): the sweep's configurations that kvpress has presses for (knorm, keydiff, snapkv, tova,
streaming at the sweep's four budgets), on SmolLM2-135M-Instruct at T = 1024, 2 threads. kvtrace: one capture
(the default recording) and one `kvtrace sim` of every configuration with the context compressed once
(`--chunk T`, kvpress's own schedule); kvpress: bench/peer_kvpress_sweep.py, one prefill per configuration.
Both exclude the model's load; the ratio is kvtrace's seconds over kvpress's (below 1: kvtrace is faster)."""
import os
import time

from bench_common import KV, THREADS, capture_stats, kv_blas, peer_python, run, token_file

T = 1024
PRESSES = ("knorm", "keydiff", "snapkv", "tova", "streaming")


def rows(tmp, budgets):
    what = "sweep's kvpress subset (%d presses x 4 budgets, SmolLM2-135M, T=%d) vs kvpress per configuration" % (
        len(PRESSES), T)
    py = peer_python()
    try:
        model = run([KV, "fetch", "smollm2-135m"]).stdout.strip()
    except Exception as e:  # noqa: BLE001  (the row says why; the others run)
        model, why = None, "SmolLM2 not fetched (%s)" % e
    if not py:
        why = "the test venv is not made (make bench-deps)"
    if not py or not model:
        print("kvpress: skipped: %s" % why)
        return [(what, "—", "not run: " + why, "—", "report", "—")]
    tok = token_file(os.path.join(tmp, "kvpress-tokens"), T, vocab=49000)
    p = run([py, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer_kvpress_sweep.py"), "--model", model,
             "--tokens", tok, "--presses", ",".join(PRESSES), "--budgets", budgets, "--threads", THREADS])
    f = p.stdout.split()
    n, peer, plain, pblas, policies = int(f[2]), float(f[4]), float(f[6]), f[8], f[10]
    trace = os.path.join(tmp, "kvpress-capture.h5")
    r = run([KV, "capture", "--model", model, "--tokens", tok, "--threads", THREADS, "--stats", "--quiet",
             "--force", "-o", trace])
    cap = capture_stats(r.stderr)["seconds"]
    t0 = time.perf_counter()
    run([KV, "sim", trace, "--policies", policies, "--budgets", budgets, "--chunk", T, "--threads", THREADS,
         "--quiet", "--force", "-o", os.path.join(tmp, "kvpress-sim")])
    sim = time.perf_counter() - t0
    os.remove(trace)
    mine = cap + sim
    print("kvpress: kvtrace capture %.2f s + sim of %d configurations %.2f s = %.2f s (%s); kvpress %d prefills "
          "%.2f s (%.2f s each; one without a press %.2f s; %s): %.3fx" %
          (cap, n, sim, mine, kv_blas(), n, peer, peer / n, plain, pblas, mine / peer))
    return [(what, "kvtrace %.1f s (capture %.1f + sim %.1f)" % (mine, cap, sim),
             "kvpress %.1f s (%s)" % (peer, pblas), "%.3fx the time" % (mine / peer), "report", "—")]
