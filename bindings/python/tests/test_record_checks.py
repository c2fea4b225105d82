"""kvtrace.record where the C capture does not run, and what it refuses:

- phi3 (fused qkv_proj) and granite (attention_multiplier != 1/sqrt(D): the scaling folded into the
  queries), random weights: the recorder's keys, values, queries (scaled as documented), attention
  outputs, logits and logprobs against transformers' own sdpa forward of the same model (read through a
  separate capturing attention function), and colsum, lse, out against a brute-force float64 numpy
  softmax of those captured q, k, v (T = 100: a T x T is fine here); `kvtrace info` and `kvtrace sim`
  accept the traces;
- dtype f16, text, spans, logits; every dataset's description as `kvtrace info --schema` prints it;
- refusals (batch 2, soft-capping, a sliding window shorter than T, an unsupported architecture, a
  layer bypassing the registered attention), each a ValueError of one line, no file left; an error
  inside the block removes the file, re-raises and restores the model;
- the example (examples/record_and_replay.py) as a subprocess."""
import copy
import glob
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import kvtrace  # noqa: E402
from test_record import IDS, POLICIES, REPO, SHAPE, TOL, kvbin, run, scaled_diff, tiny_model  # noqa: E402,F401

HERE = os.path.dirname(os.path.abspath(__file__))
CAPTURE = "kvtrace_test_capture"
CAPTURED = {}   # layer -> (q [H, T, D], k [K, T, D], v [K, T, D], scaling, sdpa output [H, T, D]), float64


def _capture(module, query, key, value, attention_mask, **kw):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    out, w = sdpa_attention_forward(module, query, key, value, attention_mask, **kw)
    f = lambda x: x[0].detach().double().numpy().copy()  # noqa: E731
    CAPTURED[module.layer_idx] = (f(query), f(key), f(value), float(kw["scaling"]), f(out.transpose(1, 2)))
    return out, w


def brute_force(q, k, v, scale):
    """Causal softmax attention in float64 over the whole sequence: (out [H, T, D], lse [H, T], colsum [H, T])."""
    H, T, _ = q.shape
    G = H // k.shape[0]
    kk, vv = np.repeat(k, G, axis=0), np.repeat(v, G, axis=0)   # query head h reads kv head h // G
    s = np.einsum("htd,hsd->hts", q, kk) * scale
    s[:, np.triu(np.ones((T, T), dtype=bool), 1)] = -np.inf
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    lse = np.log(e.sum(axis=-1)) + m[..., 0]
    a = np.exp(s - lse[..., None])
    return np.einsum("hts,hsd->htd", a, vv), lse, a.sum(axis=1)


def other_archs():
    from transformers import GraniteConfig, Phi3Config
    return {
        "phi3": (Phi3Config, dict(pad_token_id=0)),
        "granite": (GraniteConfig, dict(attention_multiplier=0.05, embedding_multiplier=2.0, residual_multiplier=0.5,
                                        logits_scaling=4.0, rope_parameters={"rope_type": "default",
                                                                             "rope_theta": 50000.0})),
    }


@pytest.mark.parametrize("arch", ["phi3", "granite"])
def test_independent(kvbin, tmp_path, arch):
    from transformers import AttentionInterface
    cls, extra = other_archs()[arch]
    model = tiny_model(cls, extra)
    ids = IDS[:100]
    py = str(tmp_path / "py.h5")
    with kvtrace.record(model, py, chunk=16, logits=True):
        model(torch.tensor([ids]))
    AttentionInterface.register(CAPTURE, _capture)
    model.set_attn_implementation(CAPTURE)
    CAPTURED.clear()
    with torch.no_grad():
        logits = model(torch.tensor([ids]), use_cache=False).logits[0].double().numpy()
    assert sorted(CAPTURED) == list(range(SHAPE["num_hidden_layers"]))
    worst = {}
    with h5py.File(py, "r") as f:
        D = int(f.attrs["head_dim"])

        def put(name, e):
            worst[name] = max(worst.get(name, 0.0), e)
        for layer, (q, k, v, scale, out) in CAPTURED.items():
            put("keys", scaled_diff(f["keys"][layer], k))
            put("values", scaled_diff(f["values"][layer], v))
            put("queries", scaled_diff(f["queries"][layer], q * scale * np.sqrt(D)))
            put("out (sdpa)", scaled_diff(f["attention/out"][layer], out))
            o, lse, col = brute_force(q, k, v, scale)
            put("attention/out", scaled_diff(f["attention/out"][layer], o))
            put("attention/lse", scaled_diff(f["attention/lse"][layer], lse))
            put("attention/colsum", scaled_diff(f["attention/colsum"][layer], col))
        put("logits", scaled_diff(f["logits"][()], logits))
        lp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
            - logits.max(-1, keepdims=True)
        want = np.append(lp[np.arange(len(ids) - 1), ids[1:]], np.nan)
        put("logprobs", scaled_diff(f["logprobs"][()], want))
        assert f.attrs["architecture"] == arch and "rope_scaling" not in f.attrs
        if arch == "granite":
            assert abs(CAPTURED[0][3] - 0.05) < 1e-12   # the model's scale, not 1/sqrt(D)
    print("\n# %s (vs transformers' sdpa and float64 numpy): %s" % (arch, " ".join("%s %.1e" % kv for kv in
                                                                                   worst.items())))
    assert all(e <= TOL for e in worst.values()), worst
    run(kvbin, "info", py)
    run(kvbin, "sim", py, "--policies", POLICIES, "--budgets", "32,64", "--chunk", 16, "--threads", 1, "--quiet",
        "-o", tmp_path / "sim")
    assert os.path.isfile(tmp_path / "sim" / "summary.csv")


def schema_descriptions(kvbin):
    """{path: description} from `kvtrace info --schema` (the table's markdown escapes undone)."""
    out = {}
    for line in run(kvbin, "info", "--schema").stdout.splitlines():
        if line.startswith("| `/"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            out[cells[0].strip("`").lstrip("/")] = cells[3].replace("\\<", "<").replace("\\*", "*")
    return out


def test_f16_text_spans_descriptions(kvbin, tmp_path):
    from test_record import archs
    cls, extra = archs()["qwen2"]
    model = tiny_model(cls, extra)
    ids = IDS[:60]
    a, b = str(tmp_path / "f32.h5"), str(tmp_path / "f16.h5")
    with kvtrace.record(model, a, chunk=8):
        model(torch.tensor([ids[:50]]))
    text = "a prompt, UTF-8: é ü 😀"
    with kvtrace.record(model, b, chunk=8, dtype="f16", logits=True, text=text, spans={"ctx": (0, 10), "q": (10, 50)},
                        model_id="tiny-qwen2", record=("keys", "values", "queries")) as rec:
        out = model(torch.tensor([ids[:50]]), logits_to_keep=3)
        assert out.logits.shape == (1, 3, SHAPE["vocab_size"])
        out = model(torch.tensor([ids[50:]]), past_key_values=out.past_key_values)   # the same sequence, continued
        assert out.logits.shape == (1, 10, SHAPE["vocab_size"])
    assert rec.chunk_sizes == [8] * 6 + [2, 8, 2]
    desc = schema_descriptions(kvbin)
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        assert fb.attrs["n_tokens"] == 60 and fb.attrs["prompt_len"] == 50 and fb.attrs["storage_dtype"] == "f16"
        assert fb.attrs["model_name"] == "tiny-qwen2"
        for name in ("keys", "values", "queries"):
            assert fb[name].dtype == np.float16
            assert np.array_equal(fb[name][:, :, :50], fa[name][()].astype(np.float16)), name
        for name in ("attention/out", "attention/lse", "attention/colsum"):
            assert fb[name].dtype == np.float32
        assert fb["prompt_text"].asstr()[()] == text
        assert [n.decode() if isinstance(n, bytes) else n for n in fb["spans/names"][()]] == ["ctx", "q"]
        assert fb["spans/starts"][()].tolist() == [0, 10] and fb["spans/ends"][()].tolist() == [10, 50]
        assert fb["logits"].shape == (60, SHAPE["vocab_size"])
        seen = []
        fb.visititems(lambda n, o: seen.append(n) if "description" in o.attrs else None)
        assert sorted(seen) == sorted(["tokens", "keys", "values", "queries", "attention/out", "attention/lse",
                                       "attention/max", "attention/colsum", "logits", "logprobs", "prompt_text", "spans"])
        for n in seen:
            assert fb[n].attrs["description"] == desc[n], n
        for name, d in fb.items():
            if isinstance(d, h5py.Dataset) and d.ndim == 4:
                assert d.chunks[:2] == (1, 1) and d.chunks[2] <= 256 and d.maxshape[2] is None
    info = run(kvbin, "info", b).stdout
    assert "f16" in info
    if hasattr(kvtrace, "open_trace"):
        with kvtrace.open_trace(b) as t:
            assert t is not None


def tmp_left(d):
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(str(d), "*")))


def one_line_value_error(excinfo):
    msg = str(excinfo.value)
    assert excinfo.type is ValueError or issubclass(excinfo.type, ValueError)
    assert msg and "\n" not in msg, msg
    return msg


def test_refuse_batch(tmp_path):
    from test_record import archs
    model = tiny_model(*archs()["llama"])
    with pytest.raises(ValueError) as e:
        with kvtrace.record(model, tmp_path / "t.h5", chunk=16):
            model(torch.tensor([IDS[:20], IDS[20:40]]))
    assert "batch size must be 1" in one_line_value_error(e)
    assert tmp_left(tmp_path) == []
    assert "forward" not in model.__dict__ and model.config._attn_implementation != "kvtrace_record"


def test_refuse_softcap(tmp_path):
    from transformers import Gemma2Config, LlamaConfig
    model = tiny_model(LlamaConfig, {})
    model.config.attn_logit_softcapping = 50.0
    with pytest.raises(ValueError) as e:
        kvtrace.record(model, tmp_path / "t.h5")
    assert "soft-capping" in one_line_value_error(e)
    g = tiny_model(Gemma2Config, dict(head_dim=32))
    with pytest.raises(ValueError) as e:
        with kvtrace.record(g, tmp_path / "g.h5"):
            g(torch.tensor([IDS[:10]]))
    assert "soft-capping" in one_line_value_error(e)
    assert tmp_left(tmp_path) == []


def test_refuse_sliding_window(tmp_path):
    from transformers import MistralConfig
    model = tiny_model(MistralConfig, dict(sliding_window=16))
    with pytest.raises(ValueError) as e:
        with kvtrace.record(model, tmp_path / "t.h5", chunk=8):
            model(torch.tensor([IDS[:40]]))
    assert "sliding window of 16" in one_line_value_error(e)
    assert tmp_left(tmp_path) == []
    with kvtrace.record(model, tmp_path / "ok.h5", chunk=8):   # within the window: recorded
        model(torch.tensor([IDS[:16]]))
    assert tmp_left(tmp_path) == ["ok.h5"]


def test_refuse_architecture(tmp_path):
    from transformers import AutoModelForCausalLM, GPT2Config
    model = AutoModelForCausalLM.from_config(GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100)).eval()
    with pytest.raises(ValueError) as e:
        kvtrace.record(model, tmp_path / "t.h5")
    msg = one_line_value_error(e)
    assert "'gpt2'" in msg and "llama, mistral, qwen2, qwen3, phi3, granite" in msg
    assert tmp_left(tmp_path) == []


def test_refuse_bypassing_layer(tmp_path):
    """A layer whose config always answers sdpa never calls the registered function: refused after the first forward."""
    from test_record import archs
    model = tiny_model(*archs()["llama"])
    attn = model.model.layers[1].self_attn
    fixed = copy.copy(attn.config)
    fixed.__class__ = type("FixedSdpa", (type(fixed),), {"_attn_implementation": property(lambda s: "sdpa",
                                                                                           lambda s, v: None)})
    attn.config = fixed
    with pytest.raises(ValueError) as e:
        with kvtrace.record(model, tmp_path / "t.h5", chunk=16):
            model(torch.tensor([IDS[:20]]))
    assert "layers 1 did not call the registered attention" in one_line_value_error(e)
    assert tmp_left(tmp_path) == []


def test_error_inside_block(tmp_path):
    from test_record import archs
    model = tiny_model(*archs()["llama"])
    impl = model.config._attn_implementation
    with pytest.raises(RuntimeError, match="user error"):
        with kvtrace.record(model, tmp_path / "t.h5", chunk=16):
            model(torch.tensor([IDS[:20]]))
            raise RuntimeError("user error")
    assert tmp_left(tmp_path) == []
    assert model.config._attn_implementation == impl and "forward" not in model.__dict__
    assert "generate" not in model.__dict__
    with pytest.raises(ValueError) as e:   # nothing run inside: nothing to record
        with kvtrace.record(model, tmp_path / "t.h5"):
            pass
    assert "nothing to record" in one_line_value_error(e)
    with pytest.raises(ValueError) as e:   # a second sequence without the first's cache
        with kvtrace.record(model, tmp_path / "t.h5"):
            model(torch.tensor([IDS[:20]]))
            model(torch.tensor([IDS[:20]]))
    assert "starts a new sequence" in one_line_value_error(e)
    assert tmp_left(tmp_path) == []


def test_example(kvbin, tmp_path):
    """examples/record_and_replay.py, as a user runs it: a small random llama, recorded, replayed, summarised."""
    example = os.path.join(HERE, "..", "examples", "record_and_replay.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(HERE, "..", "src"),
                                                       os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "example"
    p = subprocess.run([sys.executable, example, "--kvtrace", kvbin, "-o", str(out), "--threads", "1"],
                       capture_output=True, text=True, env=env, timeout=300)
    print("\n# example:\n#   " + p.stdout.strip().replace("\n", "\n#   "))
    assert p.returncode == 0, p.stderr[-3000:]
    assert os.path.isfile(out / "trace.h5") and os.path.isfile(out / "results" / "summary.csv")
    assert "summary" in p.stdout
    run(kvbin, "info", out / "trace.h5")
    with h5py.File(out / "trace.h5", "r") as f:
        assert json.loads(f["provenance"].attrs["json"])["verb"] == "record"


@pytest.mark.parametrize("max_block", [1 << 24, 700, 50, 1])
def test_blockwise_attention(max_block):
    """_record_attn.attend_chunk, whatever its block size (heads and rows split down to one score row),
    against float64 softmax attention of one chunk of 13 queries at the end of a 50-row cache."""
    from kvtrace._record_attn import attend_chunk
    gen = torch.Generator().manual_seed(3)
    H, K, D, Tc, t, scale = 6, 2, 16, 50, 13, 0.3
    q, k, v = (torch.randn(n, m, D, generator=gen) for n, m in ((H, t), (K, Tc), (K, Tc)))
    out, lse, col = attend_chunk(q, k, v, scale, max_block=max_block)
    G = H // K
    kk, vv = k.double().repeat_interleave(G, 0), v.double().repeat_interleave(G, 0)
    s = q.double() @ kk.transpose(1, 2) * scale
    s[:, torch.arange(Tc)[None, :] > (Tc - t + torch.arange(t))[:, None]] = float("-inf")
    a = torch.softmax(s, dim=-1)
    assert scaled_diff(out.numpy(), (a @ vv).numpy()) < 1e-6
    assert scaled_diff(lse.numpy(), torch.logsumexp(s, -1).numpy()) < 1e-6
    assert scaled_diff(col.numpy(), a.sum(1).numpy()) < 1e-6


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu(tmp_path):
    """The same model recorded on the GPU and on the CPU: every dataset within TOL."""
    from test_record import agreement, archs
    model = tiny_model(*archs()["qwen3"])
    cpu, gpu = str(tmp_path / "cpu.h5"), str(tmp_path / "gpu.h5")
    with kvtrace.record(model, cpu, chunk=16, logits=True):
        model(torch.tensor([IDS]))
    model = model.cuda()
    with kvtrace.record(model, gpu, chunk=16, logits=True):
        model(torch.tensor([IDS], device="cuda"))
    worst = agreement(gpu, cpu)
    print("\n# qwen3 cuda vs cpu: %s" % " ".join("%s %.1e" % kv for kv in worst.items()))
    assert all(e <= TOL for e in worst.values()), worst
