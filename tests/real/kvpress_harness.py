"""NVIDIA kvpress's own scoring code run on a kvtrace trace (tests/real/test_kvpress.py).

kvpress is taken from PyPI's wheel (KVPRESS_VERSION, its sha256 checked), unpacked once into the user cache;
its press modules are imported without running the package's __init__ (which pulls its pipeline's
dependencies: datasets, peft, ...), so only torch and transformers are needed. Nothing of kvtrace's C code
is used here: a press sees a stub attention layer built from the trace alone.

The stub: hidden_states are the trace's queries turned back before RoPE (each position's rotation undone in
float64), and q_proj is the identity, so get_prerope_query_states returns them; position_embeddings and
rotary_emb give the trace's own RoPE (rope_theta, rope_freq_factors) in the rotate-half layout transformers
uses. A trace in the interleaved layout (llama GGUF: pair i is elements 2i, 2i+1) has its queries and keys
permuted to rotate-half order (pair i is i, i + D/2), which changes no dot product. o_proj's weight is the
trace's /wo; k_proj gives the trace's keys turned back before RoPE (Compactor's leverage). attentions (for
ObservedAttention) is the causal softmax of the trace's queries and keys."""
import hashlib
import importlib
import math
import os
import subprocess
import sys
import tempfile
import types
import zipfile

import numpy as np
import torch

KVPRESS_VERSION = "0.5.5"
KVPRESS_WHEEL = "kvpress-%s-py3-none-any.whl" % KVPRESS_VERSION
KVPRESS_SHA256 = "900bdb175b546f19c844a8d40e9e7bc6bff7f302689821263d376e31ff62f07e"


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kvtrace", "kvpress-" + KVPRESS_VERSION)


def fetch():
    """The unpacked wheel's directory (fetched with pip download --no-deps and checked once)."""
    d = cache_dir()
    if os.path.isfile(os.path.join(d, "kvpress", "presses", "scorer_press.py")):
        return d
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "kvpress==" +
                            KVPRESS_VERSION, "-d", tmp], capture_output=True, text=True)
        wheel = os.path.join(tmp, KVPRESS_WHEEL)
        if r.returncode != 0 or not os.path.isfile(wheel):
            raise RuntimeError("cannot fetch %s from PyPI (pip download --no-deps kvpress==%s): %s; put the wheel's "
                               "contents in %s" % (KVPRESS_WHEEL, KVPRESS_VERSION, r.stderr.strip()[-200:], d))
        sha = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
        if sha != KVPRESS_SHA256:
            raise RuntimeError("%s: sha256 %s, expected %s" % (KVPRESS_WHEEL, sha, KVPRESS_SHA256))
        os.makedirs(d + ".part", exist_ok=True)
        with zipfile.ZipFile(wheel) as z:
            z.extractall(d + ".part")
        os.replace(d + ".part", d)
    return d


def presses():
    """kvpress.presses as a namespace of the modules the comparison needs."""
    root = fetch()
    for name, path in (("kvpress", os.path.join(root, "kvpress")),
                       ("kvpress.presses", os.path.join(root, "kvpress", "presses"))):
        if name not in sys.modules:
            m = types.ModuleType(name)
            m.__path__ = [path]
            sys.modules[name] = m
    mods = {}
    for m in ("knorm_press", "keydiff_press", "streaming_llm_press", "cur_press", "cap_press",
              "observed_attention_press", "snapkv_press", "tova_press", "adakv_press", "criticalkv_press",
              "lagkv_press", "expected_attention_press", "compactor_press"):
        mods[m] = importlib.import_module("kvpress.presses." + m)
    return types.SimpleNamespace(**mods)


class Trace:
    """A kvtrace trace's arrays in float64, queries and keys in rotate-half layout."""

    def __init__(self, path):
        import h5py
        with h5py.File(path, "r") as f:
            self.keys = f["keys"][:].astype(np.float64)          # [L, K, T, D]
            self.values = f["values"][:].astype(np.float64)
            self.queries = f["queries"][:].astype(np.float64)    # [L, H, T, D]
            self.wo = f["wo"][:].astype(np.float64) if "wo" in f else None   # [L, dim, H*D]
            a = f.attrs
            self.theta = float(a["rope_theta"])
            style = a["rope_style"]
            self.style = style.decode() if isinstance(style, bytes) else str(style)
            ff = a["rope_freq_factors"] if "rope_freq_factors" in a else (
                f["rope_freq_factors"][:] if "rope_freq_factors" in f else None)
        self.L, self.K, self.T, self.D = self.keys.shape
        self.H = self.queries.shape[1]
        D = self.D
        if self.style == "interleaved":
            perm = np.concatenate([np.arange(0, D, 2), np.arange(1, D, 2)])
            self.keys, self.queries = self.keys[..., perm], self.queries[..., perm]
        inv = self.theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)
        if ff is not None:
            inv = inv / np.asarray(ff, dtype=np.float64)
        self.inv_freq = inv
        cos, sin = self.rope(np.arange(self.T))
        # pre-RoPE queries: q = q' cos + rot(q') sin, so q' = q cos - rot(q) sin (rot a quarter turn)
        self.pre_queries = self.queries * cos - rotate_half_np(self.queries) * sin
        self.pre_keys = self.keys * cos - rotate_half_np(self.keys) * sin

    def rope(self, positions):
        ang = np.outer(np.asarray(positions, dtype=np.float64), self.inv_freq)
        ang = np.concatenate([ang, ang], axis=-1)
        return np.cos(ang), np.sin(ang)

    def attentions(self, layer):
        """[1, H, T, T] causal softmax of q·k/sqrt(D), float64."""
        q = self.queries[layer]
        k = np.repeat(self.keys[layer], self.H // self.K, axis=0)
        s = np.einsum("htd,hsd->hts", q, k) / math.sqrt(self.D)
        s = s + np.triu(np.full((self.T, self.T), -np.inf), 1)
        s = np.exp(s - s.max(-1, keepdims=True))
        return torch.from_numpy(s / s.sum(-1, keepdims=True))[None]


def rotate_half_np(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


class Rotary:
    def __init__(self, tr, dtype):
        self.tr, self.dtype = tr, dtype

    def __call__(self, x, position_ids):
        cos, sin = self.tr.rope(position_ids[0].cpu().numpy())
        return (torch.from_numpy(cos)[None].to(self.dtype), torch.from_numpy(sin)[None].to(self.dtype))


class Identity(torch.nn.Module):
    def forward(self, x):
        return x


class KeyProj(torch.nn.Module):
    """k_proj for LeverageScorePress (inside CompactorPress): the trace's pre-RoPE keys of the positions the
    hidden states stand for, the whole prompt or Compactor's slice after its first 8 (a stub cannot project
    the queries it is given into keys)."""

    def __init__(self, pre_keys, first=8):
        super().__init__()
        self.pre_keys, self.first = pre_keys, first      # [T, K*D]

    def forward(self, x):
        s = x.shape[1]
        a = 0 if s == self.pre_keys.shape[0] else self.first
        return self.pre_keys[a:a + s][None].to(x.dtype)


class StubLayer(torch.nn.Module):
    """What a press reads of a transformers attention layer, made from the trace's layer `layer`."""

    def __init__(self, tr, layer, dtype):
        super().__init__()
        hidden = tr.wo.shape[1] if tr.wo is not None else tr.H * tr.D
        self.config = types.SimpleNamespace(num_attention_heads=tr.H, num_key_value_heads=tr.K, head_dim=tr.D,
                                            hidden_size=hidden, _attn_implementation="sdpa")
        self.head_dim, self.layer_idx = tr.D, layer
        self.num_key_value_groups = tr.H // tr.K
        self.q_proj = Identity()
        self.k_proj = KeyProj(torch.from_numpy(tr.pre_keys[layer].transpose(1, 0, 2).reshape(tr.T, tr.K * tr.D)))
        if tr.wo is not None:
            self.o_proj = types.SimpleNamespace(weight=torch.from_numpy(tr.wo[layer]).to(dtype))
        self.rotary_emb = Rotary(tr, dtype)


def layer_inputs(tr, layer, dtype):
    """(module, hidden_states, keys, values, kwargs) of one layer as a press's hook receives them."""
    m = StubLayer(tr, layer, dtype)
    hidden = torch.from_numpy(tr.pre_queries[layer].transpose(1, 0, 2).reshape(1, tr.T, tr.H * tr.D)).to(dtype)
    keys = torch.from_numpy(tr.keys[layer])[None].to(dtype)
    values = torch.from_numpy(tr.values[layer])[None].to(dtype)
    cos, sin = tr.rope(np.arange(tr.T))
    kwargs = {"position_embeddings": (torch.from_numpy(cos)[None].to(dtype), torch.from_numpy(sin)[None].to(dtype))}
    return m, hidden, keys, values, kwargs


def ratio_for(n, T):
    """A compression ratio whose kept count int(T (1 - r)) is n, and whose half-budget floor(n / 2) is too."""
    return 1.0 - (n + 1e-6) / T


def kept_sets_at(tr, make_press, budgets, per_budget=False, **kw):
    """{n: kept_sets(...) at n} for each budget: a press whose scores do not depend on the compression ratio
    (per_budget False) scores each layer once, and each budget takes its top n."""
    if per_budget or kw.get("adakv"):
        return {n: kept_sets(tr, make_press, n, **kw) for n in budgets}
    _, scores = kept_sets(tr, make_press, max(budgets), **kw)
    out = {}
    for n in budgets:
        kept = {}
        for layer, s in enumerate(scores):
            top = torch.from_numpy(s).topk(n, dim=-1).indices
            for h in range(tr.K):
                kept[(layer, h)] = set(top[h].tolist())
        out[n] = (kept, scores)
    return out


def kept_sets(tr, make_press, n, dtype=torch.float64, attentions=False, adakv=False):
    """{(layer, kv head): set of kept positions} under kvpress's press at budget n (one-shot prefill), and the
    scores [L][K][T] it ranked by (for the tie checks); a head-wise press (adakv) keeps n per head on average."""
    kept, scores = {}, []
    for layer in range(tr.L):
        press = make_press()
        press.compression_ratio = ratio_for(n, tr.T)
        m, hidden, keys, values, kwargs = layer_inputs(tr, layer, dtype)
        att = tr.attentions(layer).to(dtype) if attentions else None
        if adakv:
            press.compress(m, hidden, keys, values, att, kwargs)
            _, heads, seqs = m.masked_key_indices
            pruned = {}
            for h, s in zip(heads.tolist(), seqs.tolist()):
                pruned.setdefault(h, set()).add(s)
            for h in range(tr.K):
                kept[(layer, h)] = set(range(tr.T)) - pruned.get(h, set())
            scores.append(None)
            continue
        s = press.score(m, hidden, keys, values, att, kwargs)[0]      # [K, T]
        top = s.topk(n, dim=-1).indices
        for h in range(tr.K):
            kept[(layer, h)] = set(top[h].tolist())
        scores.append(s.double().numpy())
    return kept, scores


def jaccard(a, b):
    """Mean over (layer, kv head) of |a ∩ b| / |a ∪ b|."""
    return float(np.mean([len(a[k] & b[k]) / len(a[k] | b[k]) for k in a]))


def valid_top(kept, scores, n):
    """Whether every set of `kept` is a top-n set of kvpress's scores of its head (a kept score is never below
    a dropped one): the two sides agree up to the order of exact ties."""
    for (layer, h), s in kept.items():
        sc = scores[layer][h]
        mask = np.zeros(len(sc), bool)
        mask[list(s)] = True
        if len(s) != n or (mask.any() and (~mask).any() and sc[mask].min() < sc[~mask].max()):
            return False
    return True
