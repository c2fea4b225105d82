"""load_results, load_analysis, load_study against independent reads: `kvtrace info --columns` (the
C writers' column tables), pandas.read_csv and h5py of the same files; and their refusals."""
import json
import os
import re
import shutil

import h5py
import numpy as np
import pandas as pd
import pytest

import kvtrace
from kvtrace import _columns

INTENDED = {"label": "category", "text": "str", "int": "int64", "int?": "Int64", "real": "float64"}


def c_tables(run_kvtrace):
    """`kvtrace info --columns`: {(maker, file): [column, ...]}."""
    out = {}
    for line in run_kvtrace("info", "--columns").stdout.splitlines():
        m = re.match(r"^\[([^\]]+)\] (\S+): (.*)$", line)
        assert m, line
        out[(m.group(1), m.group(2))] = m.group(3).split(",")
    return out


def test_column_tables_are_the_c_tools(run_kvtrace):
    c = c_tables(run_kvtrace)
    assert sorted(c) == sorted(_columns.TABLES)
    for key, cols in c.items():
        assert [n for n, _ in _columns.TABLES[key]] == cols, key
    for key, cols in _columns.TABLES.items():
        assert all(kind in INTENDED for _, kind in cols), key


def _is_dtype(series, kind):
    d = series.dtype
    if kind == "label":
        return isinstance(d, pd.CategoricalDtype)
    if kind == "text":
        return pd.api.types.is_string_dtype(d)
    if kind == "int":
        return d == np.int64
    if kind == "int?":
        return isinstance(d, pd.Int64Dtype)
    return d == np.float64


def check_table(df, path, maker, covered=None):
    """Every column of the file's table, with its intended dtype, and the values pandas.read_csv reads."""
    name = os.path.basename(path)
    cols = _columns.TABLES[(maker, name)]
    assert list(df.columns) == [c for c, _ in cols], path
    raw = pd.read_csv(path, dtype=str, keep_default_na=False)       # every cell as the text written
    plain = pd.read_csv(path)                                          # pandas' defaults, as docs/outputs.md says
    assert len(raw) == len(plain) == len(df) and list(raw.columns) == list(df.columns)
    for c, kind in cols:
        assert _is_dtype(df[c], kind), (path, c, df[c].dtype, kind)
        if kind in ("real", "int", "int?"):
            want = np.array([np.nan if x in ("", "nan") else float(x) for x in raw[c]])
            assert np.array_equal(df[c].astype("float64").to_numpy(), want, equal_nan=True), (path, c)
            if kind == "int":
                assert np.array_equal(df[c].to_numpy(), [int(x) for x in raw[c]]), (path, c)
            assert np.array_equal(df[c].astype("float64").to_numpy(), plain[c].astype("float64").to_numpy(),
                                  equal_nan=True), (path, c)
        else:
            assert ["" if pd.isna(x) else x for x in df[c]] == list(raw[c]), (path, c)
    if covered is not None:
        covered.add((maker, name))


def test_load_results(files):
    d = files["results"]
    r = kvtrace.load_results(d)
    for name in ("results", "summary", "summary_by_trace", "timing"):
        check_table(getattr(r, name), os.path.join(d, name + ".csv"), "sim")
    assert r.spans is None and r.spans_summary is None
    # the grid: 4 policies x 2 budgets x 2 allocators, L*H*3 rows each
    assert len(r.results) == 4 * 2 * 2 * 2 * 4 * 3
    assert set(r.results["allocator"].cat.categories) == {"uniform", "pyramid:beta=20:window=8"}
    frac = r.summary.groupby("budget")["budget_fraction"].first()
    assert np.isnan(frac[16]) and frac[24] == 0.5
    assert r.summary["params"].isna().sum() > 0          # full has no parameters: NaN, as pandas reads it
    assert r.summary.groupby("config", observed=True).ngroups == 4
    with h5py.File(os.path.join(d, "results.h5"), "r") as f:
        idx = pd.DataFrame(f["index"][()])
        assert r.meta == {k: (v.item() if isinstance(v, np.generic) else v) for k, v in f.attrs.items()}
        assert list(r.runs.columns) == list(idx.columns) and len(r.runs) == len(idx) == 16
        for c in idx.columns:
            if idx[c].dtype == object:
                theirs = idx[c].map(lambda b: b.decode())
                assert list(r.runs[c].astype(object).where(r.runs[c].notna(), "")) == list(theirs), c
            else:
                assert np.array_equal(r.runs[c].to_numpy(), idx[c].to_numpy(), equal_nan=True), c
        assert np.array_equal(r.final_cache("run0003"), f["runs/run0003/retained"][()])
        assert np.array_equal(r.final_cache(3), f["runs/run0003/retained"][()])
    assert isinstance(r.runs["config"].dtype, pd.CategoricalDtype) and r.runs["budget"].dtype == np.int64
    with open(os.path.join(d, "provenance.json")) as f:
        assert r.provenance == json.load(f)
    assert "trace_sha256" in r.meta and "16 runs" in repr(r)


def test_load_study_results(files):
    d = files["study_results"]
    r = kvtrace.load_results(d)
    for name in ("results", "summary", "summary_by_trace", "timing", "spans", "spans_summary"):
        check_table(getattr(r, name), os.path.join(d, name + ".csv"), "sim")
    assert list(r.summary_by_trace["trace"].cat.categories) == sorted(files["study_ids"])
    assert {"NA", "007"} <= set(r.results["trace"])     # prompt ids as written: not a missing value, not 7
    assert set(r.spans["span"]) == {"needle", "question"}
    assert set(r.summary["chunk"]) == {8, 16} and set(r.summary["n_traces"]) == {4}


def test_load_analysis(files, run_kvtrace):
    d = files["analysis"]
    an = kvtrace.load_analysis(d)
    assert not an.is_study and an.trace_dirs == {}
    for name in ("meta", "spearman", "logdet", "pca", "pca_kept", "pca_var", "budgets", "head_importance",
                 "detail"):
        check_table(an[name], os.path.join(d, name + ".csv"), "analyze")
    for name in ("summary", "results", "timing"):
        check_table(an[name], os.path.join(d, name + ".csv"), "sim")
    assert an.spans is None and an.study_spearman is None and an.summary_by_trace is None
    with pytest.raises(KeyError):
        an["nonsense"]
    m = an.meta
    with kvtrace.open_trace(files["trace"]) as t:
        assert (m["L"], m["H"], m["K"], m["D"], m["T"], m["prompt_tokens"]) == (
            t.n_layers, t.n_heads, t.n_kv_heads, t.head_dim, t.n_tokens, t.prompt_len)
        assert m["model"] == t.model_name and m["capture_mode"] == t.capture_mode
        assert len(an.pca) == t.n_layers * t.n_kv_heads * t.n_tokens
    assert (an.logdet["config"] == "full_cache").sum() == 4
    with open(os.path.join(d, "provenance.json")) as f:
        assert an.provenance == json.load(f)


def test_load_analysis_without_results(files):
    an = kvtrace.load_analysis(files["analysis_bare"])
    assert len(an.pca_kept) == 0 and len(an.budgets) == 0 and an.summary is None
    check_table(an.pca_kept, os.path.join(files["analysis_bare"], "pca_kept.csv"), "analyze")
    assert isinstance(an.pca_kept["config"].dtype, pd.CategoricalDtype) and an.pca_kept["position"].dtype == np.int64


def test_load_study_analysis(files):
    d = files["study_analysis"]
    an = kvtrace.load_analysis(d)
    assert an.is_study
    for name in ("study_spearman", "study_logdet", "paired", "meta", "budgets"):
        check_table(an[name], os.path.join(d, name + ".csv"), "analyze")
    for name in ("summary", "summary_by_trace", "results", "timing", "spans", "spans_summary"):
        check_table(an[name], os.path.join(d, name + ".csv"), "sim")
    ids = files["study_ids"]
    assert an.trace_ids() == sorted(ids)
    assert sorted(an.trace_dirs) == sorted((i, c) for i in ids for c in (8, 16))
    full = an.study_logdet[an.study_logdet["config"] == "full_cache"]
    assert full["budget"].isna().all() and full["chunk"].isna().all()      # empty there: <NA>
    assert an.study_logdet["budget"].dropna().isin([16, 24]).all()
    one = an.trace("p1", 8)
    assert not one.is_study and one.summary is None
    for name in ("spearman", "logdet", "pca", "pca_kept", "budgets"):
        check_table(one[name], os.path.join(d, "traces", "p1", "chunk8", name + ".csv"), "analyze")
    assert one.meta["T"] == 56
    with pytest.raises(KeyError, match="say which"):
        an.trace("p1")
    with pytest.raises(KeyError):
        an.trace("zz", 8)


def test_every_sim_and_analyze_table_checked(files):
    """Each CSV sim and analyze write, met in the fixtures' directories and checked (columns, dtypes,
    values), but fidelity_join.csv (analyze --fidelity needs a fidelity --prompts directory: a model)."""
    covered = set()
    for key in ("results", "study_results"):
        r = kvtrace.load_results(files[key])
        for name in ("results", "summary", "summary_by_trace", "timing", "spans", "spans_summary"):
            if getattr(r, name) is not None:
                check_table(getattr(r, name), os.path.join(files[key], name + ".csv"), "sim", covered)
    for key in ("analysis", "analysis_bare", "study_analysis"):
        an = kvtrace.load_analysis(files[key])
        dirs = [files[key]] + sorted(an.trace_dirs.values())
        for d in dirs:
            a = kvtrace.load_analysis(d)
            for name, df in a.tables.items():
                maker = "sim" if name + ".csv" in ("results.csv", "summary.csv", "summary_by_trace.csv", "timing.csv",
                                                   "spans.csv", "spans_summary.csv") else "analyze"
                check_table(df, os.path.join(d, name + ".csv"), maker, covered)
    want = {k for k in _columns.TABLES if k[0] in ("sim", "analyze")} - {("analyze", "fidelity_join.csv")}
    assert want - covered == set()


def test_load_study(files):
    s = kvtrace.load_study(files["study"])
    ids = files["study_ids"]
    assert list(s) == ids == s.ids and len(s) == 4 and "NA" in s and "007" in s
    assert list(s.index.columns[:4]) == ["id", "file", "tokens", "sha256"] and s.index["tokens"].dtype == np.int64
    with open(os.path.join(files["study"], "index.jsonl")) as f:
        lines = [json.loads(x) for x in f]
    assert [r["tokens"] for r in lines] == list(s.index["tokens"])
    for i in ids:
        with s.trace(i) as t:
            assert t.n_tokens == int(s.index.set_index("id").loc[i, "tokens"])
            assert t.spans["needle"] == (5, 9)
    s.verify()
    assert kvtrace.load_study(os.path.join(files["study"], "index.jsonl")).ids == ids
    with pytest.raises(KeyError):
        s.trace("zz")


def test_study_refusals(files, tmp_path):
    d = tmp_path / "study"
    shutil.copytree(files["study"], d)
    index = str(d / "index.jsonl")
    with open(index) as f:
        good = f.read().splitlines()
    line = json.loads(good[1])
    bad = {
        "not JSON": "{",
        "unknown field 'x'": json.dumps(dict(line, x=1)),
        "'tokens' must be an integer >= 1": json.dumps(dict(line, tokens=0)),
        "'sha256' must be 64 lowercase hex digits": json.dumps(dict(line, sha256="ABC")),
        "'id' must be 1-128": json.dumps(dict(line, id=".hidden")),
        "'file' must be a file name": json.dumps(dict(line, file="../x.h5")),
        "id 'p0' is also on line 1": json.dumps(dict(line, id="p0")),
        "does not exist": json.dumps(dict(line, file="gone.h5")),
    }
    for words, text in bad.items():
        with open(index, "w") as f:
            f.write("\n".join([good[0], text, good[2]]) + "\n")
        with pytest.raises(kvtrace.ResultsError) as e:
            kvtrace.load_study(str(d))
        assert str(e.value).startswith(index + ":2: ") and words in str(e.value), str(e.value)
    with open(index, "w") as f:
        f.write("\n".join(good) + "\n")
    with h5py.File(str(d / "p1.h5"), "a") as f:
        f.attrs["creator"] = "changed"
    with pytest.raises(kvtrace.ResultsError, match=re.escape(index) + ":2: .*the trace changed"):
        kvtrace.load_study(str(d)).verify()
    with pytest.raises(kvtrace.ResultsError, match="without index.jsonl"):
        kvtrace.load_study(str(tmp_path))


def test_results_refusals(files, tmp_path):
    missing = str(tmp_path / "nothing")
    for load in (kvtrace.load_results, kvtrace.load_analysis):
        with pytest.raises(kvtrace.ResultsError) as e:
            load(missing)
        assert isinstance(e.value, ValueError) and isinstance(e.value, kvtrace.TraceError)
        assert str(e.value).startswith(missing + ": no such directory")
    d = tmp_path / "res"
    shutil.copytree(files["results"], d)
    summary = str(d / "summary.csv")
    with open(summary) as f:
        text = f.read()
    header, rest = text.split("\n", 1)
    cases = {
        "the header lacks n_traces": header.replace(",n_traces", "") + "\n" + rest,
        "the header has unknown extra": header + ",extra\n" + rest,
        "another order": ",".join(reversed(header.split(","))) + "\n" + rest,
        "does not end with a newline": text[:-1],
        "a cell does not parse as its column's type (line 2, column budget: 'sixteen' is not an integer)":
            text.replace(",16,", ",sixteen,", 1),
    }
    for words, body in cases.items():
        with open(summary, "w") as f:
            f.write(body)
        with pytest.raises(kvtrace.ResultsError) as e:
            kvtrace.load_results(str(d))
        msg = str(e.value)
        assert msg.startswith(summary + ": ") and words in msg and "\n" not in msg, msg
    os.remove(summary)
    with pytest.raises(kvtrace.ResultsError, match=re.escape(summary) + ": missing"):
        kvtrace.load_results(str(d))
    an = tmp_path / "an"
    shutil.copytree(files["analysis"], an)
    os.remove(str(an / "pca.csv"))
    with pytest.raises(kvtrace.ResultsError, match=re.escape(str(an / "pca.csv")) + ": missing"):
        kvtrace.load_analysis(str(an))
