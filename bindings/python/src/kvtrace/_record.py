"""kvtrace.record: a trace (docs/trace.md) of a transformers causal LM's run, recorded as it runs.

    with kvtrace.record(model, "t.h5", chunk=128) as rec:
        model(input_ids)                      # or model.generate(input_ids, max_new_tokens=..., do_sample=False)

For the block's duration the model's attention goes through a function registered with transformers'
AttentionInterface ("kvtrace_record") and `model.forward` / `model.generate` are wrapped; both are
restored on exit, also when the block raises. What happens inside:

- A forward of more than B = `chunk` new tokens runs as successive forwards of at most B tokens
  through the model's KV cache (a DynamicCache when the caller passed none), positions continuing;
  the logits come back as the caller asked (all, `logits_to_keep`'s last rows or indices). So
  `generate` prefills in chunks of B and then decodes one token a step; the token generate picks
  last (which generate itself never runs through the model) is run once more on return, so that the
  trace holds T = prompt + generated positions, as `kvtrace capture --generate` does (generate's
  cache, if it returns one, then holds that position too).
- The attention function computes the attention itself, exactly and blockwise (_record_attn.py:
  at most 2^24 scores at a time, never T x T), returns it to the model, and streams to the file the
  new rows of the cache's keys and values, the queries, the attention output and log-sum-exp rows;
  the column sums accumulate in float64 on the model's device and are written at the end.
- The file is written under PATH.tmpPID and renamed onto PATH when the block ends normally; when
  the block raises (or recording is refused), the temporary file is removed and the error re-raised.

What is recorded, per dataset: /tokens, /keys, /values always; /queries, /attention/out,
/attention/lse, /attention/max with "queries" in `record`; /attention/colsum with colsum=True; /logprobs always;
/logits with logits=True; /prompt_text with text=; /spans with spans= ({name: (start, end)}).

Query scaling. The trace's scores are q.k / sqrt(D). A model whose score scale s is not 1/sqrt(D)
(granite's attention_multiplier: module.scaling, or the attention call's `scaling`) gets its queries
recorded as q * s * sqrt(D), so that the recorded q.k / sqrt(D) is the model's score; keys and
values are recorded as cached.

Head order. The trace's query head h reads kv head h // (H/K) (consecutive grouping). transformers'
attention for llama, mistral, qwen2, qwen3, phi3 and granite expands the cache with repeat_kv, which
gives query head h the kv head h // num_key_value_groups: the same order, so heads are recorded in
the model's order. phi3's fused qkv_proj splits into H query heads, then K key heads, then K value
heads, each head's D columns consecutive, before the same repeat_kv: the same order again.
RoPE is transformers' rotate-half order (rope_style "neox"); a llama GGUF captured by `kvtrace
capture` is in the interleaved order, its row r being concat(r[0::2], r[1::2]) here.

Refused, each with a ValueError of one line and no file left behind: an architecture other than
llama, mistral, qwen2, qwen3, phi3, granite (the trace schema's); attention soft-capping; partial
rotary embeddings; batch size other than 1; a layer whose sliding window is shorter than the tokens
recorded (checked as tokens arrive); a model whose layers do not all call the registered attention
function (checked after the first forward); inputs_embeds, labels, a padded attention mask, and a
call that does not continue the recorded sequence's cache.
"""
import inspect
import math
import os
import sys

import numpy as np
import torch

from ._record_attn import attend_chunk
from ._record_writer import SCHEMA, TraceFile, check_spans

ATTN_NAME = "kvtrace_record"
ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "granite")
_ACTIVE = [None]   # the Recorder whose block is running (one at a time)
_REGISTERED = [False]


def record(model, path, record=("keys", "values", "queries"), colsum=True, chunk=128, logits=False, dtype="f32",
           text=None, spans=None, model_id=None):
    """A context manager recording the model's run inside it as the trace PATH (module docstring)."""
    return Recorder(model, path, record=record, colsum=colsum, chunk=chunk, logits=logits, dtype=dtype, text=text,
                    spans=spans, model_id=model_id)


def _version():
    try:
        from . import __version__
        return str(__version__)
    except ImportError:
        return "1.0.0"


def _attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
               softcap=None, **kw):
    """The registered attention function: the active recorder's, else transformers' sdpa."""
    rec = _ACTIVE[0]
    if rec is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      sliding_window=sliding_window, softcap=softcap, **kw)
    return rec._attend(module, query, key, value, dropout, scaling, sliding_window, softcap)


def _register():
    if not _REGISTERED[0]:
        from transformers import AttentionInterface
        AttentionInterface.register(ATTN_NAME, _attention)
        _REGISTERED[0] = True


def _rope_theta(cfg):
    rp = getattr(cfg, "rope_parameters", None) or {}
    theta = rp.get("rope_theta") if isinstance(rp, dict) else None
    if theta is None:
        theta = getattr(cfg, "rope_theta", None)
    return float(theta) if theta is not None else 10000.0


def _rope_parameters(cfg):
    rp = getattr(cfg, "rope_parameters", None)
    if not isinstance(rp, dict):
        rp = getattr(cfg, "rope_scaling", None)
    return dict(rp) if isinstance(rp, dict) else {}


def _rope_scaling_text(cfg):
    """The rope_scaling attribute: the C tool's text for llama3, else TYPE key=value... (sorted)."""
    rp = _rope_parameters(cfg)
    kind = rp.get("rope_type") or rp.get("type") or "default"
    num = lambda x: "%g" % x if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)  # noqa: E731
    if kind == "llama3":
        return "llama3 factor=%s low_freq_factor=%s high_freq_factor=%s original_max_position_embeddings=%s" % tuple(
            num(rp.get(k)) for k in ("factor", "low_freq_factor", "high_freq_factor",
                                     "original_max_position_embeddings"))
    if kind == "default":
        return "inv_freq"
    rest = " ".join("%s=%s" % (k, num(v)) for k, v in sorted(rp.items())
                    if k not in ("rope_type", "type", "rope_theta", "partial_rotary_factor")
                    and isinstance(v, (int, float, str)))
    return (kind + " " + rest).strip()


class Recorder:
    """The context manager `kvtrace.record` returns; see the module docstring."""

    def __init__(self, model, path, record=("keys", "values", "queries"), colsum=True, chunk=128, logits=False,
                 dtype="f32", text=None, spans=None, model_id=None):
        cfg = getattr(model, "config", None)
        if cfg is None or not hasattr(model, "forward"):
            raise ValueError("kvtrace.record: %s is not a transformers model (no config)" % type(model).__name__)
        wanted = set(record)
        unknown = wanted - {"keys", "values", "queries"}
        if unknown:
            raise ValueError("kvtrace.record: record=%r: unknown %s (keys, values, queries)" % (
                tuple(record), ", ".join(sorted(unknown))))
        if dtype not in ("f32", "f16"):
            raise ValueError("kvtrace.record: dtype=%r: f32 or f16" % (dtype,))
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise ValueError("kvtrace.record: chunk=%r: an integer >= 1" % (chunk,))
        if text is not None and (not isinstance(text, str) or "\0" in text):
            raise ValueError("kvtrace.record: text must be a str without NUL characters")
        if spans:
            check_spans(dict(spans), 1 << 62)   # names and ranges now; the prompt's end at the end
        self._check_model(cfg)
        self.model, self.cfg, self.path = model, cfg, os.fspath(path)
        self.queries, self.colsum, self.B, self.logits, self.dtype = "queries" in wanted, bool(colsum), chunk, \
            bool(logits), dtype
        self.text, self.spans, self.model_id = text, dict(spans) if spans else None, model_id
        self.L = int(cfg.num_hidden_layers)
        self.H = int(cfg.num_attention_heads)
        self.K = int(getattr(cfg, "num_key_value_heads", None) or self.H)
        self.D = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.H)
        if self.H % self.K:
            raise ValueError("kvtrace.record: %d query heads are not a multiple of %d kv heads" % (self.H, self.K))
        out_emb = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        self.V = int(out_emb.weight.shape[0]) if out_emb is not None else int(cfg.vocab_size)
        self.rotary = next((m for m in model.modules() if isinstance(getattr(m, "inv_freq", None), torch.Tensor)),
                           None)
        if self.rotary is None:
            raise ValueError("kvtrace.record: the model has no rotary embedding (inv_freq): kvtrace traces are RoPE "
                             "models'")
        if self.rotary.inv_freq.numel() * 2 != self.D:
            raise ValueError("kvtrace.record: the rotary embedding turns %d of %d dimensions (partial rotary "
                             "embeddings): the trace format rotates every pair" % (2 * self.rotary.inv_freq.numel(),
                                                                                   self.D))
        self.windows = self._windows(model, cfg)
        self.tf = None

    @staticmethod
    def _check_model(cfg):
        for name in ("attn_logit_softcapping", "final_logit_softcapping"):
            if getattr(cfg, name, None) is not None:
                raise ValueError("kvtrace.record: %s = %s: attention soft-capping is not in the trace format (scores "
                                 "are exactly q.k/sqrt(D))" % (name, getattr(cfg, name)))
        rp = _rope_parameters(cfg)
        prf = rp.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", None))
        if prf is not None and float(prf) < 1:
            raise ValueError("kvtrace.record: partial_rotary_factor = %g: partial rotary embeddings are not in the "
                             "trace format (every pair rotates)" % float(prf))
        arch = getattr(cfg, "model_type", None)
        if arch not in ARCHITECTURES or getattr(cfg, "is_encoder_decoder", False):
            raise ValueError("kvtrace.record: model_type %r is not supported: the trace schema's architectures are %s"
                             % (arch, ", ".join(ARCHITECTURES)))

    @staticmethod
    def _windows(model, cfg):
        """layer -> its sliding window (None: full attention)."""
        out = {}
        for m in model.modules():
            idx = getattr(m, "layer_idx", None)
            if isinstance(idx, int) and (hasattr(m, "q_proj") or hasattr(m, "qkv_proj")):
                out[idx] = getattr(m, "sliding_window") if hasattr(m, "sliding_window") else \
                    getattr(cfg, "sliding_window", None)
        return out

    # --- the block ---------------------------------------------------------------------------------------------

    def __enter__(self):
        if _ACTIVE[0] is not None:
            raise ValueError("kvtrace.record: another recording is running (one at a time)")
        _register()
        self.tf = TraceFile(self.path, self.L, self.H, self.K, self.D, storage=self.dtype, queries=self.queries,
                            logits=self.logits, V=self.V)
        self.pos, self.prompt_len, self.tokens, self.seen = 0, None, [], set()
        self.pending = None            # the log-softmax row of the last position, until its next token arrives
        self.cache = None
        self.col = {}                  # layer -> [H, capacity] float64 on the layer's device
        self.inv_freq = self.rotary.inv_freq.detach().double().cpu().clone()
        self.chunk_sizes = []
        try:
            self._install()
        except BaseException:
            self._uninstall()
            self.tf.discard()
            raise
        _ACTIVE[0] = self
        return self

    def __exit__(self, exc_type, exc, tb):
        _ACTIVE[0] = None
        self._uninstall()
        if exc_type is not None:
            self.tf.discard()
            return False
        try:
            self._finish()
        except BaseException:
            self.tf.discard()
            raise
        return False

    def _install(self):
        m = self.model
        self.saved_attrs = {k: m.__dict__[k] for k in ("forward", "generate") if k in m.__dict__}
        self.saved_impl = []
        seen = set()
        for mod in m.modules():
            c = getattr(mod, "config", None)
            if c is not None and id(c) not in seen and hasattr(c, "_attn_implementation_internal"):
                seen.add(id(c))
                self.saved_impl.append((c, c._attn_implementation_internal))
                c._attn_implementation_internal = ATTN_NAME
        self.orig_forward, self.orig_generate = m.forward, m.generate
        self.forward_sig = inspect.signature(self.orig_forward)
        self.forward_params = set(self.forward_sig.parameters)
        wrapped_f = lambda *a, **kw: self._forward(*a, **kw)  # noqa: E731
        wrapped_f.__signature__ = self.forward_sig   # generate reads it (logits_to_keep, position_ids, ...)
        wrapped_g = lambda *a, **kw: self._generate(*a, **kw)  # noqa: E731
        wrapped_g.__signature__ = inspect.signature(self.orig_generate)
        m.forward, m.generate = wrapped_f, wrapped_g

    def _uninstall(self):
        m = self.model
        for c, impl in self.saved_impl:
            c._attn_implementation_internal = impl
        for k in ("forward", "generate"):
            if k in self.saved_attrs:
                setattr(m, k, self.saved_attrs[k])
            else:
                m.__dict__.pop(k, None)

    # --- forward, chunked ----------------------------------------------------------------------------------------

    def _forward(self, *args, **kwargs):
        a = self.forward_sig.bind(*args, **kwargs).arguments
        for name, p in self.forward_sig.parameters.items():
            if p.kind == inspect.Parameter.VAR_KEYWORD and name in a:
                a.update(a.pop(name))
        ids = a.pop("input_ids", None)
        if a.pop("inputs_embeds", None) is not None or ids is None:
            raise ValueError("kvtrace.record: call the model with input_ids (they are the trace's /tokens), not "
                             "inputs_embeds")
        if a.pop("labels", None) is not None:
            raise ValueError("kvtrace.record: labels are not supported inside record (compute the loss from the "
                             "returned logits)")
        if ids.dim() != 2 or ids.shape[0] != 1:
            raise ValueError("kvtrace.record: batch size must be 1 (one sequence per trace), got input_ids of shape "
                             "%s" % (tuple(ids.shape),))
        mask = a.pop("attention_mask", None)
        if isinstance(mask, torch.Tensor) and mask.dim() == 2 and not bool((mask != 0).all()):
            raise ValueError("kvtrace.record: the attention mask masks positions (padding): a trace is one unpadded "
                             "sequence")
        for k in ("position_ids", "cache_position", "return_dict"):
            a.pop(k, None)
        return_dict = kwargs.get("return_dict", True)
        cache, use_cache = a.pop("past_key_values", None), a.pop("use_cache", None)
        keep = a.pop("logits_to_keep", 0)
        if cache is None:
            if self.pos:
                raise ValueError("kvtrace.record: this call starts a new sequence (no past_key_values) after %d "
                                 "positions were recorded: pass the returned past_key_values to continue, or "
                                 "record each sequence in its own block" % self.pos)
            from transformers import DynamicCache
            cache = DynamicCache(config=self.cfg)
        past = cache.get_seq_length()
        if past != self.pos:
            raise ValueError("kvtrace.record: the cache passed holds %d positions, the recording %d: a trace is one "
                             "sequence through one cache" % (past, self.pos))
        n = ids.shape[1]
        if n == 0:
            raise ValueError("kvtrace.record: input_ids holds no tokens")
        self._check_windows(self.pos + n)
        if self.prompt_len is None:
            self.prompt_len = n
        need = self._rows_to_keep(keep, n)
        kept = None
        with torch.no_grad():
            for s in range(0, n, self.B):
                e = min(n, s + self.B)
                piece = ids[:, s:e]
                pos = torch.arange(self.pos, self.pos + (e - s), device=ids.device)
                extra = {"logits_to_keep": 0} if "logits_to_keep" in self.forward_params else {}
                self._begin_chunk(piece)
                out = self.orig_forward(input_ids=piece, past_key_values=cache, use_cache=True,
                                        position_ids=pos.unsqueeze(0), cache_position=pos, return_dict=True,
                                        **extra, **a)
                lg = out.logits[0]
                self._end_chunk(piece[0], lg)
                if kept is None:
                    need = need.to(lg.device)
                    kept = torch.empty((need.numel(), lg.shape[-1]), dtype=lg.dtype, device=lg.device)
                sel = (need >= s) & (need < e)
                if bool(sel.any()):
                    kept[sel] = lg[need[sel] - s]
        self.cache = cache
        from transformers.modeling_outputs import CausalLMOutputWithPast
        result = CausalLMOutputWithPast(logits=kept.unsqueeze(0),
                                        past_key_values=cache if use_cache is not False else None)
        return result if return_dict is not False else result.to_tuple()

    @staticmethod
    def _rows_to_keep(keep, n):
        if isinstance(keep, torch.Tensor):
            idx = keep.flatten().long().cpu()
            return torch.where(idx < 0, idx + n, idx)
        k = int(keep or 0)
        return torch.arange(n - k if 0 < k < n else 0, n)

    def _check_windows(self, T):
        for layer, w in sorted(self.windows.items()):
            if w is not None and w < T:
                raise ValueError("kvtrace.record: layer %d has a sliding window of %d tokens, shorter than the %d "
                                 "tokens recorded: a trace is full causal attention" % (layer, w, T))

    def _begin_chunk(self, piece):
        t = piece.shape[1]
        self.chunk_sizes.append(t)
        self.tf.grow(self.pos + t)
        toks = piece[0].detach().cpu().numpy().astype(np.int32)
        self.tf.write("tokens", slice(self.pos, self.pos + t), toks)
        self.tokens.extend(int(x) for x in toks)
        self.seen = set()

    def _end_chunk(self, ids, lg):
        missing = sorted(set(range(self.L)) - self.seen)
        if missing:
            raise ValueError("kvtrace.record: layers %s did not call the registered attention function (%s): kvtrace "
                             "records models whose attention goes through transformers' AttentionInterface"
                             % (", ".join(map(str, missing)), ATTN_NAME))
        t, p0 = ids.shape[0], self.pos
        lp = torch.log_softmax(lg.detach().double(), dim=-1)
        ids_d = ids.to(lp.device).long()
        if self.pending is not None:
            self.tf.write("logprobs", slice(p0 - 1, p0), self.pending[ids_d[0]].reshape(1).cpu().numpy()
                          .astype(np.float32))
        if t > 1:
            vals = lp[torch.arange(t - 1, device=lp.device), ids_d[1:]].cpu().numpy().astype(np.float32)
            self.tf.write("logprobs", slice(p0, p0 + t - 1), vals)
        self.pending = lp[t - 1].clone()
        if self.logits:
            self.tf.write("logits", slice(p0, p0 + t), lg.detach().float().cpu().numpy())
        self.pos += t

    def _generate(self, *args, **kwargs):
        out = self.orig_generate(*args, **kwargs)
        seq = out if isinstance(out, torch.Tensor) else out.sequences
        if seq.dim() == 2 and seq.shape[0] == 1 and seq.shape[1] > self.pos and self.cache is not None:
            head = seq[0, :self.pos].tolist()
            if head == self.tokens:   # the token generate picked last, never run through the model: run it
                self._forward(input_ids=seq[:, self.pos:], past_key_values=self.cache, use_cache=True)
        return out

    # --- attention -----------------------------------------------------------------------------------------------

    def _attend(self, module, query, key, value, dropout, scaling, sliding_window, softcap):
        layer = module.layer_idx
        if softcap is not None:
            raise ValueError("kvtrace.record: layer %d soft-caps its attention scores (softcap %s): not in the trace "
                             "format" % (layer, softcap))
        if dropout and module.training:
            raise ValueError("kvtrace.record: attention dropout is on (training mode): call model.eval()")
        if query.shape[0] != 1:
            raise ValueError("kvtrace.record: batch size must be 1 (one sequence per trace), got %d"
                             % query.shape[0])
        H, t, D = query.shape[1:]
        K, Tc = key.shape[1], key.shape[2]
        if (H, K, D) != (self.H, self.K, self.D):
            raise ValueError("kvtrace.record: layer %d has %d query heads, %d kv heads of %d, the config %d, %d, %d"
                             % (layer, H, K, D, self.H, self.K, self.D))
        p0 = Tc - t
        if p0 != self.pos:
            raise ValueError("kvtrace.record: layer %d's cache holds %d positions before this chunk, the recording "
                             "%d: a trace is one sequence through one cache" % (layer, p0, self.pos))
        if sliding_window is not None and sliding_window < Tc:
            raise ValueError("kvtrace.record: layer %d has a sliding window of %d tokens, shorter than the %d tokens "
                             "recorded: a trace is full causal attention" % (layer, sliding_window, Tc))
        scale = float(scaling) if scaling is not None else float(getattr(module, "scaling", D ** -0.5))
        with torch.no_grad():
            out, lse, col, mx = attend_chunk(query[0].detach(), key[0].detach(), value[0].detach(), scale,
                                             colsum=self.colsum, row_max=True)
            self._store(layer, p0, Tc, query[0].detach(), key[0].detach(), value[0].detach(), scale, out, lse, col,
                        mx)
        self.seen.add(layer)
        return out.to(query.dtype).transpose(0, 1).unsqueeze(0).contiguous(), None

    def _store(self, layer, p0, Tc, q, k, v, scale, out, lse, col, mx):
        st = self.tf.store
        rows = (layer, slice(None), slice(p0, Tc))
        self.tf.write("keys", rows, k[:, p0:Tc].float().cpu().numpy().astype(st))
        self.tf.write("values", rows, v[:, p0:Tc].float().cpu().numpy().astype(st))
        if self.queries:
            fold = scale * math.sqrt(self.D)
            qr = q.float() if abs(fold - 1.0) < 1e-12 else q.float() * fold
            self.tf.write("queries", rows, qr.cpu().numpy().astype(st))
            self.tf.write("attention/out", rows, out.cpu().numpy())
            self.tf.write("attention/lse", rows, lse.float().cpu().numpy())
            self.tf.write("attention/max", rows, mx.cpu().numpy())
        if col is not None:
            acc = self.col.get(layer)
            if acc is None or acc.shape[1] < Tc:
                cap = max(Tc, 2 * (acc.shape[1] if acc is not None else 0), 256)
                grown = torch.zeros((self.H, cap), dtype=torch.float64, device=col.device)
                if acc is not None:
                    grown[:, :acc.shape[1]] = acc
                acc = self.col[layer] = grown
            acc[:, :Tc] += col

    # --- the end -------------------------------------------------------------------------------------------------

    def _finish(self):
        if self.pos == 0:
            raise ValueError("kvtrace.record: the model was not called inside the block: nothing to record")
        now = self.rotary.inv_freq.detach().double().cpu()
        if now.shape != self.inv_freq.shape or not torch.equal(now, self.inv_freq):
            raise ValueError("kvtrace.record: the rotary frequencies changed during the run (dynamic RoPE scaling): "
                             "the trace format has one set of frequencies")
        T = self.pos
        if self.colsum:
            self.tf.write_colsum(lambda layer: self.col[layer][:, :T].cpu().numpy())
        if self.text is not None:
            self.tf.write_text(self.text)
        if self.spans:
            self.tf.write_spans(*check_spans(self.spans, self.prompt_len))
        self.tf.write_attrs(self._root_attrs(T))
        self.tf.write_provenance(self._provenance())
        self.tf.commit()

    def _model_name(self):
        if self.model_id:
            return str(self.model_id)
        p = str(getattr(self.cfg, "_name_or_path", "") or "")
        if p and os.path.isfile(os.path.join(p, "config.json")):   # a Hugging Face directory: its name, as capture
            return os.path.basename(os.path.normpath(p))
        return p or type(self.model).__name__

    def _root_attrs(self, T):
        theta = _rope_theta(self.cfg)
        D = self.D
        base = np.power(theta, -np.arange(0, D, 2, dtype=np.float64) / D)
        inv = self.inv_freq.numpy()
        scaled = bool(np.max(np.abs(inv / base - 1.0)) > 1e-5)
        i64 = np.int64
        return {
            "kvtrace_schema": np.array(SCHEMA, dtype=i64),
            "creator": "kvtrace-python %s record" % _version(),
            "model_name": self._model_name(),
            "architecture": self.cfg.model_type,
            "n_layers": i64(self.L), "n_heads": i64(self.H), "n_kv_heads": i64(self.K), "head_dim": i64(D),
            "n_tokens": i64(T), "prompt_len": i64(self.prompt_len), "vocab_size": i64(self.V),
            "rope_theta": np.float64(theta), "rope_style": "neox",
            "rope_scaling": _rope_scaling_text(self.cfg) if scaled else None,
            "rope_freq_factors": (base / inv).astype(np.float64) if scaled else None,
            "capture_chunk": i64(self.B), "capture_mode": "full", "storage_dtype": self.dtype,
        }

    def _provenance(self):
        import transformers
        p = next(self.model.parameters(), None)
        opts = "record=%r, colsum=%r, chunk=%d, logits=%r, dtype=%r" % (
            tuple(r for r in ("keys", "values", "queries") if r != "queries" or self.queries), self.colsum, self.B,
            self.logits, self.dtype)
        if self.text is not None:
            opts += ", text=<%d characters>" % len(self.text)
        if self.spans:
            opts += ", spans=%r" % (self.spans,)
        if self.model_id:
            opts += ", model_id=%r" % (self.model_id,)
        rec = {
            "kvtrace_provenance": 1,
            "verb": "record",
            "command": "kvtrace.record(model, %r, %s)" % (self.path, opts),
            "kvtrace_version": _version(),
        }
        sde = os.environ.get("SOURCE_DATE_EPOCH", "")
        if sde:
            import datetime
            t = datetime.datetime.fromtimestamp(int(sde), datetime.timezone.utc)
            rec["time"], rec["time_source"] = t.strftime("%Y-%m-%dT%H:%M:%SZ"), "SOURCE_DATE_EPOCH"
        rec.update({
            "model": self.model_id or str(getattr(self.cfg, "_name_or_path", "") or "") or type(self.model).__name__,
            "prompt": "text" if self.text is not None else "ids",
            "model_class": type(self.model).__name__,
            "model_dtype": str(p.dtype).replace("torch.", "") if p is not None else "",
            "device": str(p.device) if p is not None else "",
            "torch_version": torch.__version__,
            "transformers_version": transformers.__version__,
            "python_version": sys.version.split()[0],
            "chunk": self.B,
        })
        return rec
