"""Hostile traces for the recorded full-cache reference (/attention/out, /attention/lse; docs/trace.md), class
`reference-datasets` (tests/lib/hostile.py): a synth trace edited with h5py so that the two datasets have
the wrong shape, rank or element type, hold NaN or inf, come one without the other, or sit in an
evict-mode trace. `kvtrace info` and `kvtrace sim` must refuse each with exit 3 and one line naming the
file and the dataset, and sim must write no results directory. TAP; the last line is the tally.

    KVTRACE=build/kvtrace /usr/bin/python3 tests/scripts/test_hostile_reference.py build"""
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402
import hostile  # noqa: E402

KVTRACE = os.environ.get("KVTRACE") or os.path.join(sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")
hostile.KVTRACE = KVTRACE


def replace(f, name, data):
    attrs = dict(f[name].attrs)
    del f[name]
    f.create_dataset(name, data=data)
    for k, v in attrs.items():
        f[name].attrs[k] = v


def edits():
    """(label, edit(f), dataset the refusal must name)."""
    def shape_out(f):
        replace(f, "attention/out", f["attention/out"][:, :, :, :-1])

    def shape_lse(f):
        replace(f, "attention/lse", f["attention/lse"][:, :-1])

    def rank_out(f):
        replace(f, "attention/out", f["attention/out"][:, :, :, 0])

    def int_lse(f):
        replace(f, "attention/lse", f["attention/lse"][...].astype(np.int32))

    def nan_out(f):
        f["attention/out"][1, 2, 17, 3] = np.nan

    def inf_lse(f):
        f["attention/lse"][0, 1, 40] = np.inf

    def only_out(f):
        del f["attention/lse"]

    def only_lse(f):
        del f["attention/out"]

    def shape_max(f):
        replace(f, "attention/max", f["attention/max"][:, :, :-1])

    def nan_max(f):
        f["attention/max"][1, 3, 50] = np.nan

    def only_max(f):
        del f["attention/lse"], f["attention/out"]

    def evict_mode(f):
        f.attrs["capture_mode"] = "evict"
        f.attrs["evict_policy"] = "tova"
        f.attrs["evict_params"] = ""
        f.attrs["evict_budget"] = 16
        f.attrs["evict_chunk"] = 16
        del f["attention/colsum"]

    return [("/attention/out one column short", shape_out, "/attention/out"),
            ("/attention/lse one head short", shape_lse, "/attention/lse"),
            ("/attention/out of rank 3", rank_out, "/attention/out"),
            ("/attention/lse of integers", int_lse, "/attention/lse"),
            ("a NaN in /attention/out", nan_out, "/attention/out"),
            ("an inf in /attention/lse", inf_lse, "/attention/lse"),
            ("/attention/out without /attention/lse", only_out, "/attention/out"),
            ("/attention/lse without /attention/out", only_lse, "/attention/lse"),
            ("/attention/max one position short", shape_max, "/attention/max"),
            ("a NaN in /attention/max (analyze reads it)", nan_max, "/attention/max"),
            ("/attention/max without /attention/lse", only_max, "/attention/max"),
            ("the reference in an evict-mode trace", evict_mode, "/attention/")]


def attempts(h, tmp):
    base = os.path.join(tmp, "base.h5")
    r = subprocess.run([KVTRACE, "synth", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "8",
                        "--tokens", "64", "--quiet", "-o", base], capture_output=True, text=True)
    if not check(r.returncode == 0, "synth writes the base trace", r.stderr):
        return
    for i, (label, edit, name) in enumerate(edits()):
        t = os.path.join(tmp, "t%d.h5" % i)
        shutil.copy(base, t)
        with h5py.File(t, "r+") as f:
            edit(f)
        value_only = "NaN" in label or "inf" in label  # shapes are checked on open, values as read
        if not value_only:
            h.attempt("info: %s" % label, ["info", t], codes=(3,), keep=[t], must_say=name)
        out = os.path.join(tmp, "r%d" % i)
        # sim never reads /attention/max: analyze's head importance does (docs/analyze.md)
        verb = ["analyze", t, "--quiet", "-o", out] if "/attention/max" in label else \
            ["sim", t, "--policies", "tova", "--budgets", "16", "--chunk", "16", "--quiet", "-o", out]
        h.attempt("%s: %s" % (verb[0], label), verb, codes=(3,), outputs=[out], keep=[t], must_say=name)
        if value_only:
            r = subprocess.run([KVTRACE] + verb, capture_output=True, text=True)
            check(t in r.stderr and "not finite" in r.stderr, "%s: %s: the line names the file" % (verb[0], label),
                  r.stderr)
    r = subprocess.run([KVTRACE, "sim", os.path.join(tmp, "t4.h5"), "--policies", "tova", "--budgets", "16",
                        "--chunk", "16", "--quiet", "-o", os.path.join(tmp, "ok")], capture_output=True,
                       text=True, env=dict(os.environ, KVTRACE_SIM_REFERENCE="recompute"))
    check(r.returncode == 0, "KVTRACE_SIM_REFERENCE=recompute: sim ignores a bad recorded reference", r.stderr)


def main():
    h = hostile.Tally("reference-datasets")
    with tempfile.TemporaryDirectory(prefix="kvhref_") as tmp:
        attempts(h, tmp)
    hostile.report()
    return finish()


if __name__ == "__main__":
    sys.exit(main())
