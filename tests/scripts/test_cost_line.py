"""The cost line (class 7, docs/reliability.md#context-length-and-the-cost-of-a-run): before a replay that will likely take
over a minute, sim prints one line with its estimated TFLOP, minutes, memory and results size;
a short replay prints none. The long trace is written with h5py (a 131072-token, one-head trace:
the reference alone is 2 L H D T^2 = 2.7e11 operations), and the run is stopped as soon as the
line has been read: the line comes before any work. TAP."""
import os
import re
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kvrun import KVTRACE  # noqa: E402
from tap import check, finish  # noqa: E402

COST = re.compile(r"^kvtrace: sim: (\d+) configurations over (\d+) positions: about ([0-9.e+]+) TFLOP "
                  r"\(~(\d+) min at 50 GFLOP/s per thread\), peak memory ~[0-9.]+ GiB, results.h5 ~[0-9.]+ GiB$")


def long_trace(small, path, T, D=8):
    """A one-layer, one-head trace of T tokens with the attributes of a synth trace."""
    rng = np.random.default_rng(0)
    with h5py.File(small, "r") as s, h5py.File(path, "w") as f:
        for k, v in s.attrs.items():
            f.attrs[k] = v
        f.attrs["n_tokens"] = np.int64(T)
        f.attrs["prompt_len"] = np.int64(T)
        f["tokens"] = np.zeros(T, np.int32)
        for name in ("keys", "values", "queries"):
            f.create_dataset(name, data=rng.standard_normal((1, 1, T, D)).astype(np.float32), chunks=(1, 1, 4096, D))


def main():
    tmp = tempfile.mkdtemp(prefix="kvcost")
    small = os.path.join(tmp, "small.h5")
    r = subprocess.run([KVTRACE, "synth", "--layers", "1", "--heads", "1", "--kv-heads", "1", "--head-dim", "8",
                        "--tokens", "64", "--quiet", "-o", small], capture_output=True, text=True)
    check(r.returncode == 0, "a small synth trace", r.stderr)
    r = subprocess.run([KVTRACE, "sim", small, "--policies", "full,streaming", "--budgets", "16", "--chunk", "8",
                        "-o", os.path.join(tmp, "rs")], capture_output=True, text=True)
    check(r.returncode == 0 and not any(COST.match(ln) for ln in r.stderr.splitlines()),
          "a short replay prints no cost line", r.stderr)
    T = 131072
    big = os.path.join(tmp, "long.h5")
    long_trace(small, big, T)
    p = subprocess.Popen([KVTRACE, "sim", big, "--policies", "full,streaming", "--budgets",
                          "40000,50000,60000,70000,80000", "--chunk", "32768", "--threads", "1",
                          "-o", os.path.join(tmp, "rl")], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    line = p.stderr.readline().rstrip("\n")
    p.kill()
    p.wait()
    m = COST.match(line)
    if check(m is not None, "a replay of about a minute prints the cost line first", line):
        # the estimate, recomputed here from its documented formula (sim/sim.c, print_cost)
        flops = 2 * 8 * T * T + sum(2 * 4 * 8 * T * min(T / 2, b + 32768) for b in (40000, 50000, 60000, 70000, 80000))
        check(int(m.group(1)) == 10 and int(m.group(2)) == T and abs(float(m.group(3)) - flops / 1e12) < 0.01,
              "it names 10 configurations, %d positions and %.3g TFLOP" % (T, flops / 1e12), line)
    sys.exit(finish())


if __name__ == "__main__":
    main()
