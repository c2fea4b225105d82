"""Running build/kvtrace from the test scripts: KVTRACE is the binary under test."""
import json
import os
import subprocess

import h5py

KVTRACE = os.environ.get("KVTRACE", "")


def run(*args):
    return subprocess.run([KVTRACE, *args], capture_output=True, text=True)


def capture(out, model, tokens, *args):
    """`capture --logits` of `model` over a --tokens file, opened with h5py; raises on failure."""
    r = run("capture", "--quiet", "--logits", "--model", model, "--tokens", tokens, "-o", out, *args)
    if r.returncode != 0:
        raise RuntimeError("capture %s failed (%d): %s" % (model, r.returncode, r.stderr.strip()))
    return h5py.File(out, "r")


def write_tokens(tmp, name, ids):
    """A --tokens file (a JSON array) in tmp; returns its path."""
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(json.dumps([int(i) for i in ids]))
    return path
