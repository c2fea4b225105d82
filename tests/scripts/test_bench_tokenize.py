"""bench/bench_tokenize.py (make bench) on a small text: it reports a row per encoder with
the same token count, exits 0 when the ids agree, and when kvtrace's ids differ from the
reference's it prints a MISMATCH line and exits 1 (a fast but wrong tokenizer must not pass).
Like the reference tests, it fails (not skips) when the tokenizer files or node cannot be had.

    /usr/bin/python3 tests/scripts/test_bench_tokenize.py build"""
import os
import re
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KVTRACE = os.environ.get("KVTRACE") or os.path.join(ROOT, sys.argv[1] if len(sys.argv) > 1 else "build",
                                                     "kvtrace")
ROW = re.compile(r"^llama3_1 +(kvtrace|ref_hf) +([0-9.]+) +([0-9.]+) +([0-9.]+) +([0-9]+)")


def bench(kvtrace):
    env = dict(os.environ, KVTRACE=kvtrace, BENCH_TOKENIZE_MB="0.1", BENCH_TOKENIZE_IDS="llama3_1",
               BENCH_TOKENIZE_REFS="ref_hf")
    return subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "bench_tokenize.py")], env=env,
                          capture_output=True, text=True)


def main():
    r = bench(KVTRACE)
    out = r.stdout + r.stderr
    rows = {m.group(1): m.groups()[1:] for m in map(ROW.match, r.stdout.splitlines()) if m}
    check(r.returncode == 0 and "skipped" not in out, "bench_tokenize: exit 0 on a 0.1 MB text", out)
    check(set(rows) == {"kvtrace", "ref_hf"} and len({v[3] for v in rows.values()}) == 1
          and all(float(v[2]) > 0 for v in rows.values()),
          "bench_tokenize: one row for kvtrace and ref_hf, the same token count, MB/s > 0", out)
    with tempfile.TemporaryDirectory() as tmp:
        wrong = os.path.join(tmp, "kvtrace")
        with open(wrong, "w") as f:  # kvtrace, with the second id of its output changed
            f.write('#!/bin/sh\n"%s" "$@" | sed "s/^\\[\\([0-9]*\\),[0-9]*/[\\1,7/"\n' % KVTRACE)
        os.chmod(wrong, stat.S_IRWXU)
        r = bench(wrong)
    out = r.stdout + r.stderr
    check(r.returncode == 1 and "MISMATCH: llama3_1" in out and "first difference at id 1" in out,
          "bench_tokenize: ids that differ from the reference's: a MISMATCH line naming the position, exit 1",
          out)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
