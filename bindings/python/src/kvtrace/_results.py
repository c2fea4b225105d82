"""Loaders for what the C tool writes beside traces: a results directory (`kvtrace sim -o DIR`,
docs/outputs.md), an analysis directory (`kvtrace analyze -o DIR`, docs/analysis_dir.md) and a study
directory (`index.jsonl` and one trace per prompt, docs/study.md).

Every CSV is read against its column table (_columns.py: the header exactly, each column as its
dtype), and every failure is one ResultsError line `PATH: what is wrong`."""
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional

import h5py
import numpy as np
import pandas as pd

from . import _columns
from ._errors import ResultsError
from ._trace import Trace, open_trace

_SIM_FILES = ("results.csv", "summary.csv", "summary_by_trace.csv", "timing.csv", "spans.csv", "spans_summary.csv")
_ANALYZE_FILES = ("meta.csv", "spearman.csv", "logdet.csv", "pca.csv", "pca_kept.csv", "pca_var.csv", "budgets.csv",
                  "head_importance.csv", "detail.csv", "study_spearman.csv", "study_logdet.csv", "paired.csv",
                  "fidelity_join.csv")
# what analyze always writes: one trace's directory (and each traces/ID/chunkB/), a study's top level
_ANALYSIS_REQUIRED = ("meta.csv", "spearman.csv", "logdet.csv", "pca.csv", "pca_var.csv", "head_importance.csv",
                      "detail.csv")
_STUDY_REQUIRED = ("meta.csv", "study_spearman.csv", "study_logdet.csv")
_META_INTS = ("L", "H", "K", "D", "T", "prompt_tokens", "capture_chunk", "detail_layer", "detail_q_head",
              "detail_kv_head")
_ID = re.compile(r"^[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,127}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _dir(path, what):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ResultsError(path, "no such directory (%s)" % what)
    if not os.path.isdir(path):
        raise ResultsError(path, "not a directory (%s)" % what)
    return path


def _csv(dirpath, name, maker, required):
    p = os.path.join(dirpath, name)
    if not os.path.isfile(p):
        if required:
            raise ResultsError(p, "missing (%s writes it)" % maker)
        return None
    return _columns.read_csv(p, maker, name, ResultsError)


def _json(path):
    """A provenance.json parsed, or {} when absent."""
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, "r", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise ResultsError(path, "not JSON (%s)" % e) from None


def _plain(v):
    if isinstance(v, (bytes, np.bytes_)):
        return bytes(v).decode("utf-8", "replace")
    if isinstance(v, np.generic):
        return v.item()
    return v


_RUN_LABELS = ("run", "config", "policy", "params", "allocator", "trace")


def _read_h5(path):
    """results.h5's root attributes (a dict) and its /index of runs (a DataFrame, or None when absent)."""
    try:
        with h5py.File(path, "r") as f:
            meta = {k: _plain(f.attrs[k]) for k in f.attrs}
            if "index" not in f or not isinstance(f["index"], h5py.Dataset) or f["index"].dtype.names is None:
                return meta, None
            runs = pd.DataFrame(f["index"][()])
    except OSError as e:
        raise ResultsError(path, "HDF5 cannot open it (%s)" % e) from None
    for c in runs.columns:
        if runs[c].dtype == object:
            runs[c] = runs[c].map(lambda b: b.decode("utf-8") if isinstance(b, bytes) else b)
        if c in _RUN_LABELS:
            runs[c] = runs[c].replace("", np.nan).astype("category") if c == "params" else runs[c].astype("category")
        elif runs[c].dtype.kind in "iu":
            runs[c] = runs[c].astype("int64")
        elif runs[c].dtype.kind == "f":
            runs[c] = runs[c].astype("float64")
    return meta, runs


@dataclass
class Results:
    """A results directory (`kvtrace sim -o DIR`): its CSVs as typed DataFrames (docs/outputs.md), the
    runs of results.h5 (`runs`: its /index table) and its root attributes (`meta`: command, trace_path,
    trace_sha256 or n_traces, ...), and provenance.json parsed. summary_by_trace, spans and
    spans_summary are None where the directory has none (spans: only when a trace has /spans)."""
    path: str
    results: pd.DataFrame
    summary: pd.DataFrame
    timing: pd.DataFrame
    summary_by_trace: Optional[pd.DataFrame] = None
    spans: Optional[pd.DataFrame] = None
    spans_summary: Optional[pd.DataFrame] = None
    runs: Optional[pd.DataFrame] = None
    meta: Dict[str, object] = field(default_factory=dict)
    provenance: Dict[str, object] = field(default_factory=dict)

    def final_cache(self, run):
        """results.h5's `retained` of one run (its group name, `run0001`, or its 1-based number):
        int32 [L, K, N'], the kept positions ascending, -1 padded."""
        name = "run%04d" % run if isinstance(run, (int, np.integer)) else str(run)
        p = os.path.join(self.path, "results.h5")
        try:
            with h5py.File(p, "r") as f:
                if "runs" not in f or name not in f["runs"]:
                    raise ResultsError(p, "no run %s in /runs" % name)
                return f["runs"][name]["retained"][()]
        except OSError as e:
            raise ResultsError(p, "HDF5 cannot open it (%s)" % e) from None

    def __repr__(self):
        return "<kvtrace.Results %r: %d result rows, %d summary rows, %d runs>" % (
            self.path, len(self.results), len(self.summary), len(self.runs) if self.runs is not None else 0)


def load_results(path):
    """Loads a results directory (`kvtrace sim -o DIR`): a Results. ResultsError (one line naming the
    file) for a missing directory, a missing results.csv/summary.csv/timing.csv, a header that is not
    the file's columns, or a cell that does not parse as its column's type."""
    d = _dir(path, "a kvtrace sim results directory")
    h5 = os.path.join(d, "results.h5")
    meta, runs = _read_h5(h5) if os.path.isfile(h5) else ({}, None)
    return Results(
        path=d,
        results=_csv(d, "results.csv", "sim", True),
        summary=_csv(d, "summary.csv", "sim", True),
        timing=_csv(d, "timing.csv", "sim", True),
        summary_by_trace=_csv(d, "summary_by_trace.csv", "sim", False),
        spans=_csv(d, "spans.csv", "sim", False),
        spans_summary=_csv(d, "spans_summary.csv", "sim", False),
        runs=runs, meta=meta, provenance=_json(os.path.join(d, "provenance.json")))


class Analysis:
    """An analysis directory (`kvtrace analyze -o DIR`, docs/analysis_dir.md). Each CSV present is a
    typed DataFrame, by its file's stem: `an.spearman`, `an["logdet"]`, `an.tables` (all of them); a
    known file the directory does not hold is None. `meta` is meta.csv as a dict (the shape's
    integers as int), `provenance` its provenance.json. A study's analysis (`is_study`) has
    study_spearman, study_logdet, and one analysis per trace and chunk in traces/ID/chunkB/:
    `an.trace(ID, chunk)`, `an.trace_dirs` {(ID, chunk): path}."""

    TABLE_NAMES = tuple(n[:-4] for n in _ANALYZE_FILES + _SIM_FILES)

    def __init__(self, path, tables, provenance, trace_dirs):
        self.path = path
        self.tables = tables
        self.provenance = provenance
        self.trace_dirs = trace_dirs

    @property
    def is_study(self):
        return "study_spearman" in self.tables or bool(self.trace_dirs)

    @property
    def meta(self):
        out = {}
        m = self.tables["meta"]
        for k, v in zip(m["key"], m["value"]):
            if k in _META_INTS:
                try:
                    v = int(v)
                except (TypeError, ValueError):
                    pass
            out[k] = v
        return out

    def __getitem__(self, name):
        if name in self.tables:
            return self.tables[name]
        if name in self.TABLE_NAMES:
            return None
        raise KeyError("%s: no analysis table %r (%s)" % (self.path, name, ", ".join(self.TABLE_NAMES)))

    def __getattr__(self, name):
        if name.startswith("_") or name in ("tables", "path", "provenance", "trace_dirs"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError("%r has no table %r" % (self, name)) from None

    def trace_ids(self):
        """The study's trace ids, in traces/'s name order."""
        return sorted({t for t, _ in self.trace_dirs})

    def trace(self, trace_id, chunk=None):
        """The analysis of one trace (at one chunk: needed when the study swept several) of a study."""
        chunks = sorted(c for t, c in self.trace_dirs if t == trace_id)
        if not chunks:
            raise KeyError("%s: no traces/%s/ (traces: %s)" % (self.path, trace_id, ", ".join(self.trace_ids())))
        if chunk is None:
            if len(chunks) > 1:
                raise KeyError("%s: traces/%s/ has chunks %s: say which" % (self.path, trace_id, chunks))
            chunk = chunks[0]
        if (trace_id, int(chunk)) not in self.trace_dirs:
            raise KeyError("%s: no traces/%s/chunk%s/ (chunks: %s)" % (self.path, trace_id, chunk, chunks))
        return load_analysis(self.trace_dirs[(trace_id, int(chunk))])

    def __repr__(self):
        kind = "study analysis, %d trace dirs" % len(self.trace_dirs) if self.is_study else "analysis"
        return "<kvtrace.Analysis %r (%s): %s>" % (self.path, kind, ", ".join(self.tables))


def _trace_dirs(d):
    out = {}
    root = os.path.join(d, "traces")
    if not os.path.isdir(root):
        return out
    for tid in sorted(os.listdir(root)):
        tdir = os.path.join(root, tid)
        if not os.path.isdir(tdir):
            continue
        for sub in sorted(os.listdir(tdir)):
            m = re.match(r"^chunk([0-9]+)$", sub)
            if m and os.path.isdir(os.path.join(tdir, sub)):
                out[(tid, int(m.group(1)))] = os.path.join(tdir, sub)
    return out


def load_analysis(path):
    """Loads an analysis directory (`kvtrace analyze -o DIR`): an Analysis. ResultsError (one line
    naming the file) for a missing directory or required file, a wrong header, a cell of the wrong type."""
    d = _dir(path, "a kvtrace analyze directory")
    trace_dirs = _trace_dirs(d)
    study = bool(trace_dirs) or os.path.isfile(os.path.join(d, "study_spearman.csv"))
    required = _STUDY_REQUIRED if study else _ANALYSIS_REQUIRED
    tables = {}
    for name in _ANALYZE_FILES:
        df = _csv(d, name, "analyze", name in required)
        if df is not None:
            tables[name[:-4]] = df
    for name in _SIM_FILES:
        df = _csv(d, name, "sim", False)
        if df is not None:
            tables[name[:-4]] = df
    return Analysis(d, tables, _json(os.path.join(d, "provenance.json")), trace_dirs)


class Study:
    """A study directory (docs/study.md): index.jsonl and one trace per prompt. `index` is index.jsonl
    as a DataFrame (id, file, tokens, sha256; one row per trace, in the study's order), `ids` the prompt
    ids; iterating gives the ids, `trace(id)` opens one with open_trace, `path_of(id)` its file."""

    def __init__(self, path, index_path, index):
        self.path = path
        self.index_path = index_path
        self.index = index
        self._files = dict(zip(index["id"], index["file"]))

    @property
    def ids(self) -> List[str]:
        return list(self.index["id"])

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self):
        return len(self.index)

    def __contains__(self, trace_id):
        return trace_id in self._files

    def path_of(self, trace_id):
        if trace_id not in self._files:
            raise KeyError("%s: no trace with id %r" % (self.index_path, trace_id))
        return os.path.join(self.path, self._files[trace_id])

    def trace(self, trace_id) -> Trace:
        """Opens one trace of the study (a Trace: close it, or use it in a with block)."""
        return open_trace(self.path_of(trace_id))

    def verify(self):
        """Checks every trace against its index line (sha256 and T), as sim does before any work;
        ResultsError `INDEX:LINE: ...` for the first that differs."""
        for line, row in enumerate(self.index.itertuples(index=False), 1):
            p = self.path_of(row.id)
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            if h.hexdigest() != row.sha256:
                raise ResultsError("%s:%d" % (self.index_path, row.line),
                                   "%s has sha256 %s..., the index says %s... (the trace changed after the index "
                                   "was written)" % (p, h.hexdigest()[:12], row.sha256[:12]))
            with self.trace(row.id) as t:
                if t.n_tokens != row.tokens:
                    raise ResultsError("%s:%d" % (self.index_path, row.line),
                                       "%s has T = %d, the index says tokens = %d" % (p, t.n_tokens, row.tokens))

    def __repr__(self):
        return "<kvtrace.Study %r: %d traces>" % (self.path, len(self))


def _index_line(where, text, seen):
    try:
        o = json.loads(text)
    except ValueError as e:
        raise ResultsError(where, "not JSON (%s)" % e) from None
    if not isinstance(o, dict):
        raise ResultsError(where, "not a JSON object")
    for k in o:
        if k not in ("id", "file", "tokens", "sha256"):
            raise ResultsError(where, "unknown field '%s' (an index line has id, file, tokens, sha256)" % k[:60])
    tid, f, tok, sha = o.get("id"), o.get("file"), o.get("tokens"), o.get("sha256")
    if not isinstance(tid, str) or not _ID.match(tid):
        raise ResultsError(where, "'id' must be 1-128 of A-Z a-z 0-9 _ . - (not starting with '.')")
    if not isinstance(f, str) or not f or "/" in f or f.startswith("."):
        raise ResultsError(where, "'file' must be a file name in the index's directory")
    if isinstance(tok, bool) or not isinstance(tok, int) or tok < 1:
        raise ResultsError(where, "'tokens' must be an integer >= 1")
    if not isinstance(sha, str) or not _HEX64.match(sha):
        raise ResultsError(where, "'sha256' must be 64 lowercase hex digits")
    if tid in seen:
        raise ResultsError(where, "id '%s' is also on line %d" % (tid, seen[tid]))
    return tid, f, tok, sha


def load_study(path):
    """Loads a study: a directory holding index.jsonl, or the index file itself. Every line is checked
    as sim checks it (fields, id, file, tokens, sha256; each trace exists), ResultsError
    `INDEX:LINE: what is wrong` otherwise; the traces' sha256 only by Study.verify()."""
    path = os.fspath(path)
    if os.path.isdir(path):
        d, index = path, os.path.join(path, "index.jsonl")
        if not os.path.isfile(index):
            raise ResultsError(path, "is a directory without index.jsonl (a study's directory holds one)")
    elif os.path.isfile(path):
        d, index = os.path.dirname(path) or ".", path
    else:
        raise ResultsError(path, "no such study directory or index file")
    rows, seen = [], {}
    try:
        with open(index, "r", encoding="utf-8") as f:
            lines = f.read().split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise ResultsError(index, "cannot read it (%s)" % e) from None
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        where = "%s:%d" % (index, n)
        tid, fname, tok, sha = _index_line(where, text, seen)
        p = os.path.join(d, fname)
        if not os.path.isfile(p):
            raise ResultsError(where, "trace %s %s" % (p, "does not exist" if not os.path.exists(p)
                                                      else "is not a readable file"))
        seen[tid] = n
        rows.append((tid, fname, tok, sha, n))
    if not rows:
        raise ResultsError(index, "no traces (an index line per trace)")
    df = pd.DataFrame(rows, columns=["id", "file", "tokens", "sha256", "line"])
    df["tokens"] = df["tokens"].astype("int64")
    df["line"] = df["line"].astype("int64")
    return Study(d, index, df)
