#!/usr/bin/env python3
"""Independent PyTorch reference of Qwen3ForCausalLM training, the ground truth for twinkle.

Run with the project environment's python (.venv, scripts/setup). Written as an independent model
when transformers could not be installed; tests/reference/hf_oracle.py now checks twinkle against
transformers itself, and this reference stays for what transformers has no knob for (layouts).  The model
is written here from the facts of HF transformers' models/qwen3/modeling_qwen3.py and
loss/loss_utils.py (ForCausalLMLoss); no code is copied:

  * Qwen3RMSNorm: x32 = x.float(); y = x32 * rsqrt(mean(x32^2, -1) + eps); weight * y.to(x.dtype)
    (eps inside the rsqrt; cast back to the input dtype BEFORE the weight multiply).
  * Attention: q = q_norm(q_proj(x) viewed [.., H, D]), k = k_norm(k_proj(x) ...) - RMSNorm over
    head_dim per head, BEFORE RoPE; v = v_proj(x).  q/k/v AND o_proj carry a bias when
    config.attention_bias (HF Qwen3Attention passes bias=config.attention_bias to all four;
    Qwen2 differs: o_proj never has a bias there).
  * RoPE: inv_freq = 1 / theta^(arange(0, D, 2)/D) computed in float32 (default type), or the
    linear / dynamic / yarn variants of transformers 5 modeling_rope_utils.py (rope_inv_freq;
    config spellings rope_scaling / rope_parameters / legacy "type", parse_rope);
    angles = position * inv_freq (float32), emb = cat(angles, angles), cos/sin times the
    variant's attention scaling, q*cos + rotate_half(q)*sin,
    rotate_half(x) = cat(-x[D/2:], x[:D/2]).  cos/sin cast to the compute dtype.
  * Sliding window (Qwen3Config / masking_utils): on the layers parse_windows selects, query t
    sees keys u with t - u < sliding_window.
  * tie_word_embeddings with a checkpoint holding a different lm_head.weight: untied
    (transformers 5, resolve_tied_head).
  * GQA via repeat_kv (kv head j serves q heads j*G .. j*G+G-1, G = H / H_kv);
    scores = (q @ k^T) * head_dim^-0.5; causal mask; softmax in float32 (or the compute dtype
    when that is float64); p @ v; o_proj.
  * MLP: down_proj(silu(gate_proj(x)) * up_proj(x)).  Decoder layer: pre-norm residuals
    h = h + attn(input_layernorm(h)); h = h + mlp(post_attention_layernorm(h)).  Final norm,
    lm_head (= embed_tokens.weight when tie_word_embeddings).
  * nn.Embedding(vocab, hidden, padding_idx=config.pad_token_id) like HF: if the config has a
    pad_token_id, that embedding row gets no gradient (and init zeroes it).
  * Loss (ForCausalLMLoss): logits upcast to float32, labels aligned with input_ids, shifted by
    one inside each row (label[t+1] is the target of position t, the last position has none),
    ignore_index -100, reduction = sum / (number of labelled targets in the whole batch).

Packed sequences: pass position_ids (positions restart at 0 at each segment start, the HF /
flash-attention convention) or cu_seqlens (flash-attn varlen: [0, l0, l0+l1, ...], batch of 1
row; tokens after cu_seqlens[-1] are padding, each its own segment).  Attention is then
block-diagonal causal and RoPE uses the restarted positions.  The label shift still runs over
the whole row (as HF does); pass segment_shift=True (CLI --segment-shift) to also drop the
target that crosses a segment boundary (HF's DataCollatorWithFlattening gets the same effect by
putting -100 on each segment's first label).

Precision: --dtype float32 (default) follows HF's float32 path exactly; --dtype float64 runs
everything (RoPE tables, norms, softmax, loss) in float64 - the "true" value to measure a
float32 engine's error against; --dtype bfloat16 mirrors HF's bf16 path (norms / softmax /
RoPE tables / loss in float32) and is allowed for `loss`, `dump` and `step --steps 0` only.
`step --precision autocast-bf16` trains the float32 model under torch.autocast("cpu", bfloat16)
(PyTorch's mixed precision: bf16 matmul inputs and outputs, float32 parameters, gradients and AdamW
state); `--precision pure-bf16` casts the model to bfloat16 and runs AdamW on the bf16 parameters (no
float32 master weights: the negative control of the bf16 numerics test, tests/reference/check_bf16.py).

CLI (see `qwen3_ref.py -h`):
  init  --config config.json --seed S --out DIR [--dtype F32|BF16|F16] [--std X]
        [--norm-std A --bias-std B]
        random init: normal(0, initializer_range) for every Linear weight and the embedding,
        norm weights 1, biases 0 (HF _init_weights); DIR/model.safetensors + DIR/config.json.
        Test checkpoints: norm weights 1 + A*N(0,1), biases B*N(0,1) (the parity tests use
        A = 0.1, B = 0.02 so that loading norms and biases matters).
  step  --model DIR --batch batch.json --steps N --lr --weight-decay --beta1 --beta2 --eps
        --clip-grad --out OUT [--dtype] [--save-dtype F32|F64]
        per step: forward, loss, backward, grad norm (torch.nn.utils.clip_grad_norm_, the
        pre-clip total L2 norm over all parameters), clip (coef = clip/(norm+1e-6) applied when
        < 1; --clip-grad 0 disables), torch.optim.AdamW with two groups: weight decay for params
        with dim >= 2 only (Megatron: biases and norm weights are not decayed).
        OUT/metrics.json {"loss": [...], "grad_norm": [...], "tokens": [...], ...}
        OUT/grads_step0.safetensors (pre-clip gradients of step 0, HF names; a tied model has
        only model.embed_tokens.weight, holding both uses), OUT/final.safetensors (parameters
        after N steps; for N = 0, the loaded ones).
  loss  --model DIR --batch batch.json      prints {"loss": x, "tokens": n}
  dump  --model DIR --batch batch.json --out FILE.safetensors
        hidden states after the embedding / every layer / the final norm, the logits and
        per-target losses (float32) of the batch (its first micro batch / step entry), for
        layer-by-layer debugging of the engine.
  selftest   checks this file against a naive float64 numpy implementation (1 layer) and more.

batch.json: {"input_ids": [[...], ...], "labels": [[...], ...]} with rows of any length (right-
padded here with token 0 and label -100); optional "position_ids" (same shape) or "cu_seqlens"
(one row).  {"micro_batches": [batch, ...]}: gradient accumulation, loss = sum over all micro
batches / all labelled targets of all micro batches (global token mean, as HF Trainer with
num_items_in_batch and Megatron's per-token loss).  {"steps": [batch_or_micro_batches, ...]}:
step i uses steps[i % len].
"""
import argparse
import json
import math
import os
import shutil
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_py as st  # noqa: E402

IGNORE_INDEX = -100
_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


class ConfigError(ValueError):
    pass


# ---------------------------------------------------------------------------------------------
# config


class Qwen3Config:
    """The fields of an HF Qwen3 config.json that the model uses, with HF's defaults
    (transformers Qwen3Config).  Raises ConfigError naming the field for unsupported values."""

    def __init__(self, d):
        if not isinstance(d, dict):
            raise ConfigError("config: not a JSON object")
        mt = d.get("model_type", "qwen3")
        if mt != "qwen3":
            raise ConfigError(f"config: model_type {mt!r} is not 'qwen3'")

        def get(name, default, typ):
            v = d.get(name, default)
            if v is None and default is None:
                return None
            if typ is float and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
                raise ConfigError(f"config: field '{name}' = {v!r} is not {typ.__name__}")
            return v

        self.vocab_size = get("vocab_size", 151936, int)
        self.hidden_size = get("hidden_size", 4096, int)
        self.intermediate_size = get("intermediate_size", 22016, int)
        self.num_hidden_layers = get("num_hidden_layers", 32, int)
        self.num_attention_heads = get("num_attention_heads", 32, int)
        self.num_key_value_heads = get("num_key_value_heads", self.num_attention_heads, int)
        self.head_dim = get("head_dim", 128, int)
        self.hidden_act = get("hidden_act", "silu", str)
        self.max_position_embeddings = get("max_position_embeddings", 32768, int)
        self.initializer_range = get("initializer_range", 0.02, float)
        self.rms_norm_eps = get("rms_norm_eps", 1e-6, float)
        self.tie_word_embeddings = get("tie_word_embeddings", False, bool)
        self.attention_bias = get("attention_bias", False, bool)
        self.attention_dropout = get("attention_dropout", 0.0, float)
        self.use_sliding_window = get("use_sliding_window", False, bool)
        self.pad_token_id = get("pad_token_id", None, int)
        self.rope_theta, self.rope = parse_rope(d, self.max_position_embeddings)
        self.layer_windows = parse_windows(d, self.num_hidden_layers, self.use_sliding_window)

        if self.hidden_act != "silu":
            raise ConfigError(f"config: hidden_act {self.hidden_act!r} unsupported (silu only)")
        if self.attention_dropout != 0.0:
            raise ConfigError("config: attention_dropout must be 0.0 (deterministic reference)")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                     "num_attention_heads", "num_key_value_heads", "head_dim"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"config: field '{name}' must be > 0")
        if self.head_dim % 2:
            raise ConfigError(f"config: head_dim {self.head_dim} must be even (RoPE)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(f"config: num_attention_heads {self.num_attention_heads} is not a multiple "
                              f"of num_key_value_heads {self.num_key_value_heads}")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(f"config: pad_token_id {self.pad_token_id} outside [0, vocab_size)")


def parse_rope(d, max_pos):
    """(rope_theta, variant dict) as transformers 5 reads them (configuration_utils
    RotaryEmbeddingConfigMixin): a non-empty `rope_scaling` replaces `rope_parameters`; type =
    rope_type, else the legacy `type`, else "default"; the dict's rope_theta wins over the
    top-level one (default 10000).  yarn: factor (null -> max_pos / original),
    original_max_position_embeddings (top-level key first, then the dict, then max_pos),
    attention_factor / mscale / mscale_all_dim (optional), beta_fast `or` 32, beta_slow `or` 1,
    truncate (default true)."""
    theta = d.get("rope_theta", 10000.0)
    rp = d.get("rope_scaling") or d.get("rope_parameters") or {}
    if not isinstance(rp, dict):
        raise ConfigError(f"config: rope_scaling / rope_parameters {rp!r} is not an object")
    theta = rp.get("rope_theta", theta)
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or theta <= 0:
        raise ConfigError(f"config: rope_theta {theta!r} must be a positive number")
    rtype = rp.get("rope_type", rp.get("type", "default"))
    v = {"type": rtype}
    if rtype == "default":
        return float(theta), v
    if rtype not in ("linear", "dynamic", "yarn"):
        raise ConfigError(f"config: rope_type {rtype!r} unsupported (default, linear, dynamic, yarn)")
    if "factor" not in rp:
        raise ConfigError(f"config: rope_type {rtype!r} needs 'factor'")
    v["factor"] = rp["factor"]
    if rtype == "yarn":
        orig = d.get("original_max_position_embeddings", rp.get("original_max_position_embeddings", max_pos))
        v["original_max_position_embeddings"] = orig
        if v["factor"] is None:
            v["factor"] = max_pos / orig
        v["attention_factor"] = rp.get("attention_factor")
        v["mscale"] = rp.get("mscale")
        v["mscale_all_dim"] = rp.get("mscale_all_dim")
        v["beta_fast"] = rp.get("beta_fast") or 32
        v["beta_slow"] = rp.get("beta_slow") or 1
        v["truncate"] = rp.get("truncate", True)
    return float(theta), v


def parse_windows(d, n_layers, use_sliding_window):
    """Per-layer sliding window (0 = full attention) by Qwen3Config's rule: sliding_window counts
    only when use_sliding_window; layer_types given -> windows on its 'sliding_attention' layers,
    else on layers i >= max_window_layers (default 28); sliding_window default 4096."""
    sw = d.get("sliding_window", 4096) if use_sliding_window else None
    types = d.get("layer_types")
    if types is None:
        mwl = d.get("max_window_layers", 28)
        types = ["sliding_attention" if sw is not None and i >= mwl else "full_attention" for i in range(n_layers)]
    if len(types) != n_layers or any(t not in ("full_attention", "sliding_attention") for t in types):
        raise ConfigError(f"config: layer_types {types!r} invalid for {n_layers} layers")
    if "sliding_attention" in types and sw is None:
        raise ConfigError("config: a 'sliding_attention' layer needs use_sliding_window and sliding_window")
    return [sw if t == "sliding_attention" else 0 for t in types]


# ---------------------------------------------------------------------------------------------
# model


def _upcast(dtype):
    """The dtype HF does its 'float32' math in: float32, or float64 when computing in float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        in_dtype = x.dtype
        h = x.to(_upcast(in_dtype))
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + self.eps)
        return self.weight * h.to(in_dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_inv_freq(head_dim, theta, rope, cdt, seq_len=None, max_pos=None):
    """(inv_freq [head_dim/2] in cdt, attention scaling) of a RoPE variant, written from the
    formulas of transformers 5 modeling_rope_utils.py (_compute_*_parameters):
      default  1 / theta^(2i/D), scaling 1
      linear   default / factor
      dynamic  default with theta * (factor*L/M - (factor-1))^(D/(D-2)), L = max(seq_len, M),
               M = max_position_embeddings (= default while max position + 1 <= M)
      yarn     blend of default (extrapolation) and default/factor (interpolation) with a
               linear ramp over the correction range of beta_fast..beta_slow rotations at the
               original context length; scaling attention_factor or 0.1*ln(factor)+1 (mscale
               ratio when mscale and mscale_all_dim are both set)."""
    rope = rope or {"type": "default"}
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64).to(cdt) / head_dim
    t = rope["type"]
    if t == "default":
        return 1.0 / (theta ** exponent), 1.0
    f = rope["factor"]
    if t == "linear":
        return 1.0 / (theta ** exponent) / f, 1.0
    if t == "dynamic":
        L = max(seq_len or 0, max_pos)
        base = theta * ((f * L / max_pos) - (f - 1)) ** (head_dim / (head_dim - 2))
        return 1.0 / (base ** exponent), 1.0
    assert t == "yarn", t

    def m(scale, ms=1.0):
        return 1.0 if scale <= 1 else 0.1 * ms * math.log(scale) + 1.0

    att = rope.get("attention_factor")
    if att is None:
        ms, msa = rope.get("mscale"), rope.get("mscale_all_dim")
        att = m(f, ms) / m(f, msa) if (ms and msa) else m(f)
    orig = rope["original_max_position_embeddings"]

    def corr_dim(rot):
        return head_dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))

    lo, hi = corr_dim(rope["beta_fast"]), corr_dim(rope["beta_slow"])
    if rope.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, head_dim - 1)
    if lo == hi:
        hi += 0.001
    pos = theta ** exponent
    ramp = ((torch.arange(head_dim // 2, dtype=cdt) - lo) / (hi - lo)).clamp(0, 1)
    w_extrap = 1 - ramp
    inv = (1.0 / (f * pos)) * (1 - w_extrap) + (1.0 / pos) * w_extrap
    return inv, float(att)


def rope_cos_sin(position_ids, head_dim, theta, dtype, rope=None, max_pos=None):
    """position_ids [B, S] int64 -> cos, sin [B, S, head_dim] in `dtype` (times the variant's
    attention scaling, as Qwen3RotaryEmbedding).  float32 / bfloat16: HF's float32 arithmetic;
    float64: all in float64."""
    cdt = _upcast(dtype)
    inv_freq, att = rope_inv_freq(head_dim, theta, rope, cdt, int(position_ids.max()) + 1 if position_ids.numel() else 0,
                                  max_pos)
    ang = position_ids.to(cdt)[:, :, None] * inv_freq[None, None, :]
    emb = torch.cat((ang, ang), dim=-1)
    return (emb.cos() * att).to(dtype), (emb.sin() * att).to(dtype)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.h, self.hkv, self.d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.scaling = self.d ** -0.5
        b = c.attention_bias
        self.q_proj = nn.Linear(c.hidden_size, self.h * self.d, bias=b)
        self.k_proj = nn.Linear(c.hidden_size, self.hkv * self.d, bias=b)
        self.v_proj = nn.Linear(c.hidden_size, self.hkv * self.d, bias=b)
        self.o_proj = nn.Linear(self.h * self.d, c.hidden_size, bias=b)
        self.q_norm = RMSNorm(self.d, c.rms_norm_eps)
        self.k_norm = RMSNorm(self.d, c.rms_norm_eps)

    def forward(self, x, cos, sin, allowed):
        B, S, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, S, self.h, self.d)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, S, self.hkv, self.d)).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.hkv, self.d).transpose(1, 2)
        c, s = cos[:, None], sin[:, None]
        q = q * c + rotate_half(q) * s
        k = k * c + rotate_half(k) * s
        g = self.h // self.hkv
        if g > 1:  # repeat_kv
            k = k[:, :, None].expand(B, self.hkv, g, S, self.d).reshape(B, self.h, S, self.d)
            v = v[:, :, None].expand(B, self.hkv, g, S, self.d).reshape(B, self.h, S, self.d)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        scores = scores.masked_fill(~allowed, float("-inf"))
        p = F.softmax(scores, dim=-1, dtype=_upcast(x.dtype)).to(x.dtype)
        o = torch.matmul(p, v).transpose(1, 2).reshape(B, S, self.h * self.d)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, h, cos, sin, allowed):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, allowed)
        return h + self.mlp(self.post_attention_layernorm(h))


class _Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size, padding_idx=c.pad_token_id)
        self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


def segments_from_position_ids(position_ids):
    """[B, S] positions -> [B, S] segment ids: a new segment starts wherever position == 0."""
    return torch.cumsum((position_ids == 0).to(torch.int64), dim=1)


def segments_from_cu_seqlens(cu, S):
    """cu_seqlens [0, l0, l0+l1, ..., total] (total <= S) -> position_ids [1, S], segment ids [1, S].
    Tokens past cu[-1] are padding: each gets its own segment and position 0."""
    cu = [int(v) for v in cu]
    if len(cu) < 2 or cu[0] != 0 or any(b <= a for a, b in zip(cu, cu[1:])) or cu[-1] > S:
        raise ValueError(f"cu_seqlens {cu} must start at 0, increase strictly and end <= {S}")
    pos = torch.zeros(1, S, dtype=torch.int64)
    seg = torch.zeros(1, S, dtype=torch.int64)
    for i, (a, b) in enumerate(zip(cu, cu[1:])):
        pos[0, a:b] = torch.arange(b - a)
        seg[0, a:b] = i
    for j, t in enumerate(range(cu[-1], S)):
        seg[0, t] = len(cu) - 1 + j
    return pos, seg


class Qwen3Ref(nn.Module):
    """Qwen3ForCausalLM.  Parameter names (named_parameters / state_dict) are exactly HF's:
    model.embed_tokens.weight, model.layers.{i}.self_attn.{q,k,v,o}_proj.weight (+ .bias when
    attention_bias), model.layers.{i}.self_attn.{q,k}_norm.weight,
    model.layers.{i}.mlp.{gate,up,down}_proj.weight,
    model.layers.{i}.{input,post_attention}_layernorm.weight, model.norm.weight,
    lm_head.weight (absent when tie_word_embeddings)."""

    def __init__(self, config, dtype=torch.float32):
        super().__init__()
        self.config = config if isinstance(config, Qwen3Config) else Qwen3Config(config)
        c = self.config
        self.model = _Body(c)
        self.lm_head = None if c.tie_word_embeddings else nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.to(dtype)
        self.dtype = dtype

    # -- weights ------------------------------------------------------------------------------
    def init_weights(self, seed, norm_std=0.0, bias_std=0.0):
        """HF _init_weights: normal(0, initializer_range) for Linear weights and the embedding
        (its padding_idx row zeroed), biases 0, RMSNorm weights 1.  Drawn in float32 in
        named_parameters order from torch.Generator(seed).
        norm_std / bias_std > 0 (test checkpoints, not HF): RMSNorm weights 1 + norm_std * N(0, 1)
        and biases bias_std * N(0, 1), drawn in named_parameters order from a second generator
        (seed + 1000003), so the Linear / embedding weights are the same as with 0.  A loader
        that ignores or swaps norm weights or biases then changes the loss."""
        g = torch.Generator().manual_seed(int(seed))
        g2 = torch.Generator().manual_seed(int(seed) + 1000003)
        std = self.config.initializer_range
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                    if norm_std > 0:
                        p.add_((norm_std * torch.randn(tuple(p.shape), generator=g2)).to(p.dtype))
                elif name.endswith(".bias"):
                    p.zero_()
                    if bias_std > 0:
                        p.copy_((bias_std * torch.randn(tuple(p.shape), generator=g2)).to(p.dtype))
                else:
                    p.copy_(torch.normal(0.0, std, size=tuple(p.shape), generator=g).to(p.dtype))
            pid = self.config.pad_token_id
            if pid is not None:
                self.model.embed_tokens.weight[pid].zero_()

    def load_tensors(self, tensors, source="checkpoint"):
        """Copies {HF name: tensor} into the parameters (converted to the model dtype).
        Raises ValueError naming missing / unexpected / mis-shaped tensors.  For a tied model a
        present lm_head.weight is accepted only if it equals model.embed_tokens.weight."""
        tensors = dict(tensors)
        own = dict(self.named_parameters())
        if self.lm_head is None and "lm_head.weight" in tensors:
            lm = tensors.pop("lm_head.weight")
            emb = tensors.get("model.embed_tokens.weight")
            if emb is None or lm.shape != emb.shape or not torch.equal(lm.float(), emb.float()):
                raise ValueError(f"{source}: tie_word_embeddings is true but lm_head.weight differs "
                                 f"from model.embed_tokens.weight")
        missing = sorted(set(own) - set(tensors))
        unexpected = sorted(set(tensors) - set(own))
        if missing or unexpected:
            raise ValueError(f"{source}: missing tensors {missing[:6]}{'...' if len(missing) > 6 else ''}, "
                             f"unexpected tensors {unexpected[:6]}{'...' if len(unexpected) > 6 else ''}")
        with torch.no_grad():
            for name, p in own.items():
                t = tensors[name]
                if tuple(t.shape) != tuple(p.shape):
                    raise ValueError(f"{source}: tensor '{name}' has shape {list(t.shape)}, "
                                     f"the config needs {list(p.shape)}")
                p.copy_(t.to(p.dtype))

    # -- forward ------------------------------------------------------------------------------
    def forward(self, input_ids, position_ids=None, segment_ids=None, hidden_out=None):
        """input_ids [B, S] int64 -> logits [B, S, vocab] in the model dtype.
        position_ids [B, S] (default arange(S) per row); segment_ids [B, S] (default: from
        position_ids restarts when position_ids is given, else one segment).  Attention lets
        query t see key u iff u <= t and segment[u] == segment[t].  hidden_out: optional list
        that receives the hidden states after the embedding, each layer and the final norm."""
        c = self.config
        B, S = input_ids.shape
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= c.vocab_size):
            raise ValueError(f"input_ids: token id outside [0, {c.vocab_size}) "
                             f"(min {int(input_ids.min())}, max {int(input_ids.max())})")
        if position_ids is None:
            position_ids = torch.arange(S, dtype=torch.int64)[None].expand(B, S)
            if segment_ids is None:
                segment_ids = torch.zeros(B, S, dtype=torch.int64)
        elif segment_ids is None:
            segment_ids = segments_from_position_ids(position_ids)
        causal = torch.ones(S, S, dtype=torch.bool).tril()
        allowed = (causal[None] & (segment_ids[:, :, None] == segment_ids[:, None, :]))[:, None]
        # sliding window (masking_utils sliding_window_overlay): key index > query index - window
        qk = torch.arange(S)[:, None] - torch.arange(S)[None, :]
        cos, sin = rope_cos_sin(position_ids, c.head_dim, c.rope_theta, self.dtype, c.rope, c.max_position_embeddings)
        h = self.model.embed_tokens(input_ids)
        if hidden_out is not None:
            hidden_out.append(h)
        for li, layer in enumerate(self.model.layers):
            w = c.layer_windows[li]
            h = layer(h, cos, sin, allowed if not w else allowed & (qk < w)[None, None])
            if hidden_out is not None:
                hidden_out.append(h)
        h = self.model.norm(h)
        if hidden_out is not None:
            hidden_out.append(h)
        w = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(h, w)

    def loss_sum(self, batch, segment_shift=False, per_token_out=None):
        """batch: dict of tensors (see make_batch).  Returns (sum of per-target cross entropies
        as a 0-d tensor in the upcast dtype, number of labelled targets)."""
        ids, labels = batch["input_ids"], batch["labels"]
        logits = self(ids, batch.get("position_ids"), batch.get("segment_ids"))
        logits = logits.to(_upcast(self.dtype))
        tgt = shift_labels(labels, batch.get("segment_ids") if segment_shift else None)
        V = self.config.vocab_size
        bad = (tgt != IGNORE_INDEX) & ((tgt < 0) | (tgt >= V))
        if bool(bad.any()):
            r, t = [int(v) for v in bad.nonzero()[0]]
            raise ValueError(f"labels: row {r} position {t + 1}: label {int(tgt[r, t])} outside [0, {V})")
        flat = F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1), ignore_index=IGNORE_INDEX,
                               reduction="none")
        if per_token_out is not None:
            per_token_out.append(flat.reshape(tgt.shape))
        return flat.sum(), int((tgt != IGNORE_INDEX).sum())


def shift_labels(labels, segment_ids=None):
    """labels [B, S] -> targets [B, S]: targets[:, t] = labels[:, t+1], the last one -100
    (HF ForCausalLMLoss).  With segment_ids, targets crossing a segment boundary become -100."""
    tgt = F.pad(labels, (0, 1), value=IGNORE_INDEX)[:, 1:].clone()
    if segment_ids is not None:
        cross = segment_ids[:, 1:] != segment_ids[:, :-1]
        tgt[:, :-1][cross] = IGNORE_INDEX
    return tgt


# ---------------------------------------------------------------------------------------------
# batches


def make_batch(d, where="batch"):
    """{"input_ids": rows, "labels": rows, optional "position_ids" rows | "cu_seqlens"} ->
    dict of int64 tensors, rows right-padded to the longest with token 0 / label -100 /
    position 0 (each padding token then is its own segment when position_ids are given)."""
    if "input_ids" not in d or "labels" not in d:
        raise ValueError(f"{where}: needs 'input_ids' and 'labels'")
    ids, labs = d["input_ids"], d["labels"]
    if not ids or len(ids) != len(labs):
        raise ValueError(f"{where}: input_ids has {len(ids)} rows, labels {len(labs)}")
    S = max(len(r) for r in ids)
    B = len(ids)
    out_ids = torch.zeros(B, S, dtype=torch.int64)
    out_lab = torch.full((B, S), IGNORE_INDEX, dtype=torch.int64)
    for i, (r, lr) in enumerate(zip(ids, labs)):
        if len(r) != len(lr):
            raise ValueError(f"{where}: row {i}: {len(r)} input_ids but {len(lr)} labels")
        if not r:
            raise ValueError(f"{where}: row {i} is empty")
        out_ids[i, :len(r)] = torch.tensor(r, dtype=torch.int64)
        out_lab[i, :len(lr)] = torch.tensor(lr, dtype=torch.int64)
    b = {"input_ids": out_ids, "labels": out_lab}
    if "position_ids" in d and d["position_ids"] is not None:
        pos = torch.zeros(B, S, dtype=torch.int64)
        for i, r in enumerate(d["position_ids"]):
            if len(r) != len(ids[i]):
                raise ValueError(f"{where}: row {i}: {len(r)} position_ids but {len(ids[i])} input_ids")
            pos[i, :len(r)] = torch.tensor(r, dtype=torch.int64)
        if bool((pos < 0).any()):
            raise ValueError(f"{where}: negative position_ids")
        b["position_ids"] = pos
        b["segment_ids"] = segments_from_position_ids(pos)
    elif "cu_seqlens" in d and d["cu_seqlens"] is not None:
        if B != 1:
            raise ValueError(f"{where}: cu_seqlens needs exactly one (packed) row, got {B}")
        b["position_ids"], b["segment_ids"] = segments_from_cu_seqlens(d["cu_seqlens"], S)
    return b


def load_batches(path):
    """batch.json -> list (one entry per distinct step) of lists of micro batches."""
    with open(path) as f:
        d = json.load(f)

    def one_step(x, where):
        if "micro_batches" in x:
            mbs = x["micro_batches"]
            if not mbs:
                raise ValueError(f"{where}: empty micro_batches")
            return [make_batch(m, f"{where}.micro_batches[{i}]") for i, m in enumerate(mbs)]
        return [make_batch(x, where)]

    if "steps" in d:
        return [one_step(x, f"{path}: steps[{i}]") for i, x in enumerate(d["steps"])]
    return [one_step(d, path)]


def count_targets(mb, segment_shift=False):
    return int((shift_labels(mb["labels"], mb.get("segment_ids") if segment_shift else None)
                != IGNORE_INDEX).sum())


# ---------------------------------------------------------------------------------------------
# loading / saving models


def read_config(path):
    with open(path) as f:
        return json.load(f)


def resolve_tied_head(cfg, tensors, source="checkpoint"):
    """transformers 5's rule for tie_word_embeddings vs the checkpoint: only one of
    model.embed_tokens.weight / lm_head.weight present, or both equal -> tied as configured;
    both present and different -> keep both (untied), with a warning.  Returns the config."""
    emb, lm = tensors.get("model.embed_tokens.weight"), tensors.get("lm_head.weight")
    if cfg.get("tie_word_embeddings", False) and emb is not None and lm is not None:
        if lm.shape != emb.shape or not torch.equal(lm.float(), emb.float()):
            print(f"{source}: tie_word_embeddings is true but lm_head.weight differs from "
                  f"model.embed_tokens.weight: keeping both (untied)", file=sys.stderr)
            return dict(cfg, tie_word_embeddings=False)
    return cfg


def load_model(model_dir, dtype=torch.float32):
    cfg_path = os.path.join(model_dir, "config.json")
    tensors = st.load_dir(model_dir)
    model = Qwen3Ref(resolve_tied_head(read_config(cfg_path), tensors, model_dir), dtype)
    model.load_tensors(tensors, source=model_dir)
    return model


def param_tensors(model):
    return {n: p.detach() for n, p in model.named_parameters()}


def make_optimizer(model, lr, weight_decay, beta1, beta2, eps):
    """torch.optim.AdamW, two groups: dim >= 2 decayed, the rest (biases, norm weights) not."""
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), eps=eps)


def train_step(model, micro_batches, segment_shift=False):
    """Forward + backward over the micro batches with the global token mean.
    Returns (loss as float, number of targets).  Gradients are accumulated into .grad."""
    total = sum(count_targets(mb, segment_shift) for mb in micro_batches)
    if total == 0:
        raise ValueError("batch has no labelled targets (every label is -100 after the shift)")
    loss_sum = 0.0
    for mb in micro_batches:
        s, _ = model.loss_sum(mb, segment_shift)
        (s / total).backward()
        loss_sum += float(s)
    return loss_sum / total, total


# ---------------------------------------------------------------------------------------------
# CLI


def cmd_init(a):
    cfg = read_config(a.config)
    if a.std is not None:
        cfg = dict(cfg, initializer_range=a.std)
    model = Qwen3Ref(cfg, torch.float32)
    model.init_weights(a.seed, norm_std=a.norm_std, bias_std=a.bias_std)
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, st.SINGLE_NAME), param_tensors(model), dtype=a.dtype)
    if os.path.abspath(a.config) != os.path.abspath(os.path.join(a.out, "config.json")):
        shutil.copyfile(a.config, os.path.join(a.out, "config.json"))
    print(json.dumps({"out": a.out, "params": sum(p.numel() for p in model.parameters())}))


def cmd_loss(a):
    dtype = _DTYPES[a.dtype]
    model = load_model(a.model, dtype)
    steps = load_batches(a.batch)
    mbs = steps[0]
    with torch.no_grad():
        s = sum(float(model.loss_sum(mb, a.segment_shift)[0]) for mb in mbs)
    n = sum(count_targets(mb, a.segment_shift) for mb in mbs)
    print(json.dumps({"loss": s / n if n else float("nan"), "tokens": n}))


def cmd_dump(a):
    model = load_model(a.model, _DTYPES[a.dtype])
    mb = load_batches(a.batch)[0][0]
    hs, per_tok = [], []
    with torch.no_grad():
        logits = model(mb["input_ids"], mb.get("position_ids"), mb.get("segment_ids"), hidden_out=hs)
        model.loss_sum(mb, a.segment_shift, per_token_out=per_tok)
    out = {"embed": hs[0], "final_norm": hs[-1], "logits": logits, "token_loss": per_tok[0],
           "targets": shift_labels(mb["labels"], mb.get("segment_ids") if a.segment_shift else None)}
    for i, h in enumerate(hs[1:-1]):
        out[f"layer.{i}"] = h
    st.save(a.out, {k: (v.float() if v.is_floating_point() else v) for k, v in out.items()})
    print(json.dumps({"out": a.out, "tensors": sorted(out)}))


def cmd_step(a):
    dtype = _DTYPES[a.dtype]
    if dtype == torch.bfloat16 and a.steps > 0:
        raise SystemExit("qwen3_ref step: --dtype bfloat16 is only allowed with --steps 0")
    if a.precision != "none" and dtype != torch.float32:
        raise SystemExit("qwen3_ref step: --precision needs --dtype float32")
    model = load_model(a.model, dtype)
    if a.precision == "pure-bf16":
        model.to(torch.bfloat16)
        model.dtype = torch.bfloat16
    steps = load_batches(a.batch)
    opt = make_optimizer(model, a.lr, a.weight_decay, a.beta1, a.beta2, a.eps)
    params = [p for p in model.parameters()]
    os.makedirs(a.out, exist_ok=True)
    metrics = {"loss": [], "grad_norm": [], "tokens": [], "clip_coef": [],
               "settings": {"lr": a.lr, "weight_decay": a.weight_decay, "beta1": a.beta1, "beta2": a.beta2,
                            "eps": a.eps, "clip_grad": a.clip_grad, "dtype": a.dtype, "steps": a.steps,
                            "segment_shift": a.segment_shift}}
    n_iter = max(a.steps, 1)
    for i in range(n_iter):
        opt.zero_grad(set_to_none=True)
        if a.precision == "autocast-bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss, ntok = train_step(model, steps[i % len(steps)], a.segment_shift)
        else:
            loss, ntok = train_step(model, steps[i % len(steps)], a.segment_shift)
        for p in params:  # a parameter that received no gradient has a zero one
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if i == 0:
            st.save(os.path.join(a.out, "grads_step0.safetensors"),
                    {n: p.grad.detach().clone() for n, p in model.named_parameters()}, dtype=a.save_dtype)
        max_norm = a.clip_grad if a.clip_grad > 0 else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        coef = min(1.0, max_norm / (norm + 1e-6)) if a.clip_grad > 0 else 1.0
        metrics["loss"].append(loss)
        metrics["grad_norm"].append(norm)
        metrics["tokens"].append(ntok)
        metrics["clip_coef"].append(coef)
        if a.steps > 0:
            opt.step()
        print(f"step {i}: loss {loss:.8f} grad_norm {norm:.8f} tokens {ntok}", file=sys.stderr)
    st.save(os.path.join(a.out, "final.safetensors"), param_tensors(model), dtype=a.save_dtype)
    with open(os.path.join(a.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    print(json.dumps({"loss": metrics["loss"], "grad_norm": metrics["grad_norm"]}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p, need_batch=True):
        p.add_argument("--model", required=True, help="dir with config.json + safetensors")
        if need_batch:
            p.add_argument("--batch", required=True, help="batch.json")
        p.add_argument("--dtype", choices=sorted(_DTYPES), default="float32")
        p.add_argument("--segment-shift", action="store_true",
                       help="packed input: drop targets that cross a segment boundary")
        p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")

    p = sub.add_parser("init", help="random-init checkpoint")
    p.add_argument("--config", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", choices=["F32", "BF16", "F16"], default="F32", help="on-disk dtype")
    p.add_argument("--std", type=float, default=None,
                   help="override initializer_range for this init (config.json is copied unchanged)")
    p.add_argument("--norm-std", type=float, default=0.0,
                   help="RMSNorm weights 1 + NORM_STD * N(0,1) instead of 1 (test checkpoints)")
    p.add_argument("--bias-std", type=float, default=0.0,
                   help="biases BIAS_STD * N(0,1) instead of 0 (test checkpoints)")
    p.add_argument("--threads", type=int, default=0)
    p.set_defaults(fn=cmd_init)

    p = sub.add_parser("step", help="N AdamW training steps")
    common(p)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--clip-grad", type=float, default=1.0, help="max grad norm; 0 disables clipping")
    p.add_argument("--save-dtype", choices=["F32", "F64"], default="F32")
    p.add_argument("--precision", choices=["none", "autocast-bf16", "pure-bf16"], default="none",
                   help="bf16 mixed precision of PyTorch (autocast) or bf16 parameters without master weights")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_step)

    p = sub.add_parser("loss", help="print {loss, tokens}")
    common(p)
    p.set_defaults(fn=cmd_loss)

    p = sub.add_parser("dump", help="hidden states / logits / per-token loss")
    common(p)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_dump)

    p = sub.add_parser("selftest", help="check against a naive numpy float64 model")
    p.add_argument("--threads", type=int, default=0)
    p.set_defaults(fn=lambda a: selftest())

    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if getattr(a, "steps", 0) < 0:
        raise SystemExit("--steps must be >= 0")
    a.fn(a)


# ---------------------------------------------------------------------------------------------
# self-test


def _naive_forward_np(cfg, W, ids, pos=None, seg=None):
    """Straight-line numpy float64 Qwen3 for one row: explicit loops over positions and heads."""
    import numpy as np
    c = Qwen3Config(cfg)
    S = len(ids)
    pos = list(range(S)) if pos is None else pos
    seg = [0] * S if seg is None else seg
    H, Hk, D, eps = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rms_norm_eps
    w = {k: v.double().numpy() for k, v in W.items()}

    def rms(x, g):
        return g * (x / np.sqrt(np.mean(x * x) + eps))

    def lin(name, x):
        y = w[name + ".weight"] @ x
        return y + w[name + ".bias"] if name + ".bias" in w else y

    def inv_freq(i):  # scalar form of the RoPE variants (transformers modeling_rope_utils.py)
        base = 1.0 / (c.rope_theta ** (2.0 * i / D))
        r = c.rope
        if r["type"] in ("default", "dynamic"):  # dynamic == default for positions < max_position_embeddings
            return base
        if r["type"] == "linear":
            return base / r["factor"]
        o = r["original_max_position_embeddings"]
        lo = math.floor(D * math.log(o / (r["beta_fast"] * 2 * math.pi)) / (2 * math.log(c.rope_theta)))
        hi = math.ceil(D * math.log(o / (r["beta_slow"] * 2 * math.pi)) / (2 * math.log(c.rope_theta)))
        lo, hi = max(lo, 0), min(hi, D - 1)
        ramp = min(1.0, max(0.0, (i - lo) / ((hi + 0.001 if hi == lo else hi) - lo)))
        return base / r["factor"] * ramp + base * (1 - ramp)

    att = 1.0
    if c.rope["type"] == "yarn":
        att = c.rope["attention_factor"] or 0.1 * math.log(c.rope["factor"]) + 1.0

    def rope(x, p):
        out = np.empty_like(x)
        for i in range(D // 2):
            f = p * inv_freq(i)
            cs, sn = math.cos(f) * att, math.sin(f) * att
            out[i] = x[i] * cs - x[i + D // 2] * sn
            out[i + D // 2] = x[i + D // 2] * cs + x[i] * sn
        return out

    h = [w["model.embed_tokens.weight"][t].copy() for t in ids]
    for L in range(c.num_hidden_layers):
        pre = f"model.layers.{L}."
        xs = [rms(x, w[pre + "input_layernorm.weight"]) for x in h]
        qs, ks, vs = [], [], []
        for t, x in enumerate(xs):
            q = lin(pre + "self_attn.q_proj", x).reshape(H, D)
            k = lin(pre + "self_attn.k_proj", x).reshape(Hk, D)
            qs.append([rope(rms(q[j], w[pre + "self_attn.q_norm.weight"]), pos[t]) for j in range(H)])
            ks.append([rope(rms(k[j], w[pre + "self_attn.k_norm.weight"]), pos[t]) for j in range(Hk)])
            vs.append(lin(pre + "self_attn.v_proj", x).reshape(Hk, D))
        new_h = []
        for t in range(S):
            o = np.zeros(H * D)
            for j in range(H):
                kv = j // (H // Hk)
                win = c.layer_windows[L]
                keys = [u for u in range(t + 1) if seg[u] == seg[t] and (not win or t - u < win)]
                sc = np.array([qs[t][j] @ ks[u][kv] / math.sqrt(D) for u in keys])
                e = np.exp(sc - sc.max())
                p = e / e.sum()
                o[j * D:(j + 1) * D] = sum(p[n] * vs[u][kv] for n, u in enumerate(keys))
            a1 = h[t] + lin(pre + "self_attn.o_proj", o)
            x2 = rms(a1, w[pre + "post_attention_layernorm.weight"])
            g = lin(pre + "mlp.gate_proj", x2)
            u = lin(pre + "mlp.up_proj", x2)
            new_h.append(a1 + lin(pre + "mlp.down_proj", (g / (1 + np.exp(-g))) * u))
        h = new_h
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return np.stack([head @ rms(x, w["model.norm.weight"]) for x in h])


def selftest():
    import tempfile
    import numpy as np
    ok = True

    def check(name, cond, detail=""):
        nonlocal ok
        print(f"[{'ok' if cond else 'FAIL'}] {name} {detail}")
        ok = ok and bool(cond)

    # 1. safetensors round trip, including BF16 rounding against torch's own cast
    with tempfile.TemporaryDirectory() as td:
        g = torch.Generator().manual_seed(1)
        x = torch.randn(37, 5, generator=g) * 1000
        x[0, 0] = float("inf")
        x[0, 1] = -0.0
        x[0, 2] = 1.0 + 2.0 ** -8  # exactly halfway between two bf16 values -> even
        x[0, 3] = 1.0 + 3 * 2.0 ** -8
        ints = torch.arange(-5, 6, dtype=torch.int64)
        p = os.path.join(td, "a.safetensors")
        st.save(p, {"x": x, "i": ints, "i32": ints.to(torch.int32), "h": x.half()})
        r = st.load(p)
        check("safetensors F32/I64/I32/F16 round trip",
              torch.equal(r["x"], x) and torch.equal(r["i"], ints) and r["i32"].dtype == torch.int32
              and torch.equal(r["h"], x.half()))
        with open(p, "rb") as f:
            import struct as _s
            n = _s.unpack("<Q", f.read(8))[0]
        check("safetensors data start 8-byte aligned", (8 + n) % 8 == 0, f"(header {n})")
        st.save(p, {"x": x}, dtype="BF16")
        rb = st.load(p)["x"]
        check("BF16 encode == torch .to(bfloat16) (RNE)", torch.equal(rb, x.to(torch.bfloat16)))
        check("BF16 decode exact", torch.equal(st.load(p, upcast=True)["x"], x.to(torch.bfloat16).float()))
        tensors = {f"t{i}": torch.full((100,), float(i)) for i in range(5)}
        files = st.save_sharded(os.path.join(td, "sh"), tensors, max_shard_bytes=900)
        back = st.load_dir(os.path.join(td, "sh"))
        check("sharded save/load", len(files) == 3 and all(torch.equal(back[k], v) for k, v in tensors.items()),
              f"({len(files)} shards)")
        with open(p, "r+b") as f:  # corrupt: declare a longer header than the file
            f.write((10 ** 6).to_bytes(8, "little"))
        try:
            st.load(p)
            check("corrupt header rejected", False)
        except ValueError as e:
            check("corrupt header rejected", "header" in str(e), f"({e})")

    # 2. the model against a naive numpy float64 implementation
    for variant in ("a", "b"):
        cfg = dict(tiny_config(variant), num_hidden_layers=1, initializer_range=0.2)
        m = Qwen3Ref(cfg, torch.float64)
        m.init_weights(3)
        with torch.no_grad():  # non-trivial norm weights / biases
            for n, prm in m.named_parameters():
                if n.endswith("norm.weight"):
                    prm.copy_(1 + 0.3 * torch.randn(prm.shape, generator=torch.Generator().manual_seed(7),
                                                    dtype=torch.float64))
                elif n.endswith(".bias"):
                    prm.normal_(0, 0.05)
        W = param_tensors(m)
        ids = [5, 17, 300, 2, 99, 450, 7, 8, 31, 260, 1, 400]
        labels = [-100, -100, -100] + ids[3:]
        ref_logits = _naive_forward_np(cfg, W, ids)
        b = make_batch({"input_ids": [ids], "labels": [labels]})
        with torch.no_grad():
            lg = m(b["input_ids"])[0].numpy()
            s, n = m.loss_sum(b)
        err = float(np.abs(lg - ref_logits).max())
        check(f"[{variant}] logits vs naive numpy (float64)", err < 1e-10, f"(max abs err {err:.2e})")
        # hand loss: -log softmax at the shifted targets, mean over labelled targets
        tot, cnt = 0.0, 0
        for t in range(len(ids) - 1):
            y = labels[t + 1]
            if y == IGNORE_INDEX:
                continue
            row = ref_logits[t]
            mx = row.max()
            tot += (mx + math.log(np.exp(row - mx).sum())) - row[y]
            cnt += 1
        check(f"[{variant}] loss vs hand computation", cnt == n and abs(float(s) / n - tot / cnt) < 1e-12,
              f"({float(s) / n:.12f} vs {tot / cnt:.12f}, {cnt} targets)")
        # packed: two segments == each run alone
        ids2 = [9, 8, 7, 6, 5]
        pk = make_batch({"input_ids": [ids + ids2], "labels": [labels + [-100] + ids2[1:]],
                         "cu_seqlens": [0, len(ids), len(ids) + len(ids2)]})
        with torch.no_grad():
            lp = m(pk["input_ids"], pk["position_ids"], pk["segment_ids"])[0].numpy()
        ref2 = _naive_forward_np(cfg, W, ids2)
        err = max(float(np.abs(lp[:len(ids)] - ref_logits).max()), float(np.abs(lp[len(ids):] - ref2).max()))
        check(f"[{variant}] packed (cu_seqlens) == separate rows", err < 1e-10, f"(max abs err {err:.2e})")
        pp = make_batch({"input_ids": [ids + ids2], "labels": [labels + [-100] + ids2[1:]],
                         "position_ids": [list(range(len(ids))) + list(range(len(ids2)))]})
        with torch.no_grad():
            lq = m(pp["input_ids"], pp["position_ids"])[0].numpy()
        check(f"[{variant}] position_ids restarts == cu_seqlens", float(np.abs(lq - lp).max()) < 1e-12)
        # right padding does not change the real tokens' logits
        pb = make_batch({"input_ids": [ids, ids[:5]], "labels": [labels, labels[:5]]})
        with torch.no_grad():
            lpad = m(pb["input_ids"])[1, :5].numpy()
        check(f"[{variant}] right padding invisible", float(np.abs(lpad - ref_logits[:5]).max()) < 1e-10)
        # finite-difference check of the gradient of one weight entry per kind
        m.zero_grad()
        s, n = m.loss_sum(b)
        (s / n).backward()
        worst = 0.0
        for name in ("model.layers.0.self_attn.q_norm.weight", "model.layers.0.self_attn.k_proj.weight",
                     "model.layers.0.mlp.down_proj.weight", "model.embed_tokens.weight", "model.norm.weight"):
            prm = dict(m.named_parameters())[name]
            idx = (0,) * prm.dim()
            if name == "model.embed_tokens.weight":
                idx = (300, 3)
            an = float(prm.grad[idx])
            with torch.no_grad():
                old = float(prm[idx])
                vals = []
                for dlt in (1e-6, -1e-6):
                    prm[idx] = old + dlt
                    ss, nn_ = m.loss_sum(b)
                    vals.append(float(ss) / nn_)
                prm[idx] = old
            fd = (vals[0] - vals[1]) / 2e-6
            worst = max(worst, abs(fd - an) / max(1e-8, abs(an)))
        check(f"[{variant}] gradients vs finite differences", worst < 1e-5, f"(worst rel err {worst:.1e})")

    # 2b. RoPE variants and sliding windows against the naive model (float64)
    for name, extra in (("yarn", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 128}, "rope_theta": 10000.0}),
                        ("linear", {"rope_parameters": {"type": "linear", "factor": 2.0, "rope_theta": 500.0}}),
                        ("dynamic", {"rope_scaling": {"rope_type": "dynamic", "factor": 3.0}}),
                        ("window", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 1})):
        cfg = dict(tiny_config("b"), num_hidden_layers=2, initializer_range=0.2, **extra)
        m = Qwen3Ref(cfg, torch.float64)
        m.init_weights(4)
        ids = [5, 17, 300, 2, 99, 450, 7, 8, 31, 260, 1, 400]
        ref_logits = _naive_forward_np(cfg, param_tensors(m), ids)
        with torch.no_grad():
            lg = m(torch.tensor([ids]))[0].numpy()
        err = float(np.abs(lg - ref_logits).max())
        check(f"[{name}] logits vs naive numpy (float64)", err < 1e-10, f"(max abs err {err:.2e})")
        plain = Qwen3Ref(dict(tiny_config("b"), num_hidden_layers=2, initializer_range=0.2,
                              rope_theta=Qwen3Config(cfg).rope_theta), torch.float64)
        plain.load_tensors(param_tensors(m))
        with torch.no_grad():
            d = float((plain(torch.tensor([ids]))[0] - m(torch.tensor([ids]))[0]).abs().max())
        check(f"[{name}] differs from plain RoPE / full attention", (d > 1e-3) == (name != "dynamic"),
              f"(max abs diff {d:.2e}; dynamic equals default below max_position_embeddings)")

    # 3. micro batches: global token mean == one big batch
    cfg = dict(tiny_config("b"), num_hidden_layers=1, initializer_range=0.2)
    m = Qwen3Ref(cfg, torch.float64)
    m.init_weights(5)
    rows = [[3, 4, 5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15]]
    labs = [[-100, 4, 5, 6, 7, 8], [9, 10, 11], [-100, -100, 14, 15]]
    m.zero_grad()
    l_one, n_one = train_step(m, [make_batch({"input_ids": rows, "labels": labs})])
    g_one = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad()
    l_mb, n_mb = train_step(m, [make_batch({"input_ids": rows[:1], "labels": labs[:1]}),
                                make_batch({"input_ids": rows[1:], "labels": labs[1:]})])
    gerr = max(float((p.grad - g_one[n]).abs().max()) for n, p in m.named_parameters())
    check("micro batches == one batch (loss, grads)", n_one == n_mb == 9 and abs(l_one - l_mb) < 1e-13
          and gerr < 1e-13, f"(loss {l_one:.10f} / {l_mb:.10f}, grad err {gerr:.1e})")
    # segment_shift drops exactly the boundary-crossing targets
    pk = make_batch({"input_ids": [[3, 4, 5, 6, 7]], "labels": [[3, 4, 5, 6, 7]], "cu_seqlens": [0, 3, 5]})
    check("segment_shift", count_targets(pk) == 4 and count_targets(pk, True) == 3)

    # 4. AdamW groups: 1-D params not decayed, >= 2-D decayed, against the closed form of step 1
    cfg = dict(tiny_config("b"), num_hidden_layers=1)
    m = Qwen3Ref(cfg, torch.float64)
    m.init_weights(0)
    opt = make_optimizer(m, lr=0.01, weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8)
    b = make_batch({"input_ids": [[1, 2, 3, 4]], "labels": [[1, 2, 3, 4]]})
    before = {k: v.clone() for k, v in param_tensors(m).items()}
    train_step(m, [b])
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    opt.step()
    worst = 0.0
    for n, p in m.named_parameters():
        wd = 0.1 if p.dim() >= 2 else 0.0
        gr = grads[n]
        # step 1: m = (1-b1) g, v = (1-b2) g^2, mhat = g, vhat = g^2
        upd = gr / (gr.abs() + 1e-8)
        expect = before[n] * (1 - 0.01 * wd) - 0.01 * upd
        worst = max(worst, float((p.detach() - expect).abs().max()))
    check("AdamW step 1 (decay only dim>=2) vs closed form", worst < 1e-12, f"(max abs err {worst:.1e})")

    print("selftest:", "PASSED" if ok else "FAILED")
    if not ok:
        sys.exit(1)


def tiny_config(variant):
    """The test configs of make_tiny_model.py (kept here so the self-test is standalone)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_tiny_model
    return make_tiny_model.config(variant)


if __name__ == "__main__":
    main()
