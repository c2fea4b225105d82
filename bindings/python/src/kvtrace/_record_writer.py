"""The recorder's HDF5 side: a trace file (docs/trace.md, schema 1.0) written as positions arrive.

Every per-position dataset is created empty, extendable along T (maximum shape unlimited there) and
chunked as the C writer chunks it: (1, 1, t, D) with t = 256 for the 4-D ones, (1, 1, 1024) for the
[L, H, T] ones, 1024 rows for the 1-D ones. Rows are appended chunk by chunk, so nothing the size of
the sequence is held in memory but the float64 column sums on the model's device. The file is written
under a temporary name and renamed onto its path by `commit`; `discard` removes it.
"""
import json
import os

import h5py
import numpy as np

from ._trace import MAX_SPANS, span_problem

SCHEMA = (1, 0)
CHUNK_T, COLSUM_CHUNK_T = 256, 1024

# Each dataset's `description` attribute, word for word as trace/trace_schema.c has it
# (`kvtrace info --schema` prints the table; the tests compare).
DESCRIPTIONS = {
    "tokens": "token ids [T]: the prompt's (positions below prompt_len) as its tokenizer gave them, special tokens "
              "included where the tokenizer adds them (Llama's BOS first; Qwen adds none), then the generated ones",
    "prompt_text": "the prompt's text, UTF-8, exactly as given (--prompt, or the whole --prompt-file); its token ids "
                   "are /tokens[0:prompt_len]; generated tokens are not in it",
    "keys": "keys after RoPE (and after any k-norm, as qwen3's), as cached; [L, K, T, D], one row per kv head and "
            "position",
    "values": "values as cached; [L, K, T, D], one row per kv head and position",
    "queries": "queries after RoPE (and after any q-norm); [L, H, T, D]; query head h uses kv head h / (H/K); sim "
               "needs them",
    "attention/colsum": "attention key j received: sum over queries i >= j of the causal softmax weight a[i][j] "
                        "(scale 1/sqrt(D)), summed in double; [L, H, T], unitless, between 0 and T - j",
    "attention/out": "full-cache attention output o[i] = sum over j <= i of a[i][j] v[j], a the causal softmax of "
                     "q.k/sqrt(D) (the unrounded keys, queries and values of f16 traces); [L, H, T, D], query head "
                     "h with kv head h / (H/K)",
    "attention/lse": "log-sum-exp of query i's scaled scores: log of the sum over j <= i of exp(q_i.k_j/sqrt(D)) "
                     "(natural log, unitless), so a[i][j] = exp(s_ij - lse_i); [L, H, T], beside /attention/out",
    "attention/max": "largest scaled score of query i: max over j <= i of q_i.k_j/sqrt(D) (the unrounded keys and "
                     "queries), unitless; [L, H, T], beside /attention/lse",
    "logits": "logits[t] are the model's next-token logits at position t (before softmax); [T, V]",
    "logprobs": "logprobs[t] is the log-probability (natural log, temperature 1, whatever the sampling) of token "
                "t+1 given tokens 0..t; [T], the last is NaN",
    "spans": "named token ranges of the prompt: span i is the positions [starts[i], ends[i]) of /tokens, named "
             "names[i] (distinct, of A-Z a-z 0-9 _ . -); 'answer' is the prompt's answer when it has one",
}

def check_spans(spans, prompt_len):
    """spans: {name: (start, end)} -> (names, starts, ends), or ValueError naming the first bad span
    (the reader's rules: _trace.span_problem)."""
    items = list(spans.items())
    if not 1 <= len(items) <= MAX_SPANS:
        raise ValueError("spans: 1 to %d spans, not %d" % (MAX_SPANS, len(items)))
    for name, se in items:
        start, end = (int(x) for x in se)
        problem = span_problem(name, start, end, prompt_len)
        if problem:
            raise ValueError("spans: " + problem)
    return [n for n, _ in items], [int(s) for _, (s, _e) in items], [int(e) for _, (_s, e) in items]


class TraceFile:
    """One trace being written: L layers, H query heads, K kv heads, head size D."""

    def __init__(self, path, L, H, K, D, storage="f32", queries=True, logits=False, V=None):
        self.path, self.tmp = str(path), "%s.tmp%d" % (path, os.getpid())
        self.L, self.H, self.K, self.D = L, H, K, D
        self.store = np.float16 if storage == "f16" else np.float32
        self.f = h5py.File(self.tmp, "w")
        self.T = 0
        self.ds = {}
        self._add("tokens", (0,), (None,), (COLSUM_CHUNK_T,), np.int32)
        self._add("keys", (L, K, 0, D), (L, K, None, D), (1, 1, CHUNK_T, D), self.store)
        self._add("values", (L, K, 0, D), (L, K, None, D), (1, 1, CHUNK_T, D), self.store)
        if queries:
            self._add("queries", (L, H, 0, D), (L, H, None, D), (1, 1, CHUNK_T, D), self.store)
            self._add("attention/out", (L, H, 0, D), (L, H, None, D), (1, 1, CHUNK_T, D), np.float32)
            self._add("attention/lse", (L, H, 0), (L, H, None), (1, 1, COLSUM_CHUNK_T), np.float32)
            self._add("attention/max", (L, H, 0), (L, H, None), (1, 1, COLSUM_CHUNK_T), np.float32)
        self._add("logprobs", (0,), (None,), (COLSUM_CHUNK_T,), np.float32, fill=np.nan)
        if logits:
            rows = max(1, min(CHUNK_T, (256 * 1024) // (4 * V)))
            self._add("logits", (0, V), (None, V), (rows, V), np.float32)

    def _add(self, name, shape, maxshape, chunks, dtype, fill=None):
        d = self.f.create_dataset(name, shape=shape, maxshape=maxshape, chunks=chunks, dtype=dtype,
                                  fillvalue=fill, track_times=False)
        d.attrs["description"] = DESCRIPTIONS[name]
        self.ds[name] = d

    def grow(self, T):
        """Extends every per-position dataset to T positions."""
        for name, d in self.ds.items():
            axis = 2 if d.ndim >= 3 else 0
            if d.shape[axis] < T:
                d.resize(T, axis=axis)
        self.T = max(self.T, T)

    def write(self, name, index, data):
        self.ds[name][index] = data

    def write_colsum(self, colsum):
        """colsum: a callable giving layer l's [H, T] float64 column sums as numpy."""
        d = self.f.create_dataset("attention/colsum", shape=(self.L, self.H, self.T), maxshape=(self.L, self.H, None),
                                  chunks=(1, 1, min(self.T, COLSUM_CHUNK_T)), dtype=np.float32, track_times=False)
        d.attrs["description"] = DESCRIPTIONS["attention/colsum"]
        for layer in range(self.L):
            d[layer] = colsum(layer).astype(np.float32)

    def write_text(self, text):
        d = self.f.create_dataset("prompt_text", data=text, dtype=h5py.string_dtype("utf-8"), track_times=False)
        d.attrs["description"] = DESCRIPTIONS["prompt_text"]

    def write_spans(self, names, starts, ends):
        g = self.f.create_group("spans", track_order=False)
        g.create_dataset("names", data=names, dtype=h5py.string_dtype("utf-8"), track_times=False)
        g.create_dataset("starts", data=np.asarray(starts, dtype="<i8"), track_times=False)
        g.create_dataset("ends", data=np.asarray(ends, dtype="<i8"), track_times=False)
        g.attrs["description"] = DESCRIPTIONS["spans"]

    def write_attrs(self, attrs):
        for k, v in attrs.items():
            if v is not None:
                self.f.attrs[k] = str(v) if isinstance(v, str) else v

    def write_provenance(self, record):
        """record: the provenance fields (docs/provenance.md); written as `json` and flat attributes."""
        g = self.f.create_group("provenance")
        g.attrs["json"] = json.dumps(record, indent=2)
        for k, v in record.items():
            if isinstance(v, str):
                g.attrs[k] = str(v)    # str(): a str subclass (torch's version) has no HDF5 type
            elif isinstance(v, (bool, int, float)):
                g.attrs[k] = v

    def commit(self):
        self.f.close()
        os.replace(self.tmp, self.path)

    def discard(self):
        try:
            self.f.close()
        except Exception:   # the file may already be closed or broken: removing it is what matters
            pass
        if os.path.exists(self.tmp):
            os.remove(self.tmp)
