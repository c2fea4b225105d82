"""The columns of every CSV that `kvtrace sim`, `analyze` and `fidelity` write, in the order they are
written, with the pandas dtype each is loaded as: a restatement of results/results_schema.c and
results/fidelity_schema.c (`kvtrace info --columns` prints their names; the tests compare the two).

Kinds, from the C kinds:
  label  category  a configuration, policy, params, allocator, phase, trace (prompt id), span, run,
                   same_as, scope, metric, baseline: text a row is grouped or joined by; an empty
                   cell (params of a parameter-free policy, same_as) is NaN, as pandas reads it
  text   str       free text: meta.csv's key and value, fidelity's decoded continuations
  int    int64     budgets, chunks, counts, layers, heads, positions
  int?   Int64     an integer column that may be empty (study_logdet.csv's full_cache rows,
                   fidelity's pooled summary row): pandas' nullable integer, <NA> there
  real   float64   every real number; `nan` is NaN, and so is budget_fraction's empty cell
"""
import pandas as pd

_LABEL, _TEXT, _INT, _NINT, _REAL = "label", "text", "int", "int?", "real"

DTYPES = {_LABEL: "category", _TEXT: "str", _INT: "int64", _NINT: "Int64", _REAL: "float64"}


def _cols(spec):
    """'config:label policy:label ...' -> [(name, kind)]; a name without ':' is real."""
    out = []
    for item in spec.split():
        name, _, kind = item.partition(":")
        out.append((name, kind or _REAL))
    return out


_RUN = "config:label policy:label params:label budget:int"
_SIM_RUN = _RUN + " allocator:label budget_fraction"
_STATS = "out_rel_err_mean out_rel_err_p95 attn_recall_mean attn_recall_min"
_SUMMARY = (_SIM_RUN + " chunk:int decode_chunk:int eval_stride:int phase:label n_queries:int " + _STATS +
            " final_logdet_mean")


def _ci(names):
    return " ".join("%s %s_ci_lo %s_ci_hi" % (n, n, n) for n in names.split())


def _ci_only(names):
    return " ".join("%s_ci_lo %s_ci_hi" % (n, n) for n in names.split())


_FID_KEY = "config:label policy:label params:label budget:int allocator:label"
_FID_CONFIG = ("chunk:int n_positions:int kl_mean kl_p95 kl_max greedy_agree ppl_full ppl_evict out_rel_err_mean "
               "out_rel_err_p95 attn_recall_mean cache_peak_rows:int rows_peak:int")

# (maker, file) -> columns; the maker is `kvtrace info --columns`' bracket: the verb whose directory holds it
TABLES = {
    ("sim", "results.csv"): _cols(
        _SIM_RUN + " chunk:int decode_chunk:int eval_stride:int layer:int q_head:int kv_head:int phase:label "
        "n_queries:int " + _STATS + " head_budget:int head_budget_mean trace:label same_as:label run:label"),
    ("sim", "summary_by_trace.csv"): _cols(_SUMMARY + " trace:label same_as:label run:label"),
    ("sim", "summary.csv"): _cols(
        _SUMMARY + " n_traces:int " + _ci_only(_STATS + " final_logdet_mean") + " same_as:label run:label"),
    ("sim", "spans.csv"): _cols(
        "trace:label span:label config:label budget:int chunk:int layer:int kv_head:int retention_mean "
        "retention_final attn_recall allocator:label run:label"),
    ("sim", "spans_summary.csv"): _cols(
        "span:label config:label budget:int chunk:int allocator:label n_traces:int " +
        _ci("retention_mean retention_final attn_recall") + " run:label"),
    ("sim", "timing.csv"): _cols(
        _SIM_RUN + " chunk:int calls:int candidates:int score_ns_per_candidate trace:label run:label"),
    ("analyze", "meta.csv"): _cols("key:text value:text"),
    ("analyze", "spearman.csv"): _cols("layer:int q_head:int kv_head:int rho_pairwise rho_anchor"),
    ("analyze", "logdet.csv"): _cols(_SIM_RUN + " layer:int kv_head:int logdet"),
    ("analyze", "pca.csv"): _cols("layer:int kv_head:int position:int pc1 pc2"),
    ("analyze", "pca_kept.csv"): _cols(_SIM_RUN + " layer:int kv_head:int position:int"),
    ("analyze", "pca_var.csv"): _cols("layer:int kv_head:int var_pc1 var_pc2 var_total"),
    ("analyze", "budgets.csv"): _cols(_SIM_RUN + " layer:int kv_head:int head_budget:int head_budget_mean"),
    ("analyze", "head_importance.csv"): _cols("layer:int kv_head:int score concentration"),
    ("analyze", "detail.csv"): _cols("row:int col:int cos attn"),
    ("analyze", "study_spearman.csv"): _cols(
        "layer:int q_head:int kv_head:int rho_pairwise rho_anchor n_traces:int " +
        _ci_only("rho_pairwise rho_anchor")),
    ("analyze", "study_logdet.csv"): _cols(
        "config:label policy:label params:label budget:int? allocator:label budget_fraction chunk:int? layer:int "
        "kv_head:int logdet n_traces:int logdet_ci_lo logdet_ci_hi"),
    ("analyze", "paired.csv"): _cols(
        "run:label config:label allocator:label chunk:int budget:int baseline:label metric:label n_traces:int "
        "mean baseline_mean diff_mean diff_ci_lo diff_ci_hi"),
    ("analyze", "fidelity_join.csv"): _cols(
        "trace:label run:label config:label allocator:label budget:int chunk:int out_rel_err_mean attn_recall_mean "
        "kl_mean greedy_agree ppl_full ppl_evict answer_logprob_full answer_logprob_evict answer_logprob_delta "
        "answer_rank_full answer_rank_evict exact_match_full exact_match_evict"),
    ("fidelity", "fidelity.csv"): _cols(_FID_KEY + " " + _FID_CONFIG),
    ("fidelity", "positions.csv"): _cols(_FID_KEY + " chunk:int position:int kl greedy_agree:int"),
    ("fidelity", "summary.csv"): _cols(
        "scope:label budget:int? n_configs:int rho_out_rel_err_kl rho_attn_loss_kl n_pairs:int n_misordered:int "
        "n_tokens:int prompt_len:int chunk:int? ppl_full"),
    ("fidelity", "misordered.csv"): _cols(
        "config_a:label policy_a:label params_a:label allocator_a:label config_b:label policy_b:label "
        "params_b:label allocator_b:label budget:int chunk:int out_rel_err_a out_rel_err_b kl_mean_a kl_mean_b"),
    ("fidelity --prompts", "fidelity.csv"): _cols(
        "trace:label " + _FID_KEY + " " + _FID_CONFIG + " n_tokens:int prompt_len:int"),
    ("fidelity --prompts", "answer.csv"): _cols(
        "trace:label " + _FID_KEY + " chunk:int answer_start:int answer_tokens:int answer_logprob_full "
        "answer_logprob_evict answer_logprob_delta answer_rank_full:int answer_rank_evict:int exact_match_full:int "
        "exact_match_evict:int continuation_full:text continuation_evict:text"),
    ("fidelity --prompts", "summary.csv"): _cols(
        _FID_KEY + " chunk:int n_traces:int n_answers:int " +
        _ci("kl_mean kl_p95 greedy_agree ppl_full ppl_evict d_ppl out_rel_err_mean attn_recall_mean "
            "answer_logprob_full answer_logprob_evict answer_logprob_delta exact_match_full exact_match_evict")),
}


def columns(maker, name):
    """[(column, kind)] of one file, in the order written."""
    return TABLES[(maker, name)]


def dtypes(maker, name):
    """{column: pandas dtype} of one file, as the loaders give it."""
    return {c: DTYPES[k] for c, k in TABLES[(maker, name)]}


def read_csv(path, maker, name, error):
    """Reads one CSV against its table: the header must be exactly the table's columns, every cell
    must parse as its kind. `error(path, what)` builds the exception raised otherwise."""
    cols = TABLES[(maker, name)]
    want = [c for c, _ in cols]
    try:
        with open(path, "r", encoding="utf-8", newline="") as f:
            header = f.readline().rstrip("\r\n")
    except FileNotFoundError:
        raise error(path, "missing (%s writes it)" % maker) from None
    except (OSError, UnicodeDecodeError) as e:
        raise error(path, "cannot read it (%s)" % e) from None
    try:
        with open(path, "rb") as f:
            f.seek(-1, 2)
            whole = f.read(1) == b"\n"
    except OSError:
        whole = False
    if not whole:
        raise error(path, "the file does not end with a newline (cut short?)")
    got = header.split(",") if header else []
    if got != want:
        missing = [c for c in want if c not in got]
        extra = [c for c in got if c not in want]
        why = []
        if missing:
            why.append("lacks %s" % ", ".join(missing))
        if extra:
            why.append("has unknown %s" % ", ".join(extra))
        if not why:
            why.append("has its columns in another order")
        raise error(path, "the header %s (expected %s: %s)" % ("; ".join(why), name, ",".join(want)))
    # nan and the empty cell are missing values; nothing else is (a prompt id 'NA' stays 'NA')
    na = {c: ["", "nan"] if k in (_REAL, _NINT) else [] if k == _TEXT else [""] for c, k in cols}
    # labels are read as categories of the text as written (a prompt id '007' stays '007', not 7)
    conv = {c: DTYPES[k] for c, k in cols}
    try:
        df = pd.read_csv(path, dtype=conv, keep_default_na=False, na_values=na, encoding="utf-8")
    except (ValueError, TypeError, OverflowError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise error(path, "a cell does not parse as its column's type (%s)" % _first_bad_cell(path, cols, e)) from None
    return df


def _first_bad_cell(path, cols, exc):
    """'line N, column C: 'x' is not an integer', or pandas' own first line when no single cell is to blame."""
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
        for c, k in cols:
            if k not in (_INT, _NINT, _REAL):
                continue
            for i, v in enumerate(raw[c]):
                if k in (_REAL, _NINT) and v in ("", "nan"):
                    continue
                try:
                    float(v) if k == _REAL else int(v)
                except ValueError:
                    return "line %d, column %s: '%s' is not %s" % (i + 2, c, v[:40],
                                                                    "a number" if k == _REAL else "an integer")
    except (ValueError, TypeError, pd.errors.ParserError, UnicodeDecodeError, KeyError):
        pass
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
