"""bench/bench_table.py (make bench) without its peers (make bench-deps's, not a test dependency): a ratio
is printed whatever kernels the sides ran (their BLAS goes beside it), and the environment both sides run in
leaves OpenBLAS's kernel choice to the machine (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset); the keydiff row shows both key reads and judges the goal against the float one;
the growth exponent is the log-log least-squares slope (closed forms); the attention FLOP count
equals a brute count; the peer comparison finds a metric or a kept position that differs from
kvtrace's (a small `kvtrace sim` run, its own numbers as the 'peer', then changed).

    /usr/bin/python3 tests/scripts/test_bench_table.py build"""
import math
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_common  # noqa: E402
import bench_table as bt  # noqa: E402

KVTRACE = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")


def pure():
    check(bt.ratio(3.0, 2.0) == "1.50x", "the ratio", bt.ratio(3.0, 2.0))
    saved = dict(os.environ)
    os.environ["OPENBLAS_CORETYPE"], os.environ["OPENBLAS_L2_SIZE"] = "Haswell", "1048576"
    e = bench_common.env()
    os.environ.clear()
    os.environ.update(saved)
    check("OPENBLAS_CORETYPE" not in e and "OPENBLAS_L2_SIZE" not in e and e["OPENBLAS_NUM_THREADS"] == str(bt.THREADS),
          "the bench's environment: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, the threads set",
          {k: e.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS")})
    check(bt.met(None) == "—" and bt.met("withheld") == "—" and bt.met(0.5, goal_max=1.1) == "yes" and bt.met(2.6, goal_min=2.5) == "yes"
          and bt.met(1.3, goal_max=1.2) == "no", "met?: yes / no, and no verdict without a number")
    ts = (1024, 2048, 4096, 8192)
    e1 = bt.exponent(ts, [3.0 * t ** 1.5 for t in ts])
    e2 = bt.exponent((1, 2, 4), [1.0, 4.0, 8.0])  # points (0,0), (1,2), (2,3): slope 1.5
    check(abs(e1 - 1.5) < 1e-12 and abs(e2 - 1.5) < 1e-12, "exponent: the log-log least-squares slope", (e1, e2))
    L, H, D, T, budgets, B = 2, 3, 4, 50, [5, 9], 4
    brute = sum(4 * D * (i + 1) for i in range(T)) * L * H  # causal reference: every j <= i
    brute += 2 * sum(4 * D * min(i + 1, N + B) for N in budgets for i in range(T)) * L * H
    check(bt.attention_flops(L, H, D, T, budgets, B, 2) == brute, "attention FLOP count equals a brute count")
    tag, row = bt.keydiff_entry([(128, 20.0, 4.0, 8.0), (256, 12.0, 4.0, 5.0)])
    check(tag == "keydiff" and row[0].endswith("(worst N=128)") and row[3] == "5.0x float / 2.5x double"
          and row[4] == "<= 2x float" and row[5] == "no" and "4.00 ns (float sums) / 8.00 ns (double sums)" in row[2]
          and bt.keydiff_entry([(64, 7.0, 4.0, 6.0)])[1][5] == "yes",
          "keydiff row: the worst N against the float read, the double read beside it", row)


def peer_compare(tmp):
    trace, out = os.path.join(tmp, "t.h5"), os.path.join(tmp, "res")
    subprocess.run([KVTRACE, "synth", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "8",
                    "--tokens", "200", "--quiet", "-o", trace], check=True)
    subprocess.run([KVTRACE, "sim", trace, "--policies", "tova,keydiff", "--budgets", "16,32", "--chunk", "8",
                    "--quiet", "-o", out], check=True)
    import csv
    z = {}
    with open(os.path.join(out, "summary.csv")) as f:
        for r in csv.DictReader(f):
            if r["phase"] == "all":
                z["%s_%s_summary" % (r["policy"], r["budget"])] = np.array(
                    [float(r[c]) for c in ("out_rel_err_mean", "out_rel_err_p95", "attn_recall_mean", "attn_recall_min")])
    with h5py.File(os.path.join(out, "results.h5"), "r") as rh:
        for g in rh["runs"].values():
            z["%s_%d_kept" % (g.attrs["policy"], g.attrs["budget"])] = g["retained"][:]
    npz = os.path.join(tmp, "peer.npz")
    np.savez(npz, **z)
    worst, differ, total = bt.compare_sim(out, npz, [16, 32])
    check(worst < 1e-6 and differ == 0 and total == 2 * 2 * 2 * (16 + 32), "the same numbers compare equal",
          (worst, differ, total))
    z["keydiff_32_summary"] = z["keydiff_32_summary"] * (1 + 1e-4)
    kept = z["tova_16_kept"].copy()
    kept[1, 0, 3] = min(set(range(200)) - set(kept[1, 0].tolist()))
    z["tova_16_kept"] = kept
    np.savez(npz, **z)
    worst, differ, total = bt.compare_sim(out, npz, [16, 32])
    check(5e-5 < worst < 2e-4 and differ == 1, "a metric off by 1e-4 and one kept position are found", (worst, differ))


def main():
    pure()
    with tempfile.TemporaryDirectory(prefix="kvtrace-test-bench-table-") as tmp:
        peer_compare(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
