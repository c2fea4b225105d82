"""kvtrace: read the traces, results and analyses of the kvtrace C toolkit, and record traces from
transformers models.

    import kvtrace
    with kvtrace.open_trace("trace.h5") as t:      # checked as the C reader checks it
        k = t.keys[3, 0]                           # layer 3, kv head 0: [T, D], read lazily
    res = kvtrace.load_results("res/")             # kvtrace sim -o res/: typed DataFrames
    an = kvtrace.load_analysis("an/")              # kvtrace analyze -o an/
    study = kvtrace.load_study("study/")           # index.jsonl and one trace per prompt

The version's major.minor is the trace schema it reads (TRACE_SCHEMA, docs/trace.md); its patch is
the package's own. Importing needs numpy, h5py and pandas only: `record` imports torch and
transformers when called (pip install kvtrace[record]).
"""
from ._errors import ResultsError, TraceError
from ._results import Analysis, Results, Study, load_analysis, load_results, load_study
from ._trace import Trace, open_trace

__version__ = "1.0.0"
TRACE_SCHEMA = (1, 0)


def record(model, path, **kwargs):
    """Records a trace of a transformers model's run into `path` (a kvtrace trace, schema 1.0).
    Needs torch and transformers (pip install kvtrace[record]), imported only here.
    Parameters and return value: see kvtrace._record.record."""
    from ._record import record as _record
    return _record(model, path, **kwargs)


__all__ = ["open_trace", "Trace", "load_results", "Results", "load_analysis", "Analysis", "load_study", "Study",
           "TraceError", "ResultsError", "record", "__version__", "TRACE_SCHEMA"]
