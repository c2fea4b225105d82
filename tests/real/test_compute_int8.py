"""capture --compute int8 (docs/capture.md#compute-int8) on SmolLM2-135M-Instruct's Q4_1 GGUF, TAP.

Against the float path on the same 96 token ids: the trace says compute = int8 (and `kvtrace info`), the
float trace says nothing; keys, values and queries differ from the float path's (the int8 products ran)
by at most KEY_TOL relative (each layer's Frobenius norm of the difference over the float one's), and the
next-token log-probabilities by at most LP_MEAN nats on average and LP_MAX at worst: the bounds stated in
docs/capture.md, with the measured values printed. Results that must not move: --threads 1 and 2 give the
same trace bit for bit, and the portable kernel (KVTRACE_INT8_KERNEL=portable) the same as the default one
(AMX where the CPU has it; a skip where the default is the portable kernel already), and /wo (--record wo)
is the float path's float32 W_o, though the int8 path multiplies by W_o's blocks. Refusals, each exit 2
with one line and no trace: --compute int8 with --device cuda, with --weights f32 (the matrices are then
float32) and on a model without Q8_0/Q4_0/Q4_1 matrices (random:stories260k), and --compute int4; and a
trace whose compute attribute says int4 is refused by its reader (exit 3).
Run by tests/run_all.sh with the test venv's Python; KVTRACE and KVTRACE_SMOLLM2 set."""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from tap import check, finish, skip  # noqa: E402

KVTRACE, GGUF = os.environ["KVTRACE"], os.environ["KVTRACE_SMOLLM2"]
KEY_TOL, LP_MEAN, LP_MAX = 0.1, 0.2, 1.0
T = 96


def capture(tmp, name, *extra, env=None):
    toks, out = os.path.join(tmp, "ids"), os.path.join(tmp, name + ".h5")
    with open(toks, "w") as f:
        f.write(" ".join(str(1 if i == 0 else 3 + (i * 7919) % 5000) for i in range(T)))
    r = subprocess.run([KVTRACE, "capture", "--model", GGUF, "--tokens", toks, "--chunk", "40", "--quiet", "--force",
                        "-o", out, *extra], capture_output=True, text=True, env=env)
    return r, out


def datasets(path):
    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in ("keys", "values", "queries", "logprobs", "attention/colsum")}, dict(f.attrs)


def same(a, b):
    return all(np.array_equal(a[k].view(np.uint32) if a[k].dtype == np.float32 else a[k],
                              b[k].view(np.uint32) if b[k].dtype == np.float32 else b[k]) for k in a)


def refusals(tmp):
    few = os.path.join(tmp, "few")
    with open(few, "w") as f:
        f.write("1 5 9 12")
    cases = [("--device cuda", ["--compute", "int8", "--device", "cuda"], GGUF, "CPU only"),
             ("--weights f32", ["--compute", "int8", "--weights", "f32"], GGUF, "no matrix in Q8_0, Q4_0 or Q4_1"),
             ("a float model", ["--compute", "int8"], "random:stories260k", "no matrix in Q8_0, Q4_0 or Q4_1"),
             ("--compute int4", ["--compute", "int4"], GGUF, "--compute")]
    for what, extra, model, says in cases:
        out = os.path.join(tmp, "refused.h5")
        r = subprocess.run([KVTRACE, "capture", "--model", model, "--tokens", few, "--quiet",
                            "-o", out, *extra], capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and says in lines[0] and not os.path.exists(out),
              "--compute int8 refused with %s: exit 2, one line, no trace" % what,
              "exit %d: %s" % (r.returncode, r.stderr[-600:]))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        rf, float_path = capture(tmp, "float", "--threads", "2")
        r8, int8_path = capture(tmp, "int8", "--threads", "2", "--compute", "int8", "--stats")
        if not check(rf.returncode == 0 and r8.returncode == 0, "capture, float and --compute int8",
                     rf.stderr[-800:] + r8.stderr[-800:]):
            return finish()
        kernel = r8.stderr.split("int8_kernel ")[1].split()[0]
        (f, fa), (q, qa) = datasets(float_path), datasets(int8_path)
        info = subprocess.run([KVTRACE, "info", int8_path], capture_output=True, text=True).stdout
        check(qa.get("compute") in ("int8", b"int8") and "compute" not in fa and "compute int8" in info,
              "the int8 trace records compute = int8 (and info says so); the float trace has no compute attribute",
              "%r %r\n%s" % (qa.get("compute"), fa.get("compute"), info))
        worst = {}
        for k in ("keys", "values", "queries"):
            rel = [float(np.linalg.norm(q[k][l] - f[k][l]) / np.linalg.norm(f[k][l])) for l in range(f[k].shape[0])]
            worst[k] = max(rel)
            print("# %s: per-layer relative difference int8 vs float: layer 0 %.2e, max %.2e (layer %d)"
                  % (k, rel[0], max(rel), int(np.argmax(rel))))
        check(all(0 < w <= KEY_TOL for w in worst.values()), "keys, values, queries differ from the float path, "
              "by at most %g relative per layer" % KEY_TOL, str(worst))
        d = np.abs(q["logprobs"][:-1].astype(np.float64) - f["logprobs"][:-1])
        print("# next-token log-probability, int8 vs float: mean %.4f, max %.4f nats over %d positions"
              % (d.mean(), d.max(), d.size))
        check(d.mean() <= LP_MEAN and d.max() <= LP_MAX, "log-probabilities within %g nats of the float path on "
              "average, %g at worst" % (LP_MEAN, LP_MAX), "mean %.4f max %.4f" % (d.mean(), d.max()))
        r1, one = capture(tmp, "int8-1", "--threads", "1", "--compute", "int8")
        check(r1.returncode == 0 and same(datasets(one)[0], q), "--compute int8: --threads 1 and 2 give the same "
              "trace, bit for bit", r1.stderr[-600:])
        if kernel == "portable":
            skip("--compute int8: the portable kernel equals the default one", "the default kernel is the portable "
                 "one here (no AMX, or KVTRACE_INT8_KERNEL=portable)")
        else:
            rp, port = capture(tmp, "int8-portable", "--threads", "2", "--compute", "int8",
                               env=dict(os.environ, KVTRACE_INT8_KERNEL="portable"))
            check(rp.returncode == 0 and same(datasets(port)[0], q), "--compute int8: the portable kernel's trace "
                  "equals the %s kernel's, bit for bit" % kernel, rp.stderr[-600:])
        # W_o multiplies through its blocks, but /wo (what criticalkv reads) stays the float path's copy
        rw = [capture(tmp, "wo-" + name, "--threads", "2", "--record", "keys,values,wo", *extra)
              for name, extra in (("float", []), ("int8", ["--compute", "int8"]))]
        wo = []
        for r, path in rw:
            if r.returncode == 0:
                with h5py.File(path, "r") as h:
                    wo.append(h["wo"][()])
        check(len(wo) == 2 and np.array_equal(wo[0].view(np.uint32), wo[1].view(np.uint32)), "--compute int8 "
              "records the same float32 /wo as the float path, bit for bit", rw[0][0].stderr[-300:] + rw[1][0].stderr[-300:])
        refusals(tmp)
        with h5py.File(int8_path, "r+") as h:
            h.attrs["compute"] = "int4"
        r = subprocess.run([KVTRACE, "info", int8_path], capture_output=True, text=True)
        check(r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1 and "'compute'" in r.stderr,
              "a trace whose compute attribute is not int8 is refused: exit 3, one line naming it", r.stderr[-400:])
    return finish()


if __name__ == "__main__":
    sys.exit(main())
