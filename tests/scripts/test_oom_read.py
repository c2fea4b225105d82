"""Out of memory inside HDF5 is reported as out of memory, never as a corrupt trace. A trace whose
/queries is one gzip chunk of all 8 layers (4.9 MB): reading a layer makes HDF5 allocate the whole
chunk to inflate it, while kvtrace's own buffers for a layer are under 0.7 MB each. Rank 0's memory
is limited just before its first replay so that kvtrace's buffers fit and HDF5's does not:
RLIMIT_AS at what it maps + 3 MiB (KVTRACE_TEST_FAULT 0:oom:3) in the normal leg, ASan's
allocator refusing any block over 2 MiB in the ASan leg (an address-space limit means nothing under
ASan). Either way `kvtrace sim` must exit 1 with `FILE: /queries: out of memory` (before the fix it
said `cannot read /queries (corrupt or truncated data)`, exit 3) and leave no output. TAP."""
import os
import subprocess
import sys
import tempfile

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish, sanitized  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KVTRACE = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build", "kvtrace")


def one_chunk_queries(src, dst):
    """dst = src with /queries rewritten as a single gzip chunk [L, H, T, D]; everything else copied."""
    with h5py.File(src, "r") as a, h5py.File(dst, "w") as b:
        for k, v in a.attrs.items():
            b.attrs[k] = v

        def copy(name, obj):
            if isinstance(obj, h5py.Group):
                g = b.require_group(name)
                for k, v in obj.attrs.items():
                    g.attrs[k] = v
            elif name != "queries":
                a.copy(obj, b, name=name)
        a.visititems(copy)
        q = a["queries"]
        d = b.create_dataset("queries", data=q[...], chunks=q.shape, compression="gzip")
        for k, v in q.attrs.items():
            d.attrs[k] = v
        return d.chunks, q.dtype.itemsize


def main():
    with tempfile.TemporaryDirectory(prefix="kvtrace-test-oom-read-") as tmp:
        src, big, out = (os.path.join(tmp, n) for n in ("t.h5", "big.h5", "res"))
        subprocess.run([KVTRACE, "synth", "--layers", "8", "--heads", "4", "--kv-heads", "2", "--head-dim", "64",
                        "--tokens", "600", "--seed", "5", "--quiet", "-o", src], check=True)
        chunks, size = one_chunk_queries(src, big)
        nbytes = size
        for c in chunks:
            nbytes *= c
        check(nbytes > 4 << 20, "the /queries chunk is over 4 MiB", nbytes)
        ok = subprocess.run([KVTRACE, "sim", big, "--policies", "tova", "--budgets", "64", "--chunk", "32",
                             "--threads", "1", "--quiet", "-o", out], capture_output=True, text=True)
        check(ok.returncode == 0, "the one-chunk trace replays without a limit", ok.stderr)
        os.rename(out, out + ".ok")
        env = dict(os.environ)
        if sanitized(KVTRACE):
            env["ASAN_OPTIONS"] = ":".join(x for x in (env.get("ASAN_OPTIONS", ""), "allocator_may_return_null=1",
                                                       "max_allocation_size_mb=2") if x)
        else:
            env["KVTRACE_TEST_FAULT"] = "0:oom:3"
        p = subprocess.run([KVTRACE, "sim", big, "--policies", "tova", "--budgets", "64", "--chunk", "32",
                            "--threads", "1", "--quiet", "-o", out], capture_output=True, text=True, env=env,
                           timeout=300)
        lines = [x for x in p.stderr.splitlines() if x.startswith("kvtrace:")]
        check(p.returncode == 1, "HDF5 out of memory: exit 1", (p.returncode, p.stderr))
        check(lines == ["kvtrace: error: %s: /queries: out of memory" % big], "one line: FILE: /queries: out of memory",
              p.stderr)
        check("corrupt" not in p.stderr, "not reported as a corrupt trace", p.stderr)
        check(not os.path.exists(out) and not os.path.exists(out + ".work"), "no output, no work folder", os.listdir(tmp))
    return finish()


if __name__ == "__main__":
    sys.exit(main())
