"""--alias NAME=policy:key=value... (docs/sim.md#aliases-named-configurations): (1) sim --policies NAME runs the alias's configuration, labelled
by the expanded configuration (kept sets equal a run given the spelled-out spec); (2) chunkkv/criticalkv base=NAME
uses the alias's parameters: chunkkv over snapkv window=8 against numpy (test_sim's snapkv, test_policy_chunkkv's
chunk rule), labelled base=snapkv[kernel=5;pool=avg;window=8]; an alias of a policy with its defaults labels as the plain
name; (3) bad aliases: exit 2 with one line and no output; (4) capture --evict takes an alias and records the
expanded configuration; provenance.json keeps the --alias words. TAP."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402
import policy_trace as pt  # noqa: E402
import test_policy_chunkkv as ck  # noqa: E402  (its trace shape, numpy chunk rule)
import test_sim  # noqa: E402  (its numpy snapkv)

KV = os.environ.get("KVTRACE", "")


def sim(trace, out, *args):
    return subprocess.run([KV, "sim", trace, "--budgets", "9,20", "--chunk", "7", "--decode-chunk", "3", "--quiet",
                           "-o", out, *args], capture_output=True, text=True)


def labels(out):
    with h5py.File(os.path.join(out, "results.h5"), "r") as f:
        return sorted({(g.attrs["policy"], g.attrs["params"]) for g in f["runs"].values()})


def replay_chunkkv_snapkv(q, k, T, P, N, B, dc, size, window):
    S, p0 = np.array([], dtype=np.int64), 0
    while p0 < T:
        p1 = min(p0 + B, P) if p0 < P else min(p0 + dc, T)
        C = np.concatenate([S, np.arange(p0, p1)])
        if len(C) > N:
            s = test_sim.snapkv_scores(q, k[None], C, p1 - 1, len(q), window, 5)
            C = C[ck.exact_keep(s, C, size, N)]
        S, p0 = C, p1
    return S


def sim_cases(tmp):
    T, P = 61, 40
    trace = os.path.join(tmp, "a.h5")
    ck.write_trace(trace, T, P, 11)
    a, b = os.path.join(tmp, "alias"), os.path.join(tmp, "plain")
    r = sim(trace, a, "--alias", "fast=snapkv:window=8", "--alias", "plain=knorm", "--policies",
            "fast,chunkkv:base=fast:size=4,chunkkv:base=plain,criticalkv:base=fast")
    check(r.returncode == 0, "sim --alias: aliases in --policies and as base=", r.stderr)
    r2 = sim(trace, b, "--policies", "snapkv:window=8,chunkkv:base=knorm")
    if r.returncode or r2.returncode:
        check(False, "sim runs the spelled-out specs", r2.stderr)
        return
    want = [("chunkkv", "base=knorm:size=20"), ("chunkkv", "base=snapkv[kernel=5;pool=avg;window=8]:size=4"),
            ("criticalkv", "base=snapkv[kernel=5;pool=avg;window=8]:eps=0.0001:first=0.5:wo=absent"),
            ("snapkv", "kernel=5:pool=avg:window=8")]
    check(labels(a) == want, "labels are the expanded configurations (an alias of defaults: the plain name)",
          str(labels(a)))
    same = all(pt.kept(a, "snapkv", "kernel=5:pool=avg:window=8", N) == pt.kept(b, "snapkv", "kernel=5:pool=avg:window=8", N) and
               pt.kept(a, "chunkkv", "base=knorm:size=20", N) == pt.kept(b, "chunkkv", "base=knorm:size=20", N)
               for N in (9, 20))
    check(same, "an alias keeps what its spelled-out configuration keeps")
    q, k = ck.load(trace)
    G = ck.H // ck.K
    bad = []
    for N in (9, 20):
        got = pt.kept(a, "chunkkv", "base=snapkv[kernel=5;pool=avg;window=8]:size=4", N)
        for l in range(ck.L):
            for g in range(ck.K):
                w = replay_chunkkv_snapkv(q[l, g * G:(g + 1) * G], k[l, g], T, P, N, 7, 3, 4, 8)
                if list(w) != got[l][g]:
                    bad.append((N, l, g, list(w), got[l][g]))
    check(not bad, "chunkkv:base=ALIAS scores with the alias's parameters (numpy snapkv window=8)",
          "\n".join(map(str, bad[:3])))
    prov = json.load(open(os.path.join(a, "provenance.json")))
    check("fast=snapkv:window=8" in json.dumps(prov), "provenance.json keeps the --alias definitions")
    return trace


def refusal_cases(tmp, trace):
    cases = [
        (["--alias", "snapkv=knorm"], "knorm", "a policy's name"),
        (["--alias", "a=nosuch"], "knorm", "--alias a: unknown policy 'nosuch'"),
        (["--alias", "a=knorm", "--alias", "a=snapkv"], "knorm", "defined twice"),
        (["--alias", "a=knorm", "--alias", "b=a"], "knorm", "an alias names a policy"),
        (["--alias", "=knorm"], "knorm", "NAME=policy"),
        (["--alias", "a b=knorm"], "knorm", "a character other than"),
        (["--alias", "a=knorm:bogus=1"], "knorm", "--alias a: knorm: unknown parameter 'bogus'"),
        (["--alias", "a=snapkv"], "a:window=3", "alias 'a' takes no parameters"),
        (["--alias", "a=snapkv:window=8"], "a,snapkv:window=8", "the same configuration twice"),
        (["--alias", "f=full"], "chunkkv:base=f", "alias of full, which is not one of"),
        ([], "chunkkv:base=nosuch", "base=nosuch is not one of"),
    ]
    bad = []
    for args, pols, msg in cases:
        out = os.path.join(tmp, "bad")
        r = sim(trace, out, *args, "--policies", pols)
        lines = r.stderr.strip().splitlines()
        if not (r.returncode == 2 and len(lines) == 1 and msg in lines[0] and not os.path.exists(out)):
            bad.append((args, pols, r.returncode, r.stderr))
    check(not bad, "bad aliases: exit 2, one line saying what is wrong, no output (%d cases)" % len(cases),
          "\n".join(map(str, bad[:3])))


def capture_case(tmp):
    model = model_file()
    if not model:
        skip("capture --evict ALIAS", NO_MODEL)
        return
    out = os.path.join(tmp, "e.h5")
    r = subprocess.run([KV, "capture", "--quiet", "--model", model, "--prompt", "Once upon a time", "--generate", "16",
                        "--alias", "fast=snapkv:window=8", "--evict", "chunkkv:base=fast:size=4", "--budget", "12",
                        "--chunk", "8", "-o", out], capture_output=True, text=True)
    ok = r.returncode == 0
    if ok:
        with h5py.File(out, "r") as f:
            ok = f.attrs["evict_policy"] == "chunkkv" and f.attrs["evict_params"] == "base=snapkv[kernel=5;pool=avg;window=8]:size=4"
    check(ok, "capture --alias ... --evict chunkkv:base=ALIAS records the expanded configuration", r.stderr)
    r = subprocess.run([KV, "capture", "--quiet", "--model", model, "--alias", "o=oracle", "--evict", "o", "--budget",
                        "8", "-o", os.path.join(tmp, "o.h5")], capture_output=True, text=True)
    check(r.returncode == 2 and "offline only" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
          "capture --evict ALIAS of oracle: refused like oracle", r.stderr)


def main():
    tmp = tempfile.mkdtemp(prefix="kvtrace-alias-")
    try:
        trace = sim_cases(tmp)
        if trace:
            refusal_cases(tmp, trace)
        capture_case(tmp)
    finally:
        shutil.rmtree(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
