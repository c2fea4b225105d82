"""kvtrace.open_trace against independent reads: h5py directly and `kvtrace info`; and its refusals,
each also refused by the C reader (kvtrace info, exit 3)."""
import os
import re
import shutil

import h5py
import numpy as np
import pytest

import kvtrace

ARRAYS = ["tokens", "keys", "values", "queries", "colsum", "kvzip", "attention_out", "attention_lse",
          "attention_max", "attention_full", "logits", "logprobs", "retained", "step_end", "wo"]
PATHS = {"colsum": "attention/colsum", "kvzip": "attention/kvzip", "attention_out": "attention/out",
         "attention_lse": "attention/lse", "attention_max": "attention/max", "attention_full": "attention/full", "retained": "evict/retained",
         "step_end": "evict/step_end"}


def info(run_kvtrace, path):
    return run_kvtrace("info", path).stdout


def test_meta_equals_h5py_and_info(files, run_kvtrace):
    path = files["trace"]
    with h5py.File(path, "r") as f:
        attrs = dict(f.attrs)
    with kvtrace.open_trace(path) as t:
        meta = t.meta
        assert set(meta) == set(attrs)
        for k, v in attrs.items():
            if k == "kvtrace_schema":
                assert meta[k] == tuple(int(x) for x in v) == (1, 0)
            elif isinstance(v, str):
                assert type(meta[k]) is str and meta[k] == v
            elif np.issubdtype(np.asarray(v).dtype, np.integer):
                assert type(meta[k]) is int and meta[k] == int(v)
            else:
                assert type(meta[k]) is float and meta[k] == float(v)
        text = info(run_kvtrace, path)
        m = re.search(r"L=(\d+) layers, H=(\d+) heads, K=(\d+) kv heads, D=(\d+) head dim, V=(\d+) vocab", text)
        assert tuple(map(int, m.groups())) == (t.n_layers, t.n_heads, t.n_kv_heads, t.head_dim, t.vocab_size)
        m = re.search(r"T=(\d+) \(prompt (\d+)", text)
        assert tuple(map(int, m.groups())) == (t.n_tokens, t.prompt_len)
        assert re.search(r"schema\s+(\d+)\.(\d+)", text).groups() == tuple(map(str, t.schema))
        assert re.search(r"model\s+(\S+) \((\w+)\)", text).groups() == (t.model_name, t.architecture)
        m = re.search(r"rope\s+(\w+), theta (\S+)", text)
        assert m.group(1) == t.rope_style and float(m.group(2)) == t.rope_theta
        m = re.search(r"capture\s+mode (\w+), chunk (\d+)", text)
        assert (m.group(1), int(m.group(2))) == (t.capture_mode, t.capture_chunk)
        assert re.search(r"storage\s+(\w+)", text).group(1) == t.storage_dtype
        assert re.search(r"creator\s+(.+)", text).group(1).strip() == t.creator
        # the datasets info lists are dataset_names(), in the same order
        listed = re.findall(r"^\s+(/\S+)\s+\[", text, re.M)
        assert listed == ["/" + PATHS.get(n, n) for n in t.dataset_names()]


@pytest.mark.parametrize("which", ["trace", "trace_f16"])
def test_arrays_equal_h5py(files, which):
    path = files[which]
    with h5py.File(path, "r") as f, kvtrace.open_trace(path) as t:
        for name in ARRAYS:
            p = PATHS.get(name, name)
            d = getattr(t, name)
            assert (d is None) == (p not in f), name
            assert t.has(name) == (p in f) and t.has("/" + p) == (p in f)
            if d is None:
                continue
            assert d.shape == f[p].shape and d.dtype == f[p].dtype
            assert np.array_equal(d[()], f[p][()], equal_nan=True), name
            assert t.dataset(name) is not None and t.dataset("/" + p).shape == d.shape
        # lazy slices, the element type as stored
        k = t.keys[1, 0]
        assert k.shape == (t.n_tokens, t.head_dim)
        assert np.array_equal(k, f["keys"][1, 0])
        assert k.dtype == (np.float16 if which == "trace_f16" else np.float32)
        assert t.queries[1, 3, 5:9].shape == (4, t.head_dim)
        assert np.array_equal(t.colsum[0, 2], f["attention/colsum"][0, 2])
        assert t.tokens.dtype == np.int32


def test_accessors(files):
    with kvtrace.open_trace(files["trace"]) as t:
        assert [t.kv_head_of(h) for h in range(t.n_heads)] == [h // (t.n_heads // t.n_kv_heads)
                                                                for h in range(t.n_heads)]
        with pytest.raises(IndexError):
            t.kv_head_of(t.n_heads)
        assert t.prompt_text is None and t.prompt_chat is None and t.spans == {}
        assert not t.has("spans") and not t.has("prompt_text") and t.has("provenance")
        prov = t.provenance
        with h5py.File(files["trace"], "r") as f:
            import json
            assert prov == json.loads(f["provenance"].attrs["json"])
        assert prov["verb"] == "synth"
        r = repr(t)
        assert "L=2 H=4 K=2 D=8 T=48 (prompt 40)" in r and "keys" in r
        with pytest.raises(KeyError):
            t.has("nonsense")
    assert t.closed and "closed" in repr(t)
    with pytest.raises(ValueError):
        t.keys


def test_spans(files):
    p = os.path.join(files["study"], "p1.h5")
    with kvtrace.open_trace(p) as t:
        assert t.spans == {"needle": (5, 9), "question": (21, 30)}
        assert t.has("spans")


def test_text_and_chat(files, tmp_path, run_kvtrace):
    p = str(tmp_path / "text.h5")
    shutil.copy(files["trace"], p)
    chat = '{"family": "chatml", "template_sha256": "00", "messages": [{"role": "user", "content": "hé"}]}'
    with h5py.File(p, "a") as f:
        f["prompt_text"] = "Once upon a time, é"
        f["prompt_chat"] = chat
        f.attrs["rope_scaling"] = "llama3 factor=32"
        f.attrs["rope_freq_factors"] = np.array([1.0, 2.0, 4.0, 8.0])
        del f["provenance"]
    run_kvtrace("info", p)   # the C reader takes it too
    with kvtrace.open_trace(p) as t:
        assert t.prompt_text == "Once upon a time, é"
        assert t.prompt_chat["messages"][0]["content"] == "hé"
        assert t.provenance == {}
        assert t.meta["rope_scaling"] == "llama3 factor=32"
        assert t.meta["rope_freq_factors"].dtype == np.float64 and list(t.meta["rope_freq_factors"]) == [1, 2, 4, 8]


def test_evict_mode(files, tmp_path, run_kvtrace):
    """An evict-mode trace (as capture --evict --retained writes one), made from the synthetic one."""
    p = str(tmp_path / "evict.h5")
    shutil.copy(files["trace"], p)
    with h5py.File(p, "a") as f:
        del f["attention"]
        f.attrs["capture_mode"] = "evict"
        f.attrs["evict_policy"] = "streaming"
        f.attrs["evict_params"] = "sinks=4"
        f.attrs["evict_budget"] = np.int64(16)
        f.attrs["evict_chunk"] = np.int64(8)
        S, L, K = 3, f.attrs["n_layers"], f.attrs["n_kv_heads"]
        f["evict/retained"] = np.tile(np.arange(16, dtype=np.int32), (S, L, K, 1))
        f["evict/step_end"] = np.array([15, 23, 31], dtype=np.int32)
    run_kvtrace("info", p)
    with kvtrace.open_trace(p) as t:
        assert t.capture_mode == "evict" and t.meta["evict_budget"] == 16 and t.meta["evict_policy"] == "streaming"
        assert t.retained.shape == (3, 2, 2, 16) and list(t.step_end[()]) == [15, 23, 31]
        assert t.colsum is None and "retained" in t.dataset_names()


def _mutate(src, dst, fn):
    shutil.copy(src, dst)
    with h5py.File(dst, "a") as f:
        fn(f)
    return dst


def _set(name, value):
    return lambda f: f.attrs.__setitem__(name, value)


def _del_attr(name):
    return lambda f: f.attrs.__delitem__(name)


def _replace(path, data):
    def fn(f):
        del f[path]
        f[path] = data
    return fn


MUTATIONS = {
    "missing attribute": (_del_attr("n_heads"), "missing required attribute 'n_heads'"),
    "schema major 2": (_set("kvtrace_schema", np.array([2, 0])), "trace schema 2.0 is not supported"),
    "no schema": (_del_attr("kvtrace_schema"), "not a kvtrace trace"),
    "H % K": (_set("n_kv_heads", np.int64(3)), "not a multiple of n_kv_heads"),
    "prompt_len > T": (_set("prompt_len", np.int64(49)), "attribute 'prompt_len' = 49 is out of range [1, 48]"),
    "float n_layers": (_set("n_layers", 2.0), "attribute 'n_layers' is float64, expected an integer"),
    "int model_name": (_set("model_name", np.int64(3)), "attribute 'model_name' is not a string"),
    "rope_style": (_set("rope_style", "yarn"), "attribute 'rope_style' = 'yarn' is not one of interleaved, neox"),
    "capture_mode": (_set("capture_mode", "both"), "'capture_mode' = 'both' is not one of full, evict"),
    "storage_dtype": (_set("storage_dtype", "bf16"), "'storage_dtype' = 'bf16' is not one of f32, f16"),
    "architecture": (_set("architecture", "gpt2"), "'architecture' = 'gpt2' is not one of"),
    "rope_theta": (_set("rope_theta", -1.0), "'rope_theta' = -1 is not a positive number"),
    "rope_freq_factors": (lambda f: (f.attrs.__setitem__("rope_scaling", "llama3 factor=32"),
                                     f.attrs.__setitem__("rope_freq_factors", np.array([1.0, 2.0, 0.0, 1.0]))),
                          "attribute 'rope_freq_factors'[2] = 0 is not a positive number"),
    "rope_freq_factors length": (_set("rope_freq_factors", np.ones(3)),
                                 "attribute 'rope_freq_factors' has 3 element(s), expected 4"),
    "no keys": (lambda f: f.__delitem__("keys"), "missing required dataset /keys"),
    "keys shape": (_replace("keys", np.zeros((2, 2, 47, 8), np.float32)),
                   "dataset /keys has shape [2, 2, 47, 8], but the attributes say [2, 2, 48, 8]"),
    "keys rank": (_replace("keys", np.zeros((2, 2, 48), np.float32)), "dataset /keys has rank 3, expected 4"),
    "keys f16 in f32": (_replace("keys", np.zeros((2, 2, 48, 8), np.float16)),
                        "dataset /keys has element type float16, expected float32"),
    "float tokens": (_replace("tokens", np.zeros(48, np.float32)), "dataset /tokens has element type float32"),
    "token outside vocab": (_replace("tokens", np.full(48, 100, np.int32)),
                            "/tokens[0] = 100 is outside the vocabulary [0, 100)"),
    "out without lse": (lambda f: (f.__delitem__("attention/max"), f.__delitem__("attention/lse")),
                        "/attention/out needs /attention/lse beside it"),
    "max without lse": (lambda f: (f.__delitem__("attention/out"), f.__delitem__("attention/lse")),
                        "/attention/max needs /attention/lse beside it"),
    "evict data in full mode": (lambda f: f.__setitem__("evict/step_end", np.zeros(2, np.int32)),
                                "dataset /evict/step_end is not allowed with capture_mode = full"),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_refusals(files, tmp_path, run_kvtrace, case):
    fn, words = MUTATIONS[case]
    p = _mutate(files["trace"], str(tmp_path / "bad.h5"), fn)
    with pytest.raises(kvtrace.TraceError) as e:
        kvtrace.open_trace(p)
    msg = str(e.value)
    assert isinstance(e.value, ValueError)
    assert msg.startswith(p + ": ") and "\n" not in msg and words in msg, msg
    c = run_kvtrace("info", p, ok=False)      # the C reader refuses it too
    assert c.returncode == 3, (case, c.stdout)


def test_refusals_not_a_trace(tmp_path, run_kvtrace):
    cases = {"text.h5": (b"not hdf5 at all\n", "not an HDF5 file"), "empty.h5": (b"", "empty file")}
    for name, (data, words) in cases.items():
        p = str(tmp_path / name)
        with open(p, "wb") as f:
            f.write(data)
        with pytest.raises(kvtrace.TraceError, match=re.escape(p) + ": .*" + words):
            kvtrace.open_trace(p)
        assert run_kvtrace("info", p, ok=False).returncode == 3
    missing = str(tmp_path / "absent.h5")
    with pytest.raises(kvtrace.TraceError, match=re.escape(missing) + ": cannot open"):
        kvtrace.open_trace(missing)
    with pytest.raises(kvtrace.TraceError, match="not a regular file"):
        kvtrace.open_trace(str(tmp_path))


def test_h5py_written_trace(tmp_path, run_kvtrace):
    """A minimal trace written by plain h5py (no provenance, fixed-length strings, int32 attributes)."""
    p = str(tmp_path / "mini.h5")
    L, H, K, D, T = 1, 2, 1, 4, 6
    with h5py.File(p, "w") as f:
        f.attrs["kvtrace_schema"] = np.array([1, 3], np.int32)     # a later minor is accepted
        for k, v in dict(n_layers=L, n_heads=H, n_kv_heads=K, head_dim=D, n_tokens=T, prompt_len=T, vocab_size=10,
                         capture_chunk=0).items():
            f.attrs[k] = np.int32(v)
        for k, v in dict(creator="h5py", model_name="mini", architecture="qwen2", rope_style="neox",
                         capture_mode="full", storage_dtype="f32").items():
            f.attrs[k] = np.bytes_(v)
        f.attrs["rope_theta"] = np.float32(1e6)
        f["tokens"] = np.arange(T, dtype=np.int64)
        f["keys"] = np.ones((L, K, T, D), np.float32)
        f["values"] = np.ones((L, K, T, D), np.float32)
    run_kvtrace("info", p)
    with kvtrace.open_trace(p) as t:
        assert t.schema == (1, 3) and t.architecture == "qwen2" and t.rope_theta == 1e6
        assert t.dataset_names() == ["tokens", "keys", "values"] and t.queries is None
        assert t.provenance == {} and t.kv_head_of(1) == 0
