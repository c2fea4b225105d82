"""capture --no-logprobs (docs/capture.md, "Log-probabilities"), TAP.

With --no-logprobs the output layer runs on each step's last row only (the next token's logits), so the trace
has no /logprobs and everything else must be what the default run records, bit for bit: the rows the model
walks do not depend on the logits of the rows before a step's last. Checked against the default capture of
the same model and tokens: prompt chunks that divide the prompt and that do not, generated tokens (greedy and
sampled), an evicting run, and the CUDA kernel table on its host emulation (the device keeps the logits and
brings back the last row only). Also: --logits with it is a usage error that writes nothing, and the other
verbs read a trace without /logprobs.
    /usr/bin/python3 tests/scripts/test_no_logprobs.py [BUILD]"""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish, skip  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BUILD", "build")
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, BUILD, "kvtrace")
EMUL = os.path.join(ROOT, BUILD, "emul", "libkvcuda_emul.so")


def run(*args, env=None):
    return subprocess.run([KV] + [str(a) for a in args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})))


def datasets(f, prefix=""):
    out = {}
    for name, obj in f.items():
        if isinstance(obj, h5py.Group):
            out.update(datasets(obj, prefix + "/" + name))
        else:
            out[prefix + "/" + name] = obj[()]
    return out


def differences(a, b):
    """Datasets of a and b (logprobs left out of a) that differ, or are in one file only."""
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        da, db = datasets(fa), datasets(fb)
    bad = sorted(set(da) ^ set(db))
    for k in sorted(set(da) & set(db)):
        x, y = da[k], db[k]
        if isinstance(x, np.ndarray) and x.dtype.kind in "fiu" and not np.array_equal(x, y, equal_nan=True):
            bad.append(k)
    return bad


def pair(tmp, name, args, env=None):
    """(default trace, --no-logprobs trace, the second run's result)."""
    full, lean = os.path.join(tmp, name + ".h5"), os.path.join(tmp, name + "-lean.h5")
    r1 = run("capture", *args, "--quiet", "--force", "-o", full, env=env)
    r2 = run("capture", *args, "--no-logprobs", "--quiet", "--force", "-o", lean, env=env)
    if r1.returncode or r2.returncode:
        return None, None, (r1.stderr + r2.stderr).strip()
    return full, lean, ""


def compare(tmp, name, args, what, env=None):
    full, lean, why = pair(tmp, name, args, env)
    if not full:
        check(False, what, why)
        return None
    with h5py.File(full, "r") as f, h5py.File(lean, "r") as g:
        had, has = "logprobs" in f, "logprobs" in g
    bad = differences(full, lean)
    check(had and not has and bad == ["/logprobs"], what,
          "default has /logprobs: %s, --no-logprobs has it: %s; differing datasets: %s" % (had, has, bad))
    return lean


def main():
    with tempfile.TemporaryDirectory(prefix="kvtrace-nolp-") as tmp:
        tok = os.path.join(tmp, "tokens")
        with open(tok, "w") as f:
            f.write(" ".join(str(1 if i == 0 else 3 + (i * 7919) % 500) for i in range(100)))
        model = ["--model", "random:stories260k:1", "--tokens", tok, "--threads", "2"]
        lean = compare(tmp, "c16", model + ["--chunk", "16"], "chunk 16 (divides 96 of 100): only /logprobs differs")
        compare(tmp, "c7", model + ["--chunk", "7", "--generate", "6"],
                "chunk 7, 6 generated (greedy): only /logprobs differs, the same tokens")
        compare(tmp, "c1", model + ["--chunk", "1", "--generate", "3", "--temperature", "0.8", "--seed", "5"],
                "chunk 1, 3 sampled: only /logprobs differs")
        compare(tmp, "ev", model + ["--chunk", "16", "--generate", "4", "--evict", "tova", "--budget", "24"],
                "--evict tova --budget 24: only /logprobs differs")
        if os.path.exists(EMUL):
            compare(tmp, "emul", model + ["--chunk", "16", "--generate", "4", "--device", "cuda"],
                    "--device cuda (host emulation): only /logprobs differs", env={"KVTRACE_CUDA_LIB": EMUL})
        else:
            skip("--device cuda (host emulation)", "%s is not built" % EMUL)
        out = os.path.join(tmp, "refused.h5")
        r = run("capture", *model, "--no-logprobs", "--logits", "-o", out)
        check(r.returncode == 2 and not os.path.exists(out) and len(r.stderr.strip().splitlines()) == 1
              and "--logits" in r.stderr, "--no-logprobs with --logits: exit 2, one line, nothing written",
              "rc %d, stderr %r" % (r.returncode, r.stderr))
        if lean:
            rs = run("sim", lean, "--policies", "keydiff,tova", "--budgets", "32", "--chunk", "16", "--quiet",
                     "--force", "-o", os.path.join(tmp, "sim"))
            ra = run("analyze", lean, "--quiet", "--force", "-o", os.path.join(tmp, "an"))
            ri = run("info", lean)
            check(rs.returncode == 0 and ra.returncode == 0 and ri.returncode == 0,
                  "sim, analyze and info read a trace without /logprobs", rs.stderr + ra.stderr + ri.stderr)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
