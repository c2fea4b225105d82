"""Every CSV that sim, analyze and fidelity write, loaded as a notebook would:
pandas.read_csv(path) with its defaults (docs/outputs.md#conventions-of-every-csv).
A small pipeline (a trace of stories260K, or a synth trace without the
model; sim with full, knorm, oracle, keydiff, ... at two budgets; analyze;
fidelity on a few configurations when the model is there), then for each
file: a config column never NaN, groupby('config') and groupby(['config',
'budget']) see every configuration that ran, heads named q_head and kv_head
(kv_head = q_head // (H/K)), never `head`, and no column entirely NaN but
the documented ones. pca_kept.csv against results.h5's retained positions
read with h5py, and results.h5's groups sorting in run order. TAP."""
import os
import subprocess
import sys
import tempfile

import h5py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import NO_MODEL, check, finish, model_file, skip  # noqa: E402

try:
    import pandas as pd
except ImportError:  # Debian's python3-pandas (scripts/install-deps.sh installs it)
    pd = None

KVTRACE = os.environ["KVTRACE"]
MODEL = model_file()
BUDGETS = [32, 64]
# what sim is asked for, and the config label each must get (defaults filled, sorted by key), written out
# here rather than taken from kvtrace so that the test says what the label is
POLICIES = [
    ("full", "full"), ("knorm", "knorm"), ("oracle", "oracle"),
    ("keydiff", "keydiff:anchor=norm:metric=cos:window=0"),
    ("keydiff:window=0.2", "keydiff:anchor=norm:metric=cos:window=0.2"),
    ("streaming", "streaming:sinks=4"), ("tova", "tova:scope=layer"), ("h2o", "h2o:normalize=none:recent=0.5"),
    ("snapkv", "snapkv:kernel=5:pool=avg:window=32"), ("random", "random:seed=0"),
    ("primekv", "primekv:key=anchor:value=dev"),
]
FID_POLICIES = [("full", "full"), ("knorm", "knorm"), ("keydiff", "keydiff:anchor=norm:metric=cos:window=0"),
                ("streaming", "streaming:sinks=4")]
# columns that may be entirely NaN (docs/outputs.md says when): params is empty for parameter-free policies,
# so a file whose configurations are all parameter-free (logdet's full-cache rows alone, fidelity's
# parameter-free pairs) reads it as NaN; fidelity's rank correlations are NaN where nothing varies; sim's
# budget_fraction is empty when every budget was given as N, head_budget_mean NaN when no step evicted
MAY_BE_ALL_NAN = {"params", "params_a", "params_b", "rho_out_rel_err_kl", "rho_attn_loss_kl", "budget_fraction",
                  "head_budget_mean", "same_as"}
# columns that hold "head" but are not a head index: a (layer, kv head)'s kept rows (sim's allocators)
HEAD_VALUES = {"head_budget", "head_budget_mean"}


def run(*args):
    return subprocess.run([KVTRACE] + [str(a) for a in args], capture_output=True, text=True)


def make_trace(tmp):
    trace = os.path.join(tmp, "trace.h5")
    if MODEL:
        r = run("capture", "--quiet", "--model", MODEL, "--prompt", "Once upon a time", "--generate", 160,
                "--chunk", 16, "-o", trace)
    else:
        r = run("synth", "--quiet", "--like", "stories260k", "--tokens", 180, "--seed", 2, "-o", trace)
    check(r.returncode == 0, "a trace (%s)" % ("stories260K capture" if MODEL else "synth, no model"), r.stderr)
    with h5py.File(trace, "r") as f:
        return trace, int(f.attrs["n_heads"]), int(f.attrs["n_kv_heads"])


def csv_files(*dirs):
    out = []
    for d in dirs:
        for root, _, names in os.walk(d):
            out += [os.path.join(root, n) for n in sorted(names) if n.endswith(".csv")]
    return sorted(out)


def check_heads(name, df, H, K):
    heads = [c for c in df.columns if "head" in c and c not in HEAD_VALUES]
    check("head" not in df.columns and all(c in ("q_head", "kv_head") for c in heads),
          "%s: heads are q_head/kv_head, never head" % name, str(list(df.columns)))
    if "q_head" in df.columns:
        check("kv_head" in df.columns and (df["kv_head"] == df["q_head"] // (H // K)).all(),
              "%s: kv_head = q_head // (H/K) beside q_head, for joins with logdet/pca" % name)


def check_configs(name, df, want, budgets):
    """`want`: every config that ran; `budgets`: every budget each ran at (None: no budget column expected)."""
    check(df["config"].notna().all() and df["config"].map(type).eq(str).all() and (df["config"] != "").all(),
          "%s: config never NaN or empty" % name, str(df["config"].head()))
    check(list(df.columns[:3]) == ["config", "policy", "params"], "%s: config first, policy and params beside it"
          % name, str(list(df.columns)))
    got = set(df.groupby("config").groups)
    check(got == set(want), "%s: groupby('config') sees all %d configurations" % (name, len(want)),
          "missing %s, extra %s" % (sorted(set(want) - got), sorted(got - set(want))))
    label = df["policy"] + df["params"].fillna("").map(lambda p: ":" + p if p else "")
    check((label == df["config"]).all(), "%s: config is policy, or policy:params" % name)
    if budgets is not None:
        groups = set(df.groupby(["config", "budget"]).groups)
        want_groups = {(c, b) for c in want for b in budgets.get(c, BUDGETS)}
        check(groups == want_groups, "%s: groupby(['config', 'budget']) sees all %d (configuration, budget) pairs"
              % (name, len(want_groups)), "missing %s" % sorted(want_groups - groups)[:5])


def check_nan_columns(name, df):
    if df.empty:
        return
    all_nan = [c for c in df.columns if df[c].isna().all() and c not in MAY_BE_ALL_NAN]
    check(not all_nan, "%s: no column entirely NaN (but the documented ones)" % name, str(all_nan))


def check_run_column(trace, tmp):
    """A sweep over allocators and chunks: groupby('config') pools its runs; groupby(['run', 'budget']) keeps each
    (config, allocator, chunk, budget) apart, in every sim CSV that has a run column."""
    out = os.path.join(tmp, "sweep")
    r = run("sim", trace, "--quiet", "--policies", "tova,knorm", "--allocators", "uniform,pyramid:window=8",
            "--budgets", "24,48", "--chunks", "8,16", "-o", out)
    if not check(r.returncode == 0, "sim over 2 policies x 2 allocators x 2 chunks x 2 budgets", r.stderr):
        return
    for name in ("results.csv", "summary.csv", "summary_by_trace.csv", "timing.csv"):
        df = pd.read_csv(os.path.join(out, name))
        want = {("%s@%s/%d" % (c, a, k), b) for c, a, k, b in zip(df.config, df.allocator, df.chunk, df.budget)}
        got = set(df.groupby(["run", "budget"]).groups)
        check(len(df.groupby("config").groups) == 2 and got == want and len(got) == 16,
              "%s: groupby(['run', 'budget']) sees all 16 runs, run = config@allocator/chunk (groupby('config') pools "
              "them into 2)" % name, sorted(got)[:4])


def check_pca_kept(res, an):
    """pca_kept.csv rows = results.h5's retained positions (h5py), one row each; the groups sort in run order."""
    kept = pd.read_csv(os.path.join(an, "pca_kept.csv"))
    summary = pd.read_csv(os.path.join(res, "summary.csv"))
    with h5py.File(os.path.join(res, "results.h5"), "r") as f:
        names = sorted(f["runs"])
        want, order = [], []
        for n in names:
            g = f["runs"][n]
            cfg, b = g.attrs["config"], int(g.attrs["budget"])
            order.append((cfg, b))
            ret = g["retained"][:]
            want += [(cfg, b, l, kv, int(p)) for l in range(ret.shape[0]) for kv in range(ret.shape[1])
                     for p in ret[l, kv] if p >= 0]
    sim_order = list(dict.fromkeys(zip(summary["config"], summary["budget"])))
    check(order == sim_order and names == ["run%04d" % (i + 1) for i in range(len(names))],
          "results.h5: groups run0001.. sort in sim's order (policies as given, then budgets)", str(order[:4]))
    got = list(zip(kept["config"], kept["budget"], kept["layer"], kept["kv_head"], kept["position"]))
    check(len(got) == len(set(got)) and sorted(got) == sorted(want),
          "pca_kept.csv: exactly results.h5's retained positions, one row each (%d rows)" % len(want),
          "%d rows, want %d" % (len(got), len(want)))
    pca = pd.read_csv(os.path.join(an, "pca.csv"))
    joined = kept.merge(pca, on=["layer", "kv_head", "position"], how="left")
    check(list(pca.columns) == ["layer", "kv_head", "position", "pc1", "pc2"] and joined["pc1"].notna().all(),
          "pca.csv: coordinates once per (layer, kv_head, position); every kept row joins to them")


def expected(name, H, K, T, sim_cfgs, fid_cfgs):
    """(configs, budgets per config) a file must show, or None when it names no configuration."""
    base = os.path.basename(name)
    in_fid = "/fid/" in name
    cfgs = fid_cfgs if in_fid else sim_cfgs
    if name == "/fid/summary.csv":  # fidelity's rank agreement: one row per budget and one for all, no config
        return None
    if base in ("results.csv", "summary.csv", "timing.csv", "fidelity.csv", "positions.csv", "pca_kept.csv"):
        budgets = {}
        if base == "positions.csv":  # no position is affected where the budget holds the whole sequence
            budgets = {c: [b for b in BUDGETS if b < T] for c in cfgs}
        return cfgs, budgets
    if base == "logdet.csv":
        return cfgs + ["full_cache"], {"full_cache": [T]}
    return None


def check_all(dirs, H, K, T, sim_cfgs, fid_cfgs):
    files = csv_files(*dirs)
    names = {os.path.relpath(p, os.path.dirname(dirs[0])) for p in files}
    for must in ("res/results.csv", "res/summary.csv", "res/timing.csv", "an/pca_kept.csv", "an/pca.csv",
                 "an/logdet.csv", "an/spearman.csv"):
        check(must in names, "%s written" % must)
    check(not [n for n in names if n.endswith("pca_runs.csv")], "no pca_runs.csv any more")
    for path in files:
        name = os.path.relpath(path, os.path.dirname(dirs[0]))
        try:
            df = pd.read_csv(path)
        except Exception as e:  # noqa: BLE001
            check(False, "%s loads with pandas.read_csv defaults" % name, repr(e))
            continue
        check(True, "%s loads with pandas.read_csv defaults (%d rows)" % (name, len(df)))
        check_heads(name, df, H, K)
        check_nan_columns(name, df)
        want = expected("/" + name, H, K, T, sim_cfgs, fid_cfgs)
        if want is not None:
            check_configs(name, df, want[0], want[1] if "budget" in df.columns else None)
        elif os.path.basename(name) == "misordered.csv":
            check(list(df.columns[:8]) == ["config_a", "policy_a", "params_a", "allocator_a", "config_b", "policy_b",
                                           "params_b", "allocator_b"],
                  "%s: config_a/config_b first, each with its allocator" % name)
            check(not len(df) or (df["config_a"].notna().all() and df["config_b"].notna().all()),
                  "%s: config_a and config_b never NaN" % name)


def main():
    if pd is None:
        skip("every output CSV loads in pandas", "pandas is not installed for /usr/bin/python3 (python3-pandas)")
        return finish()
    with tempfile.TemporaryDirectory() as tmp:
        trace, H, K = make_trace(tmp)
        with h5py.File(trace, "r") as f:
            T = int(f.attrs["n_tokens"])
        res, an, fid = (os.path.join(tmp, d) for d in ("res", "an", "fid"))
        r = run("sim", trace, "--quiet", "--policies", ",".join(p for p, _ in POLICIES), "--budgets",
                ",".join(map(str, BUDGETS)), "--chunk", 16, "-o", res)
        check(r.returncode == 0, "sim with %d policies at budgets %s" % (len(POLICIES), BUDGETS), r.stderr)
        r = run("analyze", trace, "--quiet", "--results", res, "-o", an)
        check(r.returncode == 0, "analyze", r.stderr)
        dirs = [res, an]
        if MODEL:
            r = run("fidelity", "--quiet", "--model", MODEL, "--prompt", "Once upon a time", "--generate", 80,
                    "--policies", ",".join(p for p, _ in FID_POLICIES), "--budgets", ",".join(map(str, BUDGETS)),
                    "--chunk", 16, "-o", fid)
            if check(r.returncode == 0, "fidelity on %d configurations" % len(FID_POLICIES), r.stderr):
                dirs.append(fid)
        else:
            skip("fidelity's CSVs load in pandas", NO_MODEL)
        check_all(dirs, H, K, T, [c for _, c in POLICIES], [c for _, c in FID_POLICIES])
        check_pca_kept(res, an)
        check_run_column(trace, tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
