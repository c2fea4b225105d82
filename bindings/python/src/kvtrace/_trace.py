"""The trace reader: open a kvtrace trace (docs/trace.md, schema 1.x) read-only and check it as the C
reader (trace/trace_read.c) does for the essentials, then give its attributes and lazy datasets.

What is checked on open, each failure one TraceError line `PATH: what is wrong` (the C tool's words
where it has them): the HDF5 signature; the schema major; every required root attribute, its type
(integers of any integer type, floats of any number type, text as variable- or fixed-length
strings) and range (H % K == 0, 1 <= prompt_len <= T, rope_theta > 0, the enumerations of
architecture, rope_style, capture_mode, storage_dtype; the evict-mode attributes in evict mode);
the required datasets /tokens /keys /values; every present documented dataset's kind, rank,
element type, shape against the attributes and capture mode; the pairs (/attention/out with
/attention/lse, /evict/retained with /evict/step_end); token ids within the vocabulary;
/prompt_text valid UTF-8; /wo's shape; /spans (names, ranges). Not checked: the finiteness of the
values, which the C reader checks as it reads slices (here the arrays are h5py datasets, read
lazily, so nothing is read until sliced).
"""
import json
import os
import re

import h5py
import numpy as np

from ._errors import TraceError

SCHEMA_MAJOR = 1

ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral", "phi3", "granite")
ROPE_STYLES = ("interleaved", "neox")
CAPTURE_MODES = ("full", "evict")
STORAGE_DTYPES = ("f32", "f16")

MAX_LAYERS, MAX_HEADS, MAX_HEAD_DIM = 1024, 1024, 4096
MAX_TOKENS, MAX_VOCAB, MAX_WO_DIM = 1 << 31, 1 << 24, 1 << 20
MAX_SPANS = 4096
_SPAN_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")

# the root attributes in docs/trace.md's order: name, kind ("int", "float", "text"), required
_ROOT_ATTRS = (
    ("creator", "text"), ("model_name", "text"), ("architecture", "text"),
    ("n_layers", "int"), ("n_heads", "int"), ("n_kv_heads", "int"), ("head_dim", "int"),
    ("n_tokens", "int"), ("prompt_len", "int"), ("vocab_size", "int"),
    ("rope_theta", "float"), ("rope_style", "text"), ("capture_chunk", "int"),
    ("capture_mode", "text"), ("storage_dtype", "text"),
)
_OPTIONAL_ATTRS = (("rope_scaling", "text"),)
_EVICT_ATTRS = (("evict_policy", "text"), ("evict_params", "text"), ("evict_budget", "int"), ("evict_chunk", "int"))
_EVICT_OPTIONAL = (("evict_definition", "text"), ("evict_until", "int"), ("evict_allocator", "text"))
DOCUMENTED_ATTRS = tuple(["kvtrace_schema"] + [n for n, _ in _ROOT_ATTRS + _OPTIONAL_ATTRS] + ["rope_freq_factors"] +
                         [n for n, _ in _EVICT_ATTRS + _EVICT_OPTIONAL])


class _Dset:
    """One row of docs/trace.md's dataset table (trace/trace_schema.c): the Python name, the HDF5 path,
    rank, element kind ("token": any integer; "storage": storage_dtype's float; "float": any float),
    required, the capture mode it needs (None: either), and its expected shape from (L, H, K, D, T, V)
    (None for a free axis)."""

    def __init__(self, name, path, rank, elem, required, mode, shape):
        self.name, self.path, self.rank, self.elem = name, path, rank, elem
        self.required, self.mode, self.shape = required, mode, shape


DATASETS = (
    _Dset("tokens", "/tokens", 1, "token", True, None, lambda L, H, K, D, T, V: (T,)),
    _Dset("keys", "/keys", 4, "storage", True, None, lambda L, H, K, D, T, V: (L, K, T, D)),
    _Dset("values", "/values", 4, "storage", True, None, lambda L, H, K, D, T, V: (L, K, T, D)),
    _Dset("queries", "/queries", 4, "storage", False, None, lambda L, H, K, D, T, V: (L, H, T, D)),
    _Dset("colsum", "/attention/colsum", 3, "float", False, "full", lambda L, H, K, D, T, V: (L, H, T)),
    _Dset("kvzip", "/attention/kvzip", 3, "float", False, "full", lambda L, H, K, D, T, V: (L, H, T)),
    _Dset("attention_out", "/attention/out", 4, "float", False, "full", lambda L, H, K, D, T, V: (L, H, T, D)),
    _Dset("attention_lse", "/attention/lse", 3, "float", False, "full", lambda L, H, K, D, T, V: (L, H, T)),
    _Dset("attention_max", "/attention/max", 3, "float", False, "full", lambda L, H, K, D, T, V: (L, H, T)),
    _Dset("attention_full", "/attention/full", 4, "float", False, None, lambda L, H, K, D, T, V: (L, H, T, T)),
    _Dset("logits", "/logits", 2, "float", False, None, lambda L, H, K, D, T, V: (T, V)),
    _Dset("logprobs", "/logprobs", 1, "float", False, None, lambda L, H, K, D, T, V: (T,)),
    _Dset("retained", "/evict/retained", 4, "token", False, "evict", lambda L, H, K, D, T, V: (None, L, K, None)),
    _Dset("step_end", "/evict/step_end", 1, "token", False, "evict", lambda L, H, K, D, T, V: (None,)),
    _Dset("wo", "/wo", 3, "float", False, None, lambda L, H, K, D, T, V: (L, None, H * D)),
)
_BY_NAME = {d.name: d for d in DATASETS}
_BY_PATH = {d.path.lstrip("/"): d for d in DATASETS}
# what has() knows beside the arrays
_OTHER_OBJECTS = {"prompt_text": "/prompt_text", "prompt_chat": "/prompt_chat", "spans": "/spans",
                  "provenance": "/provenance"}


def _lookup(f, path):
    """The HDF5 object at path, or None when absent (or when a parent is not a group)."""
    try:
        return f.get(path)
    except (KeyError, ValueError, TypeError, OSError):
        return None


def _dtype_name(dt):
    if h5py.check_string_dtype(dt) is not None:
        return "string"
    if dt.kind == "f":
        return "float%d" % (8 * dt.itemsize)
    if dt.kind in "iu":
        return "%sint%d" % ("u" if dt.kind == "u" else "", 8 * dt.itemsize)
    return "compound" if dt.names else str(dt)


class _Attrs:
    """Typed reads of an HDF5 object's attributes, each failure a TraceError (h5util.c's words)."""

    def __init__(self, path, attrs):
        self.path, self.attrs = path, attrs

    def fail(self, what):
        raise TraceError(self.path, what)

    def _open(self, name, count, required):
        if name not in self.attrs:
            if required:
                self.fail("missing required attribute '%s'" % name)
            return None
        aid = self.attrs.get_id(name)
        n = int(np.prod(aid.shape)) if aid.shape is not None else 0
        if count is not None and n != count:
            self.fail("attribute '%s' has %d element(s), expected %d" % (name, n, count))
        return aid.dtype

    def ints(self, name, count, required=True):
        dt = self._open(name, count, required)
        if dt is None:
            return None
        if dt.kind not in "iu":
            self.fail("attribute '%s' is %s, expected an integer" % (name, _dtype_name(dt)))
        return [int(x) for x in np.asarray(self.attrs[name]).reshape(-1)]

    def floats(self, name, count, required=True):
        dt = self._open(name, count, required)
        if dt is None:
            return None
        if dt.kind not in "iuf":
            self.fail("attribute '%s' is %s, expected a number" % (name, _dtype_name(dt)))
        return np.asarray(self.attrs[name], dtype=np.float64).reshape(-1)

    def text(self, name, required=True):
        dt = self._open(name, 1, required)
        if dt is None:
            return None
        if h5py.check_string_dtype(dt) is None:
            self.fail("attribute '%s' is not a string" % name)
        try:
            v = self.attrs[name]
        except (UnicodeDecodeError, OSError, ValueError):
            self.fail("attribute '%s' is not valid UTF-8" % name)
        if isinstance(v, np.ndarray):
            v = v.reshape(-1)[0]
        if isinstance(v, (bytes, np.bytes_)):
            try:
                v = bytes(v).decode("utf-8")
            except UnicodeDecodeError as e:
                self.fail("attribute '%s' is not valid UTF-8 at byte offset %d" % (name, e.start))
        return str(v)


def _generic_attr(attrs, name):
    """An undocumented root attribute as plain Python where it can be (else the h5py value, or None)."""
    try:
        v = attrs[name]
    except (OSError, ValueError, TypeError, UnicodeDecodeError):
        return None
    if isinstance(v, (bytes, np.bytes_)):
        return bytes(v).decode("utf-8", "replace")
    if isinstance(v, np.generic):
        return v.item()
    return v


def _read_meta(path, f):
    """Every root attribute: the documented ones typed and checked, then any others as they are."""
    a = _Attrs(path, f.attrs)
    if "kvtrace_schema" not in f.attrs:
        raise TraceError(path, "not a kvtrace trace (no 'kvtrace_schema' attribute)")
    schema = a.ints("kvtrace_schema", 2)
    if schema[0] != SCHEMA_MAJOR:
        raise TraceError(path, "trace schema %d.%d is not supported (this kvtrace reads %d.x)"
                         % (schema[0], schema[1], SCHEMA_MAJOR))
    meta = {"kvtrace_schema": tuple(schema)}
    read = {"int": lambda n, req: (lambda v: None if v is None else v[0])(a.ints(n, 1, req)),
            "float": lambda n, req: (lambda v: None if v is None else float(v[0]))(a.floats(n, 1, req)),
            "text": lambda n, req: a.text(n, req)}
    def take(table, required):
        for name, kind in table:
            v = read[kind](name, required)
            if v is not None:
                meta[name] = v

    take(_ROOT_ATTRS, True)
    take(_OPTIONAL_ATTRS, False)
    _check_meta(path, meta)
    D = meta["head_dim"]
    if "rope_freq_factors" in f.attrs:
        ff = a.floats("rope_freq_factors", D // 2)
        bad = np.flatnonzero(~(np.isfinite(ff) & (ff > 0)))
        if bad.size:
            raise TraceError(path, "attribute 'rope_freq_factors'[%d] = %g is not a positive number"
                             % (bad[0], ff[bad[0]]))
        meta["rope_freq_factors"] = ff
    if meta["capture_mode"] == "evict":
        take(_EVICT_ATTRS, True)
        take(_EVICT_OPTIONAL, False)
        _check_evict(path, meta)
    for name in f.attrs:
        if name not in meta:
            meta[name] = _generic_attr(f.attrs, name)
    return meta


def _check_range(path, meta, name, lo, hi):
    v = meta[name]
    if v < lo or v > hi:
        raise TraceError(path, "attribute '%s' = %d is out of range [%d, %d]" % (name, v, lo, hi))


def _check_enum(path, meta, name, allowed):
    if meta[name] not in allowed:
        raise TraceError(path, "attribute '%s' = '%s' is not one of %s" % (name, meta[name], ", ".join(allowed)))


def _check_meta(path, m):
    _check_enum(path, m, "storage_dtype", STORAGE_DTYPES)
    for name, lo, hi in (("n_layers", 1, MAX_LAYERS), ("n_heads", 1, MAX_HEADS), ("n_kv_heads", 1, m["n_heads"]),
                         ("head_dim", 1, MAX_HEAD_DIM), ("vocab_size", 1, MAX_VOCAB),
                         ("capture_chunk", 0, MAX_TOKENS)):
        _check_range(path, m, name, lo, hi)
    if m["n_heads"] % m["n_kv_heads"]:
        raise TraceError(path, "n_heads = %d is not a multiple of n_kv_heads = %d" % (m["n_heads"], m["n_kv_heads"]))
    _check_range(path, m, "n_tokens", 1, MAX_TOKENS)
    _check_range(path, m, "prompt_len", 1, m["n_tokens"])
    if not (np.isfinite(m["rope_theta"]) and m["rope_theta"] > 0):
        raise TraceError(path, "attribute 'rope_theta' = %g is not a positive number" % m["rope_theta"])
    _check_enum(path, m, "architecture", ARCHITECTURES)
    _check_enum(path, m, "rope_style", ROPE_STYLES)
    _check_enum(path, m, "capture_mode", CAPTURE_MODES)


def _check_evict(path, m):
    _check_range(path, m, "evict_budget", 1, MAX_TOKENS)
    _check_range(path, m, "evict_chunk", 1, MAX_TOKENS)
    if "evict_until" in m:
        _check_range(path, m, "evict_until", 1, m["prompt_len"])
    if not m["evict_policy"]:
        raise TraceError(path, "attribute 'evict_policy' is empty")


def _elem_ok(elem, dt, storage):
    if elem == "token":
        return dt.kind in "iu", "an integer type"
    if elem == "storage":
        want = np.dtype(np.float16 if storage == "f16" else np.float32)
        return dt.kind == "f" and dt.itemsize == want.itemsize, "%s (storage_dtype = %s)" % (want.name, storage)
    return dt.kind == "f" and dt.itemsize in (2, 4, 8), "float16, float32 or float64"


def _fmt_shape(shape):
    return "[%s]" % ", ".join("*" if s is None else str(s) for s in shape)


def _open_datasets(path, f, m):
    L, H, K, D = m["n_layers"], m["n_heads"], m["n_kv_heads"], m["head_dim"]
    T, V, mode = m["n_tokens"], m["vocab_size"], m["capture_mode"]
    found = {}
    for s in DATASETS:
        obj = _lookup(f, s.path)
        if obj is None:
            if s.required:
                raise TraceError(path, "missing required dataset %s" % s.path)
            continue
        if s.mode is not None and s.mode != mode:
            raise TraceError(path, "dataset %s is not allowed with capture_mode = %s" % (s.path, mode))
        if not isinstance(obj, h5py.Dataset):
            raise TraceError(path, "%s is not a dataset" % s.path)
        ok, expected = _elem_ok(s.elem, obj.dtype, m["storage_dtype"])
        if not ok:
            raise TraceError(path, "dataset %s has element type %s, expected %s"
                             % (s.path, _dtype_name(obj.dtype), expected))
        if obj.ndim != s.rank:
            raise TraceError(path, "dataset %s has rank %d, expected %d" % (s.path, obj.ndim, s.rank))
        want = s.shape(L, H, K, D, T, V)
        if any(w is not None and g != w for g, w in zip(obj.shape, want)):
            raise TraceError(path, "dataset %s has shape %s, but the attributes say %s"
                             % (s.path, _fmt_shape(obj.shape), _fmt_shape(want)))
        found[s.name] = obj
    for a, b in (("retained", "step_end"), ("attention_out", "attention_lse")):
        if (a in found) != (b in found):
            have, miss = (a, b) if a in found else (b, a)
            raise TraceError(path, "%s needs %s beside it" % (_BY_NAME[have].path, _BY_NAME[miss].path))
    if "attention_max" in found and "attention_lse" not in found:   # optional beside lse, never without it
        raise TraceError(path, "/attention/max needs /attention/lse beside it")
    if "retained" in found:
        r, se = found["retained"].shape, found["step_end"].shape
        if r[0] != se[0] or r[3] < 1:
            raise TraceError(path, "/evict/retained has %d snapshots of %d positions but /evict/step_end has %d"
                             % (r[0], r[3], se[0]))
    if "wo" in found and not 1 <= found["wo"].shape[1] <= MAX_WO_DIM:
        raise TraceError(path, "dataset /wo has %d rows per layer, expected 1 to %d" % (found["wo"].shape[1],
                                                                                       MAX_WO_DIM))
    return found


def _check_tokens(path, tokens, V):
    t = np.asarray(tokens[()])
    bad = np.flatnonzero((t < 0) | (t >= V))
    if bad.size:
        raise TraceError(path, "/tokens[%d] = %d is outside the vocabulary [0, %d)" % (bad[0], t[bad[0]], V))


def _read_text(path, f, name):
    """/prompt_text or /prompt_chat: one string (variable- or fixed-length) of valid UTF-8, or None."""
    obj = _lookup(f, name)
    if obj is None:
        return None
    if not isinstance(obj, h5py.Dataset) or h5py.check_string_dtype(obj.dtype) is None or obj.size != 1:
        raise TraceError(path, "%s is not one string" % name)
    raw = obj[()]
    if isinstance(raw, np.ndarray):
        raw = raw.reshape(-1)[0]
    if isinstance(raw, str):
        return raw
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(path, "%s is not valid UTF-8 at byte offset %d" % (name, e.start)) from None


def span_problem(name, start, end, prompt_len):
    """What is wrong with span (name, [start, end)) of a prompt of prompt_len tokens, by trace_open's rules
    (docs/trace.md), or None: the reader's check and the recorder's (spans=) both."""
    if not isinstance(name, str) or not _SPAN_NAME.match(name):
        return "span name %r is not 1-64 of A-Z a-z 0-9 _ . -" % (name,)
    if not 0 <= start < end <= prompt_len:
        return "span '%s' is [%d, %d), outside the prompt's [0, %d) or empty" % (name, start, end, prompt_len)
    return None


def _read_spans(path, f, prompt_len):
    g = _lookup(f, "/spans")
    if g is None:
        return {}
    if not isinstance(g, h5py.Group):
        raise TraceError(path, "/spans is not a group")
    parts = {}
    for key in ("names", "starts", "ends"):
        d = _lookup(g, key)
        if not isinstance(d, h5py.Dataset) or d.ndim != 1:
            raise TraceError(path, "/spans: needs one-dimensional datasets names, starts, ends")
        parts[key] = d
    n = parts["names"].shape[0]
    if not 1 <= n <= MAX_SPANS or parts["starts"].shape[0] != n or parts["ends"].shape[0] != n:
        raise TraceError(path, "/spans: names, starts and ends must hold the same number of spans, 1 to %d"
                         % MAX_SPANS)
    if h5py.check_string_dtype(parts["names"].dtype) is None:
        raise TraceError(path, "/spans: names must be strings")
    if parts["starts"].dtype.kind not in "iu" or parts["ends"].dtype.kind not in "iu":
        raise TraceError(path, "/spans: starts and ends must be integers")
    try:
        names = [bytes(x).decode("utf-8") if isinstance(x, (bytes, np.bytes_)) else str(x)
                 for x in parts["names"][()]]
    except UnicodeDecodeError:
        raise TraceError(path, "/spans: a name is not valid UTF-8") from None
    spans = {}
    for name, a, b in zip(names, parts["starts"][()].tolist(), parts["ends"][()].tolist()):
        if name in spans:
            raise TraceError(path, "/spans: two spans are named '%s'" % name)
        problem = span_problem(name, a, b, prompt_len)
        if problem:
            raise TraceError(path, "/spans: " + problem)
        spans[name] = (int(a), int(b))
    return spans


def _open_file(path):
    try:
        st = os.stat(path)
    except OSError as e:
        raise TraceError(path, "cannot open: %s" % (e.strerror or e)) from None
    if not os.path.isfile(path):
        raise TraceError(path, "not a regular file")
    if st.st_size == 0:
        raise TraceError(path, "empty file, not an HDF5 trace")
    if not h5py.is_hdf5(path):
        raise TraceError(path, "not an HDF5 file (no HDF5 signature found)")
    try:
        return h5py.File(path, "r")
    except OSError:
        raise TraceError(path, "HDF5 cannot open it (truncated or corrupt file)") from None


class Trace:
    """An open kvtrace trace (read-only), checked on open. Use as a context manager or call close().

    meta: every root attribute by its documented name (ints as int, text as str, floats as float,
    kvtrace_schema as a tuple, rope_freq_factors as a float64 array; undocumented ones as h5py gives them).
    The arrays (keys, values, queries, colsum, kvzip, attention_out, attention_lse, attention_max, attention_full,
    logits, logprobs, tokens, wo, retained, step_end) are h5py datasets, read lazily by slicing
    (trace.keys[3, 0] reads layer 3, kv head 0 only; float16 stays float16), or None when absent."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._f = _open_file(self.path)
        try:
            self._meta = _read_meta(self.path, self._f)
            self._dsets = _open_datasets(self.path, self._f, self._meta)
            _check_tokens(self.path, self._dsets["tokens"], self._meta["vocab_size"])
            self._prompt_text = _read_text(self.path, self._f, "/prompt_text")
            self._prompt_chat = _read_text(self.path, self._f, "/prompt_chat")
            self._spans = _read_spans(self.path, self._f, self._meta["prompt_len"])
        except TraceError:
            self._f.close()
            raise
        except (OSError, KeyError, ValueError, TypeError, RuntimeError) as e:
            self._f.close()
            raise TraceError(self.path, "cannot read it (%s)" % e) from None

    # lifetime
    def close(self):
        """Closes the HDF5 file; the datasets cannot be read after."""
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def closed(self):
        return self._f is None

    @property
    def file(self):
        """The open h5py.File (read-only), for anything the accessors do not cover."""
        self._require_open()
        return self._f

    def _require_open(self):
        if self._f is None:
            raise ValueError("%s: the trace is closed" % self.path)

    # attributes
    @property
    def meta(self):
        """Every root attribute by its documented name (a new dict each time)."""
        return dict(self._meta)

    n_layers = property(lambda self: self._meta["n_layers"], doc="L")
    n_heads = property(lambda self: self._meta["n_heads"], doc="H, query heads")
    n_kv_heads = property(lambda self: self._meta["n_kv_heads"], doc="K, kv heads")
    head_dim = property(lambda self: self._meta["head_dim"], doc="D")
    n_tokens = property(lambda self: self._meta["n_tokens"], doc="T")
    prompt_len = property(lambda self: self._meta["prompt_len"], doc="tokens of the prompt")
    vocab_size = property(lambda self: self._meta["vocab_size"], doc="V")
    architecture = property(lambda self: self._meta["architecture"])
    model_name = property(lambda self: self._meta["model_name"])
    creator = property(lambda self: self._meta["creator"])
    capture_mode = property(lambda self: self._meta["capture_mode"], doc="'full' or 'evict'")
    capture_chunk = property(lambda self: self._meta["capture_chunk"])
    storage_dtype = property(lambda self: self._meta["storage_dtype"], doc="'f32' or 'f16'")
    rope_style = property(lambda self: self._meta["rope_style"], doc="'interleaved' or 'neox'")
    rope_theta = property(lambda self: self._meta["rope_theta"])
    schema = property(lambda self: self._meta["kvtrace_schema"], doc="(major, minor)")

    def kv_head_of(self, q_head):
        """The kv head query head q_head reads: q_head // (H // K) (consecutive grouping)."""
        H, K = self._meta["n_heads"], self._meta["n_kv_heads"]
        q = int(q_head)
        if not 0 <= q < H:
            raise IndexError("query head %d is outside [0, %d)" % (q, H))
        return q // (H // K)

    # datasets
    def _dset(self, name):
        self._require_open()
        return self._dsets.get(name)

    tokens = property(lambda self: self._dset("tokens"), doc="int32 [T]")
    keys = property(lambda self: self._dset("keys"), doc="storage [L, K, T, D]")
    values = property(lambda self: self._dset("values"), doc="storage [L, K, T, D]")
    queries = property(lambda self: self._dset("queries"), doc="storage [L, H, T, D], or None")
    colsum = property(lambda self: self._dset("colsum"), doc="/attention/colsum float32 [L, H, T], or None")
    kvzip = property(lambda self: self._dset("kvzip"), doc="/attention/kvzip float32 [L, H, T], or None")
    attention_out = property(lambda self: self._dset("attention_out"), doc="/attention/out [L, H, T, D], or None")
    attention_lse = property(lambda self: self._dset("attention_lse"), doc="/attention/lse [L, H, T], or None")
    attention_max = property(lambda self: self._dset("attention_max"), doc="/attention/max [L, H, T], or None")
    attention_full = property(lambda self: self._dset("attention_full"), doc="/attention/full [L, H, T, T], or None")
    logits = property(lambda self: self._dset("logits"), doc="float32 [T, V], or None")
    logprobs = property(lambda self: self._dset("logprobs"), doc="float32 [T], or None")
    retained = property(lambda self: self._dset("retained"), doc="/evict/retained int32 [S, L, K, W], or None")
    step_end = property(lambda self: self._dset("step_end"), doc="/evict/step_end int32 [S], or None")
    wo = property(lambda self: self._dset("wo"), doc="float32 [L, dim, H*D], or None")

    def dataset(self, name):
        """A documented dataset by its name here (keys, colsum, ...) or its HDF5 path (/attention/colsum);
        None when absent. KeyError for a name the schema does not have."""
        s = _BY_NAME.get(name) or _BY_PATH.get(str(name).lstrip("/"))
        if s is None:
            raise KeyError("%s: no documented dataset named %r (%s)" % (self.path, name,
                                                                        ", ".join(_BY_NAME)))
        return self._dset(s.name)

    def dataset_names(self):
        """The documented arrays this trace holds, by their names here, in docs/trace.md's order."""
        return [d.name for d in DATASETS if d.name in self._dsets]

    def has(self, name):
        """Whether the trace holds a documented dataset (by name here or HDF5 path), or prompt_text,
        prompt_chat, spans, provenance."""
        s = _BY_NAME.get(name) or _BY_PATH.get(str(name).lstrip("/"))
        if s is not None:
            return s.name in self._dsets
        key = str(name).lstrip("/")
        if key in _OTHER_OBJECTS:
            if key == "prompt_text":
                return self._prompt_text is not None
            if key == "prompt_chat":
                return self._prompt_chat is not None
            if key == "spans":
                return bool(self._spans)
            self._require_open()
            return _lookup(self._f, _OTHER_OBJECTS[key]) is not None
        raise KeyError("%s: no documented dataset named %r" % (self.path, name))

    # text, spans, provenance
    @property
    def prompt_text(self):
        """/prompt_text (str), or None when the prompt came as ids."""
        return self._prompt_text

    @property
    def prompt_chat(self):
        """/prompt_chat parsed (a dict: family, template_sha256, messages, ...), or None."""
        if self._prompt_chat is None:
            return None
        try:
            return json.loads(self._prompt_chat)
        except ValueError as e:
            raise TraceError(self.path, "/prompt_chat is not JSON (%s)" % e) from None

    @property
    def spans(self):
        """/spans as {name: (start, end)} in the file's order (positions [start, end) of /tokens); {} when absent."""
        return dict(self._spans)

    @property
    def provenance(self):
        """/provenance's 'json' attribute parsed (docs/provenance.md), or {} when absent."""
        self._require_open()
        g = _lookup(self._f, "/provenance")
        if g is None or "json" not in g.attrs:
            return {}
        raw = g.attrs["json"]
        if isinstance(raw, (bytes, np.bytes_)):
            raw = bytes(raw).decode("utf-8", "replace")
        try:
            return json.loads(str(raw))
        except ValueError as e:
            raise TraceError(self.path, "/provenance attribute 'json' is not JSON (%s)" % e) from None

    def __repr__(self):
        m = self._meta
        state = " (closed)" if self._f is None else ""
        return ("<kvtrace.Trace %r%s: %s (%s), L=%d H=%d K=%d D=%d T=%d (prompt %d), %s, %s; %s>"
                % (self.path, state, m["model_name"], m["architecture"], m["n_layers"], m["n_heads"],
                   m["n_kv_heads"], m["head_dim"], m["n_tokens"], m["prompt_len"], m["capture_mode"],
                   m["storage_dtype"], ", ".join(self.dataset_names())))


def open_trace(path):
    """Opens and checks a kvtrace trace (docs/trace.md, schema 1.x): a Trace, or TraceError
    `PATH: what is wrong`."""
    return Trace(path)
