"""Score expressions (docs/expressions.md): (1) equivalence: expressions restating knorm, keydiff
(norm, raw, pairwise, with a window), tova (scope=group), h2o (and normalize=age), streaming and snapkv keep
exactly the built-ins' sets in sim on synthetic traces (two shapes, prefill and decode chunks), in capture --evict
on the test model (whose trace records the definition), and in fidelity (in-model and offline rows equal); (2)
every error class of a bad expression is one line, exit 2, no output: the column, did-you-mean only for close
names, `NAME(` an unknown function, a feature's or function's wrong arity; (3) name clashes with a plug-in's
policy (either order) and one name given two definitions are refused, an existing -o is never merged into;
(4) each normaliser (z, rank, minmax, softmax) against numpy through thresholds; (5) --defines FILE and the label
(NAME) in results.h5 with its definition; (6) `kvtrace policies --features` lists every feature with its formula.
The other features and the language against numpy: test_expr_features.py. TAP."""
import csv
import os
import re
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from tap import check, finish, skip  # noqa: E402

KV = os.environ.get("KVTRACE", "")
PAIRS = [("ekn", "-knorm", "knorm", "knorm"),
         ("ekd", "-cos_anchor", "keydiff", "keydiff:anchor=norm:metric=cos:window=0"),
         ("ekdw", "-cos_anchor; protect = recent(0.2)", "keydiff:window=0.2", "keydiff:anchor=norm:metric=cos:window=0.2"),
         ("etova", "attn_last", "tova:scope=group", "tova:scope=group"),
         ("eh2o", "attn_acc; protect = recent(0.5)", "h2o", "h2o:normalize=none:recent=0.5"),
         ("estr", "pos; protect = sinks(4)", "streaming", "streaming:sinks=4"),
         ("eh2oa", "attn_acc_norm; protect = recent(0.3)", "h2o:normalize=age:recent=0.3", "h2o:normalize=age:recent=0.3"),
         ("ekp", "-cos_pairwise", "keydiff:anchor=pairwise", "keydiff:anchor=pairwise:metric=cos:window=0"),
         ("ekr", "-cos_anchor_raw", "keydiff:anchor=raw", "keydiff:anchor=raw:metric=cos:window=0"),
         ("esnap", "attn_pooled(8, 5); protect = recent_n(8)", "snapkv:window=8",
          "snapkv:kernel=5:pool=avg:window=8")]


def kept(out):
    with h5py.File(os.path.join(out, "results.h5"), "r") as f:
        return {(g.attrs["config"], int(g.attrs["budget"])): (g["retained"][()], g.attrs.get("definition"))
                for g in f["runs"].values()}


def synth(path, *shape):
    subprocess.run([KV, "synth", *shape, "--quiet", "-o", path], check=True, capture_output=True)


def equivalence(tmp):
    for i, shape in enumerate([["--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "32", "--tokens",
                                "200", "--prompt-len", "150"],
                               ["--layers", "1", "--heads", "2", "--kv-heads", "1", "--head-dim", "16", "--tokens",
                                "90", "--seed", "3"]]):
        t, out = os.path.join(tmp, f"t{i}.h5"), os.path.join(tmp, f"eq{i}")
        synth(t, *shape)
        args = [a for n, e, _, _ in PAIRS for a in ("--define", f"{n} = {e}")]
        pol = ",".join([n for n, _, _, _ in PAIRS] + [b for _, _, b, _ in PAIRS])
        r = subprocess.run([KV, "sim", t, "--budgets", "16,40", "--chunk", "16", "--decode-chunk", "3", "--quiet",
                            "-o", out, *args, "--policies", pol], capture_output=True, text=True)
        check(r.returncode == 0, f"sim with expressions beside the built-ins (trace {i})", r.stderr)
        if r.returncode:
            continue
        k = kept(out)
        for n, e, b, canon in PAIRS:
            for B in (16, 40):
                same = np.array_equal(k[(n, B)][0], k[(canon, B)][0])
                check(same, f"'{e}' keeps exactly {b}'s sets (trace {i}, N={B})")
        check(k[("ekn", 16)][1] == "ekn = -knorm", "results.h5 records the definition beside the label",
              str(k[("ekn", 16)][1]))


def csv_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def fidelity(tmp, model):
    """fidelity --define: the expression's in-model rows (fidelity.csv) and offline rows (sim/summary.csv) equal
    those of the built-in it restates, all but the labels; sim/results.h5 records the definition."""
    out = os.path.join(tmp, "fid")
    r = subprocess.run([KV, "fidelity", "--quiet", "--model", model, "--prompt", "Once upon a time there was",
                        "--generate", "30", "--policies", "knorm,ekn,tova:scope=group,et", "--define", "ekn = -knorm",
                        "--define", "et = attn_last", "--budgets", "12,20", "--chunk", "8", "--threads", "2",
                        "-o", out], capture_output=True, text=True)
    if not check(r.returncode == 0, "fidelity --define runs", r.stderr):
        return
    labels = ("config", "policy", "params", "run", "same_as")   # the labels; same_as is checked below
    for name, rel in (("in-model rows (fidelity.csv)", "fidelity.csv"), ("offline rows (sim/summary.csv)",
                                                                         "sim/summary.csv")):
        rows = csv_rows(os.path.join(out, rel))
        by = {}
        for row in rows:
            by.setdefault(row["config"], []).append({k: v for k, v in row.items() if k not in labels})
        ok = all(len(by.get(e, [])) > 0 and by.get(e) == by.get(b) for e, b in (("ekn", "knorm"),
                                                                                ("et", "tova:scope=group")))
        check(ok and all(row["policy"] == row["config"] and row["params"] == "" for row in rows
                         if row["config"] in ("ekn", "et")),
              f"fidelity --define: the expressions' {name} equal the built-ins' they restate, labelled NAME",
              str({k: v[:1] for k, v in by.items()}))
    summ = csv_rows(os.path.join(out, "sim/summary.csv"))
    check(all(r["same_as"] == {"ekn": "knorm", "et": "tova:scope=group"}[r["config"]] + "@uniform/" + r["chunk"]
              for r in summ if r["config"] in ("ekn", "et")),
          "sim marks each expression the same as the built-in it restates (same_as)")
    with h5py.File(os.path.join(out, "sim", "results.h5"), "r") as f:
        d = {g.attrs["config"]: g.attrs.get("definition") for g in f["runs"].values()}
    check(d.get("ekn") == "ekn = -knorm" and d.get("et") == "et = attn_last" and d.get("knorm") is None,
          "fidelity: sim/results.h5 records each expression's definition, none for a built-in", str(d))


def model_equivalence(tmp):
    model = os.path.join(os.environ.get("KVTRACE_MODEL_DIR", ""), "stories260K.gguf")
    if not os.path.exists(model):
        skip("capture --evict with an expression", "no test model")
        return
    sets, defs = [], []
    for ev, extra in (("ekn", ["--define", "ekn = -knorm"]), ("knorm", [])):
        out = os.path.join(tmp, f"c_{ev}.h5")
        r = subprocess.run([KV, "capture", "--model", model, "--prompt", "Once upon a time there was a little cat",
                            "--generate", "12", "--chunk", "8", "--evict", ev, *extra, "--budget", "10",
                            "--retained", "--quiet", "-o", out], capture_output=True, text=True)
        check(r.returncode == 0, f"capture --evict {ev}", r.stderr)
        with h5py.File(out, "r") as f:
            sets.append({k: f["evict"][k][()] for k in ("retained", "step_end")})
            defs.append(f.attrs.get("evict_definition"))
    check(sets[0].keys() == sets[1].keys() and all(np.array_equal(sets[0][k], sets[1][k]) for k in sets[0]),
          "in-model eviction: -knorm keeps knorm's sets", str(list(sets[0])))
    check(defs == ["ekn = -knorm", None], "capture --evict NAME: the trace records the definition "
          "(evict_definition), a built-in none", str(defs))
    fidelity(tmp, model)


BAD = [("mix = knorm * attn_ac", "col 15: unknown feature 'attn_ac' (did you mean attn_acc?)"),
       ("mix = knorm +", "col 14: expected a number, a feature or '('"),
       ("mix = max(knorm)", "max() takes 2 or more argument(s)"),
       ("mix = knorm; protect = sink(4)", "unknown protect 'sink'"),
       ("mix = knorm; protect = recent(2)", "recent: the argument is not in [0, 1]"),
       ("knorm = pos", "knorm is a built-in policy's name"),
       ("1x = pos", "not NAME = EXPR"),
       ("mix = attn_window(0)", "an argument is not an integer in range"),
       ("mix = knorm pos", "col 13: unexpected 'pos'"),
       ("mix = (knorm", "expected ')'"),
       ("mix = pos(3)", "feature 'pos' takes no arguments"),
       ("mix =   ", "the expression is empty"),
       # did-you-mean only for close names (1 edit under 5 characters, 2 from 5; none under 3)
       ("mix = foo", "col 7: unknown feature 'foo'; kvtrace policies --features lists them"),
       ("mix = x + 1", "col 7: unknown feature 'x'; kvtrace policies --features"),
       ("mix = 2 * knrom", "col 11: unknown feature 'knrom' (did you mean knorm?)"),
       ("mix = posx", "unknown feature 'posx' (did you mean pos?)"),
       # NAME( is a call: an unknown function, suggestions among what takes arguments
       ("mix = pos + foo(knorm)", "col 13: unknown function 'foo'; kvtrace policies --features"),
       ("mix = logg(pos)", "col 7: unknown function 'logg' (did you mean log?)"),
       ("mix = is_snk(2)", "col 7: unknown function 'is_snk' (did you mean is_sink?)"),
       ("mix = sinks(4)", "col 7: unknown function 'sinks' (sinks is a protect item"),
       # arity, at the feature's or function's column
       ("mix = pos + is_sink(4, 5)", "col 13: feature is_sink(k) takes 1 argument, 2 given"),
       ("mix = attn_pooled(1, 2, 3)", "col 7: feature attn_pooled(W, K) takes 1 or 2 arguments, 3 given"),
       ("mix = is_sink()", "col 7: feature is_sink(k) takes 1 argument, 0 given (is_sink alone: the default)"),
       ("mix = knorm()", "col 7: feature 'knorm' takes no arguments"),
       ("mix = 1 + clamp(pos, 1)", "col 11: clamp() takes 3 argument(s)"),
       ("mix = log(pos, 2)", "col 7: log() takes 1 argument(s)")]


def errors(tmp):
    t = os.path.join(tmp, "t1.h5")
    for d, want in BAD:
        out = os.path.join(tmp, "bad")
        r = subprocess.run([KV, "sim", t, "--budgets", "16", "--chunk", "16", "-o", out, "--define", d,
                            "--policies", "mix"], capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and want in lines[0] and not os.path.exists(out),
              f"--define '{d}': exit 2, one line naming the problem", r.stderr)
    r = subprocess.run([KV, "sim", t, "--budgets", "16", "--chunk", "16", "-o", os.path.join(tmp, "bad"),
                        "--define", "a = pos", "--define", "a = -pos", "--policies", "a"], capture_output=True, text=True)
    check(r.returncode == 2 and "defined twice" in r.stderr, "one name, two definitions: refused", r.stderr)


def clashes(tmp):
    """A --define named as a plug-in's policy is refused in either order; one name never gets two definitions in
    one set of results: --define beside --defines refused, and an existing -o is replaced whole (--force), never
    added to."""
    t = os.path.join(tmp, "t1.h5")
    so = os.path.join(tmp, "plugknorm.so")
    r = subprocess.run(["cc", "-std=c11", "-I" + os.path.join(HERE, "..", "..", "include"), "-O1", "-fPIC", "-shared",
                        os.path.join(HERE, "..", "plugins", "knorm_plugin.c"), "-o", so, "-lm"],
                       capture_output=True, text=True)
    if not check(r.returncode == 0, "tests/plugins/knorm_plugin.c builds", r.stderr):
        return
    for what, args in (("--plugin before --define", ["--plugin", so, "--define", "plugknorm = pos"]),
                       ("--define before --plugin", ["--define", "plugknorm = pos", "--plugin", so])):
        out = os.path.join(tmp, "clash")
        r = subprocess.run([KV, "sim", t, "--budgets", "16", "--chunk", "16", "-o", out, *args,
                            "--policies", "plugknorm"], capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and "--define plugknorm" in lines[0] and "plugin" in lines[0]
              and not os.path.exists(out), f"a --define named as a plug-in's policy ({what}): one line, exit 2",
              r.stderr)
    path = os.path.join(tmp, "one.txt")
    with open(path, "w") as f:
        f.write("a = pos\n")
    r = subprocess.run([KV, "sim", t, "--budgets", "16", "--chunk", "16", "-o", os.path.join(tmp, "two"), "--defines",
                        path, "--define", "a = -pos", "--policies", "a"], capture_output=True, text=True)
    check(r.returncode == 2 and "defined twice" in r.stderr and not os.path.exists(os.path.join(tmp, "two")),
          "--defines and --define giving one name two definitions: refused", r.stderr)
    out = os.path.join(tmp, "again")
    sim = [KV, "sim", t, "--budgets", "16", "--chunk", "16", "--quiet", "-o", out, "--policies", "a,knorm"]
    r1 = subprocess.run(sim + ["--define", "a = pos"], capture_output=True, text=True)
    r2 = subprocess.run(sim + ["--define", "a = -pos"], capture_output=True, text=True)
    kept1 = kept(out) if r1.returncode == 0 else {}
    check(r1.returncode == 0 and r2.returncode == 2 and kept1.get(("a", 16), (0, ""))[1] == "a = pos",
          "sim into an existing -o with a changed definition: refused, the old results stay", r1.stderr + r2.stderr)
    r3 = subprocess.run(sim + ["--define", "a = -pos", "--force"], capture_output=True, text=True)
    k3 = kept(out) if r3.returncode == 0 else {}
    check(r3.returncode == 0 and sorted(k3) == [("a", 16), ("knorm", 16)] and k3[("a", 16)][1] == "a = -pos",
          "--force replaces the results whole: one run per config, the new definition", r3.stderr)


def np_norm(op, x):
    if op == "z":
        sd = x.std()
        return np.zeros_like(x) if sd == 0 else (x - x.mean()) / sd
    if op == "minmax":
        return np.zeros_like(x) if x.max() == x.min() else (x - x.min()) / (x.max() - x.min())
    if op == "softmax":
        e = np.exp(x - x.max())
        return e / e.sum()
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x))
    for v in np.unique(x):   # ties averaged
        r[x == v] = r[x == v].mean()
    return r / (len(x) - 1)


def normalisers(tmp):
    """One chunk holds the whole trace: the kept set is the top N of the score; compare the score against numpy
    through thresholds: `op(f) > c` keeps exactly the candidates numpy puts above c (plus the newest as ties)."""
    t = os.path.join(tmp, "t1.h5")
    with h5py.File(t, "r") as f:
        k = f["/keys"][0, 0].astype(np.float64)  # [T, D]: layer 0, kv head 0
    T = k.shape[0]
    for op in ("z", "rank", "minmax", "softmax"):
        out = os.path.join(tmp, f"n_{op}")
        y = np_norm(op, np.linalg.norm(k, axis=1))
        c = float(np.quantile(y, 0.6))
        want = np.nonzero(y > c + 1e-12 * max(1, abs(c)))[0]
        d = f"e = {op}(knorm) > {c!r} ? 1 : 0; protect = sinks(0)"
        N = len(want)
        r = subprocess.run([KV, "sim", t, "--budgets", str(N), "--chunk", str(T), "--quiet", "-o", out,
                            "--define", d, "--policies", "e"], capture_output=True, text=True)
        check(r.returncode == 0, f"{op}: runs", r.stderr)
        if r.returncode:
            continue
        got = kept(out)[("e", N)][0][0, 0]
        got = np.sort(got[got >= 0])
        check(np.array_equal(got, want), f"{op}(knorm) against numpy: the same candidates above a threshold",
              f"{got} vs {want}")


# every feature of docs/expressions.md#features-kvtrace-policies---features, with a piece of its formula; the language's functions and protect items
FEATURES = {"knorm": "|k_j|", "vnorm": "|v_j|", "cos_anchor": "cos(k_j, mean_m k_m/|k_m|)",
            "cos_anchor_raw": "cos(k_j, mean_m k_m)", "cos_pairwise": "mean_{m!=j} cos(k_j, k_m)",
            "attn_last": "last query", "attn_window(W)": "last W queries", "attn_pooled(W, K)": "attn_window(W)",
            "attn_acc": "attention received", "attn_acc_norm": "attn_acc / (now - pos + 1)", "pos": "position",
            "age": "now - pos", "is_sink(k)": "1 when pos < k", "recency_rank": "(n-1-j)/(n-1)",
            "future_attn": "future queries"}
LANGUAGE = ["log exp sqrt abs", "min(a, b, ...)", "max(a, b, ...)", "clamp(x, lo, hi)", "z(x)", "rank(x)",
            "minmax(x)", "softmax(x)", "sinks(k)", "recent(", "recent_n(k)", "?", "^"]


def features_listing():
    """kvtrace policies --features: the feature section (up to the first blank line after the heading) has one
    line per feature, NAME[(ARGS)] then its formula; the language after it; the same names as
    docs/expressions.md's feature table."""
    r = subprocess.run([KV, "policies", "--features"], capture_output=True, text=True)
    section = r.stdout.split("\n\n")[1] if r.stdout.count("\n\n") else ""
    lines = dict(m.groups() for m in re.finditer(r"^  ([a-z_]+(?:\([^)]*\))?) +(\S.*)$", section, re.M))
    for name, formula in FEATURES.items():
        check(r.returncode == 0 and formula in lines.get(name, ""), f"policies --features lists {name} with its "
              "formula", r.stdout)
    check(len(lines) == len(FEATURES) == len(section.strip().splitlines()), "policies --features: one line per "
          "feature, no other", section)
    check(all(w in r.stdout for w in LANGUAGE), "policies --features lists the functions, normalisers and protect "
          "items", r.stdout)
    check("sim only" in lines.get("future_attn", ""), "policies --features: future_attn marked sim only")
    with open(os.path.join(HERE, "..", "..", "docs", "expressions.md")) as f:
        text = f.read()
    table = text[text.index("## Features"):text.index("## Language")]
    doc = {n for ln in table.splitlines() if ln.startswith("| `") for n in re.findall(r"`([a-z_]+)", ln.split("|")[1])}
    check(doc == {n.split("(")[0] for n in lines}, "the features listed are docs/expressions.md's table's",
          f"{sorted(doc)} vs {sorted(lines)}")


def defines_file(tmp):
    t, out = os.path.join(tmp, "t1.h5"), os.path.join(tmp, "df")
    path = os.path.join(tmp, "defs.txt")
    with open(path, "w") as f:
        f.write("# two definitions\n\nlow = -knorm   # smallest keys\nold = -pos; protect = recent_n(3)\n")
    r = subprocess.run([KV, "sim", t, "--budgets", "12", "--chunk", "16", "--quiet", "-o", out, "--defines", path,
                        "--policies", "low,old"], capture_output=True, text=True)
    check(r.returncode == 0 and set(kept(out)) == {("low", 12), ("old", 12)}, "--defines FILE: both usable", r.stderr)
    with open(path, "a") as f:
        f.write("bad = knorm +\n")
    r = subprocess.run([KV, "sim", t, "--budgets", "12", "--chunk", "16", "-o", out + "2", "--defines", path,
                        "--policies", "low"], capture_output=True, text=True)
    check(r.returncode == 2 and f"{path}:5: --define bad: col" in r.stderr, "--defines: a bad line named", r.stderr)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        equivalence(tmp)
        errors(tmp)
        clashes(tmp)
        normalisers(tmp)
        defines_file(tmp)
        features_listing()
        model_equivalence(tmp)
    finish()


if __name__ == "__main__":
    main()
