"""What every part of bench_table.py shares: the environment both sides run in, the peers' dependencies
(`make bench-deps`), the kernels each side ran, ratios, verdicts and growth exponents.

Both sides of a ratio run with the same threads, passive OpenMP waiting, and OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE unset (the machine's own kernel choice; the test run pins them, the bench does not). The
kernels each side ran are printed beside the ratio, never a reason to withhold it."""
import hashlib
import math
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, BUILD, "kvtrace")
SGEMM = os.path.join(ROOT, BUILD, "bench_sgemm")
KEYREAD = os.path.join(ROOT, BUILD, "bench_keyread")
THREADS = int(os.environ.get("BENCH_THREADS", "2"))
FULL = os.environ.get("BENCH_FULL", "0") == "1"


def _llamacpp_version():
    """node-llama-cpp's pinned version, as tests/lib/real_setup.sh (its one owner) sets it."""
    with open(os.path.join(ROOT, "tests", "lib", "real_setup.sh")) as f:
        return re.search(r"^LLAMACPP_VERSION=(\S+)$", f.read(), re.M).group(1)


LLAMACPP_VERSION = _llamacpp_version()


def env(**extra):
    """Both sides: the same threads, passive OpenMP waiting, OpenBLAS's own kernel choice."""
    e = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OPENBLAS_NUM_THREADS=str(THREADS), OMP_NUM_THREADS=str(THREADS))
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        e.pop(k, None)
    e.update(extra)
    return e


def run(cmd, e=None):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=True, env=e or env())


def timed(cmd, e=None):
    """(the finished process, its peak RSS in MiB: /usr/bin/time's maximum resident set)."""
    import tempfile
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as tf:
        p = run(["/usr/bin/time", "-f", "%M", "-o", tf.name] + list(cmd), e)
        return p, int(open(tf.name).read().split()[-1]) / 1024


def kv_blas():
    """kvtrace's BLAS as it runs here (bench_sgemm links the same OpenBLAS the same way)."""
    return "OpenBLAS " + run([SGEMM, "--core"]).stdout.split()[1]


def peer_python():
    """The test venv's python (torch 2.13, transformers, the gguf package: tests/requirements.txt), which
    `make bench-deps` makes; None when it is not there."""
    with open(os.path.join(ROOT, "tests", "requirements.txt"), "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()[:12]
    py = os.path.join(ROOT, BUILD, "venv-" + sha, "bin", "python")
    return py if os.access(py, os.X_OK) else None


def llamacpp_dir():
    """node-llama-cpp's install (tests/lib/real_setup.sh's llamacpp_setup, run by `make bench-deps`), or None."""
    d = os.path.join(ROOT, BUILD, "llamacpp-" + LLAMACPP_VERSION)
    addon = os.path.join(d, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64", "llama-addon.node")
    return d if os.path.exists(addon) else None


def ratio(a, b, fmt="%.2fx"):
    return fmt % (a / b)


def met(value, goal_max=None, goal_min=None):
    if isinstance(value, str) or value is None:
        return "—"
    ok = (goal_max is None or value <= goal_max) and (goal_min is None or value >= goal_min)
    return "yes" if ok else "no"


def exponent(ts, ys):
    """Least-squares slope of log y over log T."""
    x, y = [math.log(t) for t in ts], [math.log(v) for v in ys]
    mx, my = sum(x) / len(x), sum(y) / len(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)


def capture_stats(stderr):
    """capture --stats' `capture-stats:` fields as floats."""
    return {k: float(v) for k, v in re.findall(r"(\w+) ([-\d.e+]+)", stderr.split("capture-stats:")[1])}


def token_file(path, T, vocab=250):
    """T token ids: BOS (1), then a fixed walk over ids 3 .. 3 + vocab - 1."""
    with open(path, "w") as f:
        f.write(" ".join(str(1 if i == 0 else 3 + (i * 7919) % vocab) for i in range(T)))
    return path
