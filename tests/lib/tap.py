"""TAP output for the test scripts in tests/scripts: one "ok N - ..." or
"not ok N - ..." line per check (tests/run_all.sh counts them), details of a
failure on "#" lines, "ok N - ... # SKIP reason" for checks that cannot run
(counted as skipped, never as passed), and a plan line at the end."""
import os
import sys

import numpy as np

count = 0
failures = 0


def check(ok, what, detail=""):
    """One TAP line; `detail` (text, or a callable producing it) explains a failure."""
    global count, failures
    count += 1
    print(("ok %d - %s" if ok else "not ok %d - %s") % (count, what))
    if not ok:
        failures += 1
        if callable(detail):
            try:
                detail = detail()
            except Exception as e:  # the explanation itself must not abort the run
                detail = "(could not explain: %r)" % (e,)
        for line in str(detail or "").splitlines()[:12]:
            print("#   " + line)
    sys.stdout.flush()
    return ok


def sanitized(kvtrace):
    """Whether the kvtrace binary at this path is built with AddressSanitizer (make SAN=1): the
    ASan leg of tests/run_all.sh. Scripts use it to run the costliest repeats of one failure class
    in the normal leg only (each says which cases and why); never to skip a check altogether."""
    import mmap
    try:
        with open(kvtrace, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(b"__asan_init") >= 0
    except (OSError, ValueError):
        return False


NO_MODEL = "no test model: KVTRACE_MODEL_DIR is not set (tests/run_all.sh sets it)"


def model_file(rel="stories260K.gguf"):
    """$KVTRACE_MODEL_DIR/rel (tests/run_all.sh makes that directory from stories260K.gguf:
    derived/stories260K.bin, derived/tok512.bin, stories260K.golden.json), or None when
    KVTRACE_MODEL_DIR is not set: the caller then reports skip(..., NO_MODEL). A set
    directory without the file is an error of the run, not a skip."""
    d = os.environ.get("KVTRACE_MODEL_DIR")
    return os.path.join(d, rel) if d else None


def skip(what, reason):
    """One TAP line for checks that cannot run here: "ok N - what # SKIP reason"."""
    global count
    count += 1
    print("ok %d - %s # SKIP %s" % (count, what, reason))
    sys.stdout.flush()


def close(name, got, ref, abs_tol, rel_tol):
    """|got - ref| <= abs_tol + rel_tol * |ref| elementwise; prints the max difference."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return check(False, name, "shape %s != reference %s" % (got.shape, ref.shape))
    diff = np.abs(got - ref)
    bad = diff > abs_tol + rel_tol * np.abs(ref)
    detail = "max abs diff %.3g; %d outside tolerance" % (diff.max() if diff.size else 0.0, bad.sum())
    if bad.any():
        idx = np.argwhere(bad)[:5]
        detail += "\n" + "\n".join("at %s: got %.9g ref %.9g" % (tuple(i), got[tuple(i)], ref[tuple(i)]) for i in idx)
    print("# %s: %s" % (name, detail.splitlines()[0]))
    return check(not bad.any(), name, detail)


F32_UNIT = 2.0 ** -24  # float32's unit roundoff


def sum_tol(terms):
    """The relative error a float32 sum of `terms` terms may carry when another computation (another
    BLAS kernel, block shape or order) forms it: terms x float32's unit roundoff (docs/reproducibility.md)."""
    return terms * F32_UNIT


def scaled_diff(a, b, scale=None):
    """max |a - b| over max |a| (or over `scale`): the difference relative to the quantity's own
    scale, never elementwise relative to values near zero."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.size == 0:
        return 0.0
    s = float(np.abs(a).max()) if scale is None else scale
    d = float(np.abs(a - b).max())
    return d / s if s > 0 else d


def finish():
    """Prints the plan; returns the exit status."""
    print("1..%d" % count)
    return 1 if failures else 0
