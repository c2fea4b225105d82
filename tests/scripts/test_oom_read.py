"""Out of memory inside HDF5 is reported as out of memory, never as a corrupt trace. A trace whose
/queries is one gzip chunk of all 8 layers (4.9 MB): reading a layer makes HDF5 allocate the whole
chunk to inflate it, while kvtrace's own buffers for a layer are under 0.7 MB each. Rank 0's memory
is limited just before its first replay so that kvtrace's buffers fit and HDF5's does not:
RLIMIT_AS at what it maps + 3 MiB (KVTRACE_TEST_FAULT 0:oom:3) in the normal leg, ASan's
allocator refusing any block over 2 MiB in the ASan leg (an address-space limit means nothing under
ASan). Either way `kvtrace sim` must exit 1 with `FILE: /queries: out of memory` (before the fix it
said `cannot read /queries (corrupt or truncated data)`, exit 3) and leave no output.
`kvtrace fit` reads its feature files through the same HDF5 reads: on a features file whose
/traces/t/features is one gzip chunk of 1.6 MB it fits as on the original file in both legs, and in
the ASan leg, with blocks over 1 MiB refused, says `FILE: trace t: rows 0..: out of memory`, exit 1
(the normal leg has no hook to limit fit's memory after start-up, and an address-space limit from
the start stops OpenBLAS first). TAP."""
import os
import subprocess
import sys
import tempfile

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish, sanitized  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KVTRACE = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")


def one_chunk(src, dst, path):
    """dst = src with the dataset at path rewritten as a single gzip chunk; everything else copied.
    Returns the chunk's size in bytes."""
    with h5py.File(src, "r") as a, h5py.File(dst, "w") as b:
        for k, v in a.attrs.items():
            b.attrs[k] = v

        def copy(name, obj):
            if isinstance(obj, h5py.Group):
                g = b.require_group(name)
                for k, v in obj.attrs.items():
                    g.attrs[k] = v
            elif name != path:
                a.copy(obj, b, name=name)
        a.visititems(copy)
        q = a[path]
        d = b.create_dataset(path, data=q[...], chunks=q.shape, compression="gzip")
        for k, v in q.attrs.items():
            d.attrs[k] = v
        return q.size * q.dtype.itemsize


def asan_refusing_over(mb):
    """The environment of a run whose ASan allocator refuses any block over mb MiB (returns NULL)."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ":".join(x for x in (env.get("ASAN_OPTIONS", ""), "allocator_may_return_null=1",
                                               "max_allocation_size_mb=%d" % mb) if x)
    return env


def fit_case(tmp, src):
    feats, big = os.path.join(tmp, "f.h5"), os.path.join(tmp, "fbig.h5")
    subprocess.run([KVTRACE, "features", src, "--policy", "oracle", "--budget", "32", "--chunk", "16", "--quiet",
                    "-o", feats], check=True)
    nbytes = one_chunk(feats, big, "traces/t/features")
    check(nbytes > 1 << 20, "the features chunk is over 1 MiB", nbytes)
    fits = [subprocess.run([KVTRACE, "fit", f, "--objective", "ls", "-o", os.path.join(tmp, o)], capture_output=True,
                           text=True) for f, o in ((feats, "fit_a"), (big, "fit_b"))]
    def policy(o):  # the definitions, without the comment lines naming the command and the file
        with open(os.path.join(tmp, o, "policy.defines")) as f:
            return [x for x in f if not x.startswith("#")]
    same = all(p.returncode == 0 for p in fits) and policy("fit_a") == policy("fit_b") and policy("fit_a")
    check(same, "fit on the one-chunk features file: the same policy as on the original", [p.stderr for p in fits])
    if not sanitized(KVTRACE):
        return
    out = os.path.join(tmp, "fit_oom")
    p = subprocess.run([KVTRACE, "fit", big, "--objective", "ls", "-o", out], capture_output=True, text=True,
                       env=asan_refusing_over(1), timeout=300)
    lines = [x for x in p.stderr.splitlines() if x.startswith("kvtrace:")]
    check(p.returncode == 1 and lines == ["kvtrace: error: %s: trace t: rows 0..: out of memory" % big],
          "fit, HDF5 out of memory: exit 1, one line: FILE: trace t: rows 0..: out of memory", (p.returncode, p.stderr))
    check(not os.path.exists(out), "fit out of memory: no output", os.listdir(tmp))


def main():
    with tempfile.TemporaryDirectory(prefix="kvtrace-test-oom-read-") as tmp:
        src, big, out = (os.path.join(tmp, n) for n in ("t.h5", "big.h5", "res"))
        subprocess.run([KVTRACE, "synth", "--layers", "8", "--heads", "4", "--kv-heads", "2", "--head-dim", "64",
                        "--tokens", "600", "--seed", "5", "--quiet", "-o", src], check=True)
        nbytes = one_chunk(src, big, "queries")
        check(nbytes > 4 << 20, "the /queries chunk is over 4 MiB", nbytes)
        ok = subprocess.run([KVTRACE, "sim", big, "--policies", "tova", "--budgets", "64", "--chunk", "32",
                             "--threads", "1", "--quiet", "-o", out], capture_output=True, text=True)
        check(ok.returncode == 0, "the one-chunk trace replays without a limit", ok.stderr)
        os.rename(out, out + ".ok")
        env = asan_refusing_over(2) if sanitized(KVTRACE) else dict(os.environ, KVTRACE_TEST_FAULT="0:oom:3")
        p = subprocess.run([KVTRACE, "sim", big, "--policies", "tova", "--budgets", "64", "--chunk", "32",
                            "--threads", "1", "--quiet", "-o", out], capture_output=True, text=True, env=env,
                           timeout=300)
        lines = [x for x in p.stderr.splitlines() if x.startswith("kvtrace:")]
        check(p.returncode == 1, "HDF5 out of memory: exit 1", (p.returncode, p.stderr))
        check(lines == ["kvtrace: error: %s: /queries: out of memory" % big], "one line: FILE: /queries: out of memory",
              p.stderr)
        check("corrupt" not in p.stderr, "not reported as a corrupt trace", p.stderr)
        check(not os.path.exists(out) and not os.path.exists(out + ".work"), "no output, no work folder", os.listdir(tmp))
        fit_case(tmp, src)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
