"""In-model eviction (capture --evict, docs/fidelity.md) on stories260K: with N >= T the
evicting run equals the full run exactly (logits, log-probabilities, keys,
values, queries); the set kept at the first eviction equals what `sim` keeps
on the full-cache trace for the same policy, N and B, for every policy allowed
in-model (checked on a trace that ends with that step, and against the
/evict/retained snapshot of a longer run); snapshots are sorted, -1 padded,
never above N; oracle, --attention and incomplete options are refused; sim on
an evicting trace prints one note line saying so (--quiet too) and runs, and
none on a full-cache trace. TAP."""
import os
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from kvrun import run, write_tokens  # noqa: E402
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402

MODEL = model_file()
N, B = 32, 16
POLICIES = ["full", "keydiff", "keydiff:anchor=pairwise", "keydiff:anchor=raw:metric=l2:window=0.25", "knorm",
            "streaming", "random:seed=3", "primekv", "primekv:key=nn:value=proj", "h2o", "tova", "tova:scope=group",
            "snapkv", "snapkv:window=8:kernel=3"]


def capture(tmp, name, tokens, *args):
    out = os.path.join(tmp, name)
    r = run("capture", "--quiet", "--logits", "--model", MODEL, "--tokens", tokens, "--chunk", str(B), "-o", out, *args)
    if r.returncode != 0:
        raise RuntimeError("capture %s failed (%d): %s" % (name, r.returncode, r.stderr.strip()))
    return h5py.File(out, "r")


def sim_retained(tmp, trace, name):
    """sim's final kept sets per policy: {policy spec: [L, K, N]}."""
    out = os.path.join(tmp, name)
    r = run("sim", trace, "--quiet", "--policies", ",".join(POLICIES), "--budgets", str(N), "--chunk", str(B),
            "--threads", "2", "-o", out)
    if r.returncode != 0:
        raise RuntimeError("sim failed: " + r.stderr.strip())
    check(r.stderr == "", "sim on a full-cache trace prints no note", r.stderr)
    got = {}
    with h5py.File(os.path.join(out, "results.h5"), "r") as f:
        for run_ in f["runs"].values():
            a = run_.attrs
            got[(a["policy"], a["params"])] = run_["retained"][:]
    return got


def check_sim_note(tmp, trace):
    """sim on an evicting trace (the last one: snapkv:window=8:kernel=3, N = 32): one note line, then it runs."""
    for quiet in ([], ["--quiet"]):
        out = os.path.join(tmp, "sim_note")
        r = run("sim", trace, *quiet, "--policies", "full,streaming", "--budgets", str(N), "--chunk", str(B),
                "--force", "-o", out)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 0 and os.path.exists(os.path.join(out, "results.csv")) and len(lines) == 1
              and lines[0].startswith("kvtrace sim: note: ") and "eviction inside the model" in lines[0]
              and "snapkv:kernel=3:pool=avg:window=8, budget %d" % N in lines[0],
              "sim on an evicting trace%s: one note line naming the in-model policy and budget, then runs"
              % (" (--quiet)" if quiet else ""), r.stderr)


def main():
    if not MODEL:
        skip("in-model eviction on stories260K", NO_MODEL)
        return finish()
    with tempfile.TemporaryDirectory() as tmp:
        with capture(tmp, "seq.h5", write_tokens(tmp, "bos.ids", [1]), "--generate", "99") as f:
            ids = f["tokens"][:]
        long_tok = write_tokens(tmp, "long.ids", ids)
        first = 3 * B  # C = 48 > N = 32 after the third chunk: the first eviction
        short_tok = write_tokens(tmp, "short.ids", ids[:first])

        with capture(tmp, "full.h5", long_tok) as full, \
                capture(tmp, "big.h5", long_tok, "--evict", "keydiff", "--budget", "1000") as big:
            check(big.attrs["capture_mode"] == "evict" and big.attrs["evict_budget"] == 1000,
                  "N >= T: the trace says capture_mode=evict, evict_budget=1000")
            for d in ("logits", "logprobs", "keys", "values", "queries", "tokens"):
                a, b = full[d][:], big[d][:]
                check(np.array_equal(a, b, equal_nan=True), "N >= T: /%s equals the full run's exactly" % d,
                      lambda: "max diff %g" % np.nanmax(np.abs(a - b)))

        capture(tmp, "short_full.h5", short_tok, "--attention", "none").close()
        ref = sim_retained(tmp, os.path.join(tmp, "short_full.h5"), "sim")
        for spec in POLICIES:
            name = spec.split(":")[0]
            retained = [] if name == "full" else ["--retained"]
            with capture(tmp, "ev_short.h5", short_tok, "--evict", spec, "--budget", str(N), "--force", *retained) as e:
                want = ref.get((e.attrs["evict_policy"], e.attrs["evict_params"]))
                if name == "full":
                    with h5py.File(os.path.join(tmp, "short_full.h5"), "r") as f:
                        check(np.array_equal(e["logits"][:], f["logits"][:]), "full never evicts: the full run's logits")
                    continue
                snap = e["evict/retained"][-1]
                check(want is not None and np.array_equal(snap, want[:, :, :N]),
                      "%s: the first eviction keeps what sim keeps" % spec,
                      lambda: "layer 0 kv 0: in-model %s\nsim %s" % (snap[0, 0], want[0, 0]))
            with capture(tmp, "ev_long.h5", long_tok, "--evict", spec, "--budget", str(N), "--force", "--retained") as e:
                ends, snaps = e["evict/step_end"][:], e["evict/retained"][:]
                s = int(np.nonzero(ends == first - 1)[0][0])
                check(np.array_equal(snaps[s], want[:, :, :N]), "%s: the long run's snapshot at step %d is sim's" % (spec, s))
                if name == "keydiff" and ":" not in spec:
                    info = run("info", os.path.join(tmp, "ev_long.h5"))
                    check(info.returncode == 0 and "/evict/retained" in info.stdout and "evict" in info.stdout,
                          "the evicting trace (with /evict) passes the reader's validation", info.stderr)
                valid = snaps >= 0
                sorted_ok = all(np.all(np.diff(r[r >= 0]) > 0) for r in snaps.reshape(-1, N))
                check(sorted_ok and valid.sum(-1).max() <= N and (snaps < len(ids)).all()
                      and (valid.sum(-1)[-1] == N).all(),
                      "%s: snapshots sorted, -1 padded, N kept at the end" % spec)
                if name == "tova" and "group" not in spec:
                    check(all(np.array_equal(snaps[:, :, 0], snaps[:, :, k]) for k in range(snaps.shape[2])),
                          "tova:scope=layer keeps one set per layer")
        check_sim_note(tmp, os.path.join(tmp, "ev_long.h5"))

        for args, code, what in (
                (["--evict", "oracle", "--budget", "8"], 2, "oracle is offline only"),
                (["--evict", "keydiff"], 2, "--evict without --budget"),
                (["--budget", "8"], 2, "--budget without --evict"),
                (["--evict", "keydiff", "--budget", "8", "--attention", "colsum"], 2, "--attention colsum with --evict"),
                (["--evict", "nosuch", "--budget", "8"], 2, "an unknown policy")):
            r = run("capture", "--quiet", "--model", MODEL, "--tokens", short_tok, "-o",
                    os.path.join(tmp, "x.h5"), *args)
            lines = r.stderr.strip().splitlines()
            check(r.returncode == code and len(lines) == 1 and lines[0].startswith("kvtrace: error:")
                  and not os.path.exists(os.path.join(tmp, "x.h5")),
                  "refused (exit %d, one line): %s" % (code, what), r.stderr)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
