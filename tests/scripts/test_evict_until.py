"""capture --evict-until (docs/fidelity.md, "The context compressed once"), TAP: eviction only after the chunks that
end at or before the position, a chunk cut there, the later positions kept.

On random:stories260k with 70 prompt ids and 6 generated: under streaming (sinks 4) the kept set after the one step
at U = 50 is the closed form {0..3} and the last N - 4 positions before U, and /evict/retained holds only the steps
that evicted; the cache then grows by every later position (capture --stats' cache_peak_rows reaches N + T - U, past the
N + B of every step evicting); with --chunk 16 the steps end at 15, 31, 47 and then 49 (cut at U); the logits before U are
those of a full-cache run (nothing was evicted yet). A prompts file's span names the position (--evict-until
question). Refused with one line and no trace: no --evict, a position past the prompt, 0, a span the prompt lacks.
    /usr/bin/python3 tests/scripts/test_evict_until.py"""
import json
import os
import re
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, finish  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
KV = os.environ.get("KVTRACE") or os.path.join(ROOT, "build", "kvtrace")
MODEL = "random:stories260k"
IDS = [1] + [(7 * i + 3) % 500 + 2 for i in range(69)]
U, N, G = 50, 12, 6


def run(*args):
    return subprocess.run([KV, *args], capture_output=True, text=True)


def capture(tmp, name, *extra):
    out = os.path.join(tmp, name + ".h5")
    r = run("capture", "--model", MODEL, "--tokens", os.path.join(tmp, "ids.json"), "--generate", str(G),
            "--logits", "--quiet", "--force", "-o", out, *extra)
    return r, out


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-until-")
    with open(os.path.join(tmp, "ids.json"), "w") as f:
        json.dump(IDS, f)
    T = len(IDS) + G
    r, out = capture(tmp, "once", "--evict", "streaming", "--budget", str(N), "--chunk", str(U),
                     "--evict-until", str(U), "--retained", "--stats")
    if not check(r.returncode == 0, "capture --evict streaming --chunk 50 --evict-until 50 runs", r.stderr):
        return finish()
    with h5py.File(out, "r") as f:
        ends, kept = f["evict/step_end"][()].tolist(), f["evict/retained"][()]
        until = int(f.attrs["evict_until"])
        logits = f["logits"][()]
    want = list(range(4)) + list(range(U - (N - 4), U))
    check(ends == [U - 1] and all(sorted(kept[0, l, k].tolist()) == want for l in range(kept.shape[1])
                                  for k in range(kept.shape[2])) and until == U,
          "one step evicted (ending at %d): the sinks and the last N - 4 before U; attribute evict_until = %d"
          % (U - 1, U), "%s %s" % (ends, kept[0, 0, 0].tolist()))
    peak = re.search(r"cache_peak_rows (\d+)", r.stderr)
    check(peak and int(peak.group(1)) == max(U, N + T - U), "cache_peak_rows = max(U, N + T - U) = %d (the chunk "
          "before the step, or every position kept after U)" % max(U, N + T - U), r.stderr.strip()[-300:])
    r2, full = capture(tmp, "full", "--chunk", str(U))
    with h5py.File(full, "r") as f:
        lf = f["logits"][()]
    check(r2.returncode == 0 and np.array_equal(lf[:U], logits[:U]) and not np.array_equal(lf[U:], logits[U:]),
          "the logits of positions before U equal the full cache's (same chunk, nothing evicted yet); after U they "
          "differ", r2.stderr)
    r3, out3 = capture(tmp, "chunked", "--evict", "streaming", "--budget", str(N), "--chunk", "16",
                       "--evict-until", str(U), "--retained", "--stats")
    with h5py.File(out3, "r") as f:
        ends3 = f["evict/step_end"][()].tolist() if r3.returncode == 0 else None
    peak3 = re.search(r"cache_peak_rows (\d+)", r3.stderr)
    check(ends3 == [15, 31, 47, 49] and peak3 and int(peak3.group(1)) == N + T - U > N + 16,
          "--chunk 16: steps end at 15, 31, 47 and 49 (a chunk cut at U), none after: the cache grows to N + T - U "
          "= %d rows, past the N + B an evicting run holds" % (N + T - U), "%s %s" % (ends3, r3.stderr))
    prompts = os.path.join(tmp, "p.jsonl")
    with open(prompts, "w") as f:
        f.write(json.dumps({"id": "a", "tokens": IDS, "spans": [{"name": "question", "start": U, "end": 60}]}) + "\n")
    st = os.path.join(tmp, "study")
    r4 = run("capture", "--model", MODEL, "--prompts", prompts, "--evict", "streaming", "--budget", str(N),
             "--chunk", str(U), "--evict-until", "question", "--retained", "--quiet", "-o", st)
    ok = r4.returncode == 0
    if ok:
        with h5py.File(os.path.join(st, "a.h5"), "r") as f:
            ok = int(f.attrs["evict_until"]) == U and f["evict/step_end"][()].tolist() == [U - 1]
    check(ok, "--prompts with --evict-until question: the span's start (%d) is the position" % U, r4.stderr)
    with open(prompts, "a") as f:   # a second prompt without the span, then one too short for a position
        f.write(json.dumps({"id": "b", "tokens": IDS[:30]}) + "\n")
    for what, until, word in (("a prompt without the span", "question", "p.jsonl:2: prompt 'b': --evict-until "
                               "question: the prompt has no span 'question'"),
                              ("a prompt shorter than the position", "40", "p.jsonl:2: prompt 'b': --evict-until 40 "
                               "is past the prompt's 30 positions")):
        st2 = os.path.join(tmp, "study2")
        r5 = run("capture", "--model", MODEL, "--prompts", prompts, "--evict", "tova", "--budget", "8",
                 "--evict-until", until, "--quiet", "-o", st2)
        lines = r5.stderr.strip().splitlines()
        check(r5.returncode == 2 and len(lines) == 1 and word in lines[0] and not os.path.exists(st2),
              "--prompts, %s: exit 2 naming the file, line and prompt, before any trace is written" % what, r5.stderr)
    base = ["capture", "--model", MODEL, "--tokens", os.path.join(tmp, "ids.json"), "--quiet"]
    bad = (("without --evict", ["--evict-until", "10"], 2, "--evict-until"),
           ("past the prompt", ["--evict", "tova", "--budget", "8", "--evict-until", "71"], 2, "past the prompt"),
           ("position 0", ["--evict", "tova", "--budget", "8", "--evict-until", "0"], 2, "--evict-until"),
           ("a number with letters", ["--evict", "tova", "--budget", "8", "--evict-until", "5x"], 2, "--evict-until"),
           ("a span without --prompts", ["--evict", "tova", "--budget", "8", "--evict-until", "question"], 2,
            "no span 'question'"))
    for what, extra, code, word in bad:
        o = os.path.join(tmp, "bad.h5")
        r = run(*base, *extra, "-o", o)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == code and len(lines) == 1 and word in lines[0] and not os.path.exists(o),
              "--evict-until %s: exit %d, one line, no trace" % (what, code), r.stderr)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
