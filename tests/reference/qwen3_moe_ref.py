#!/usr/bin/env python3
"""Independent PyTorch reference of Qwen3MoeForCausalLM (transformers' Qwen3-MoE semantics).

Run with the project environment's python (.venv, scripts/setup). Written as an independent model
when transformers could not be installed; tests/reference/hf_oracle.py now checks twinkle against
transformers itself, and this reference stays for what transformers has no knob for (layouts).  Attention,
norms, RoPE, the dense MLP, batches and the label shift are tests/reference/qwen3_ref.py's (imported,
not repeated); this file adds what Qwen3-MoE changes, written from the facts of transformers'
models/qwen3_moe/modeling_qwen3_moe.py (no code copied):

  * Decoder layer i uses the sparse MoE block iff  i not in mlp_only_layers and num_experts > 0
    and (i + 1) % decoder_sparse_step == 0; otherwise the dense MLP of width intermediate_size.
  * Qwen3MoeSparseMoeBlock on the flattened tokens x [N, H]:
      router_logits = gate(x)                       (nn.Linear(H, E, bias=False), model dtype)
      p = softmax(router_logits, dim=-1, dtype=float32)           over ALL experts
      w, sel = torch.topk(p, k)                     (descending; ties: see topk_lower)
      if norm_topk_prob: w = w / w.sum(-1)          (renormalised top-k)
      out[t] = sum_j w[t, j].to(x.dtype) * expert_{sel[t, j]}(x[t]),  expert = SwiGLU MLP of
      width moe_intermediate_size; autograd gives the gradient through the full softmax.
  * Aux loss (Qwen3MoeForCausalLM with output_router_logits): loss = CE_mean + router_aux_loss_coef
    * load_balancing_loss_func(router logits of the MoE layers, E, k, attention_mask):
      softmax over the concatenated logits [L*N, E], top-k one-hot f [L*N, k, E];
      tokens_per_expert[k, E] and router_prob_per_expert[E] are means over the real tokens
      (attention_mask 1), loss = E * sum(tokens_per_expert * router_prob_per_expert).
  * Megatron-core's per-layer definition (switch_load_balancing_loss_func): per MoE layer,
    coeff * E / (k * N^2) * sum_e (sum_t p_te) * count_e over the N real tokens, and the router
    z-loss (z_loss_func): coeff * mean_t logsumexp(logits_t)^2.

Weight names are HF's: model.layers.{i}.mlp.gate.weight [E, H],
model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight, dense layers
model.layers.{i}.mlp.{gate,up,down}_proj.weight; the rest as Qwen3.

Training objective of `step` (one process; the definitions twinkle's MoE path must equal):
  loss = CE_sum / N_targets (global token mean over the micro batches, as qwen3_ref.py)
         + aux_coef * mean over micro batches of aux_mb
         + z_coef * mean over micro batches of sum over MoE layers of z_mb,layer
  aux_mb, --aux-type global: load_balancing_loss over the micro batch's MoE layers (padding
  excluded) - for one micro batch exactly transformers' loss = CE_mean + router_aux_loss_coef * aux;
  --aux-type per_layer: the sum over MoE layers of megatron_aux_loss (coefficient 1), as Megatron
  adds every layer's aux loss with the main-loss scale 1 / num_microbatches.
  The aux value (coefficient excluded) is reported even when aux_coef is 0, with the expert load
  (max / min share of the routed slots of the real tokens, all MoE layers and micro batches).

CLI (batch.json as qwen3_ref.py; rows right-padded; padding = beyond a row's length or beyond
cu_seqlens[-1]):
  init  --config config.json --seed S --out DIR [--dtype F32|BF16|F16]
  loss  --model DIR --batch batch.json [--aux-coef X --aux-type global|per_layer --z-coef X]
  step  --model DIR --batch batch.json --steps N --lr --weight-decay --beta1 --beta2 --eps
        --clip-grad --out OUT [--dtype float32|float64] [--aux-coef ...] [--save-dtype F32|F64]
        OUT/metrics.json {"loss", "lm_loss", "aux_loss", "z_loss", "grad_norm", "tokens",
        "expert_load_max", "expert_load_min", ...} per step, OUT/grads_step0.safetensors,
        OUT/final.safetensors (as qwen3_ref.py step).
  selftest
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3_ref as q3  # noqa: E402
import safetensors_py as st  # noqa: E402


# ---------------------------------------------------------------------------------------------
# config


def moe_config(d):
    """A qwen3_moe config.json dict -> a qwen3_ref.Qwen3Config carrying the MoE fields.
    Defaults are transformers' Qwen3MoeConfig's (head_dim absent -> hidden / heads, as the model's
    getattr(config, "head_dim", hidden_size // num_attention_heads); norm_topk_prob False,
    decoder_sparse_step 1, mlp_only_layers [], router_aux_loss_coef 0.001,
    output_router_logits False; num_experts 128, num_experts_per_tok 8, moe_intermediate_size
    768)."""
    if not isinstance(d, dict):
        raise q3.ConfigError("config: not a JSON object")
    mt = d.get("model_type", "qwen3_moe")
    if mt != "qwen3_moe":
        raise q3.ConfigError(f"config: model_type {mt!r} is not 'qwen3_moe'")
    dense = dict(d, model_type="qwen3")
    if dense.get("head_dim") is None:
        dense["head_dim"] = dense.get("hidden_size", 2048) // dense.get("num_attention_heads", 32)
    c = q3.Qwen3Config(dense)
    c.model_type = "qwen3_moe"
    c.num_experts = int(d.get("num_experts", 128))
    c.num_experts_per_tok = int(d.get("num_experts_per_tok", 8))
    c.moe_intermediate_size = int(d.get("moe_intermediate_size", 768))
    c.norm_topk_prob = bool(d.get("norm_topk_prob", False))
    c.decoder_sparse_step = int(d.get("decoder_sparse_step", 1))
    c.mlp_only_layers = list(d.get("mlp_only_layers") or [])
    c.router_aux_loss_coef = float(d.get("router_aux_loss_coef", 0.001))
    c.output_router_logits = bool(d.get("output_router_logits", False))
    if not 1 <= c.num_experts_per_tok <= c.num_experts:
        raise q3.ConfigError(f"config: num_experts_per_tok {c.num_experts_per_tok} outside [1, {c.num_experts}]")
    return c


def is_moe_layer(c, i):
    return (i not in c.mlp_only_layers) and c.num_experts > 0 and (i + 1) % c.decoder_sparse_step == 0


# ---------------------------------------------------------------------------------------------
# the sparse block and the router losses


class ExpertMLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def topk_lower(p, k):
    """torch.topk(p, k) with a defined tie order: equal values give the lower expert index first
    (a stable descending sort).  torch.topk itself leaves the order of ties unspecified: on CPU
    (PyTorch 1.13) topk([.5, 1, 1, 1, 0], 2) returns indices [1, 3]; transformers and Megatron call
    torch.topk, so ties are implementation-defined there, and twinkle (like this reference) fixes
    them to the lower index.  Without exact ties both agree with torch.topk."""
    v, i = torch.sort(p, dim=-1, descending=True, stable=True)
    return v[..., :k], i[..., :k]


def route(router_logits, k, norm_topk_prob):
    """[N, E] logits -> (full softmax probs [N, E] float32 (float64 for float64 logits),
    top-k weights [N, k], selected experts [N, k])."""
    p = F.softmax(router_logits, dim=-1, dtype=q3._upcast(router_logits.dtype))
    w, sel = topk_lower(p, k)
    if norm_topk_prob:
        w = w / w.sum(dim=-1, keepdim=True)
    return p, w, sel


class SparseMoeBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.num_experts, self.top_k, self.norm_topk_prob = c.num_experts, c.num_experts_per_tok, c.norm_topk_prob
        self.gate = nn.Linear(c.hidden_size, c.num_experts, bias=False)
        self.experts = nn.ModuleList([ExpertMLP(c.hidden_size, c.moe_intermediate_size)
                                      for _ in range(c.num_experts)])

    def forward(self, x, fixed_logits=None, routing_out=None):
        """x [..., H] -> (out [..., H], router_logits [N, E]).  fixed_logits replaces the gate's
        output (tests of the combine weights); routing_out (a dict) receives probs / w / sel."""
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        logits = self.gate(h) if fixed_logits is None else fixed_logits
        p, w, sel = route(logits, self.top_k, self.norm_topk_prob)
        w = w.to(h.dtype)
        if routing_out is not None:
            routing_out.update(probs=p, w=w, sel=sel)
        out = torch.zeros_like(h)
        for e in range(self.num_experts):  # the transformers loop: tokens of expert e, weighted, index_add
            tok, slot = torch.where(sel == e)
            if tok.numel() == 0:
                continue
            y = self.experts[e](h[tok]) * w[tok, slot, None]
            out = out.index_add(0, tok, y.to(h.dtype))
        return out.reshape(shape), logits


def load_balancing_loss(router_logits, num_experts, top_k, attention_mask=None):
    """transformers' load_balancing_loss_func: router_logits = list of [B*S, E] (the MoE layers
    of one forward), attention_mask [B, S] (1 = real token) or None."""
    if not router_logits:
        return torch.zeros(())
    cat = torch.cat(list(router_logits), dim=0)
    p = F.softmax(cat, dim=-1)
    _, sel = topk_lower(p, top_k)
    onehot = F.one_hot(sel, num_experts).to(p.dtype)  # [L*N, k, E]
    if attention_mask is None:
        m = torch.ones(cat.shape[0], dtype=p.dtype)
    else:
        m = attention_mask.reshape(-1).to(p.dtype).repeat(len(router_logits))
    tokens_per_expert = (onehot * m[:, None, None]).sum(0) / m.sum()  # [k, E]
    prob_per_expert = (p * m[:, None]).sum(0) / m.sum()  # [E]
    return num_experts * (tokens_per_expert * prob_per_expert[None]).sum()


def megatron_aux_loss(logits, num_experts, top_k, coeff, mask=None):
    """Megatron switch_load_balancing_loss_func for one layer: coeff * E / (k * N^2) *
    sum_e (sum_t p_te) * count_e over the N real tokens (counts from the top-k of the softmax)."""
    p = F.softmax(logits, dim=-1)
    _, sel = topk_lower(p, top_k)
    m = torch.ones(logits.shape[0], dtype=p.dtype) if mask is None else mask.reshape(-1).to(p.dtype)
    counts = (F.one_hot(sel, num_experts).to(p.dtype) * m[:, None, None]).sum((0, 1)).detach()
    n = m.sum()
    return coeff * num_experts / (top_k * n * n) * ((p * m[:, None]).sum(0) * counts).sum()


def z_loss(logits, coeff, mask=None):
    """Megatron z_loss_func: coeff * mean over the real tokens of logsumexp(logits_t)^2."""
    lse = torch.logsumexp(logits, dim=-1)
    m = torch.ones_like(lse) if mask is None else mask.reshape(-1).to(lse.dtype)
    return coeff * (lse.square() * m).sum() / m.sum()


# ---------------------------------------------------------------------------------------------
# the model


class DecoderLayer(nn.Module):
    def __init__(self, c, i):
        super().__init__()
        self.self_attn = q3.Attention(c)
        self.mlp = SparseMoeBlock(c) if is_moe_layer(c, i) else q3.MLP(c)
        self.input_layernorm = q3.RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = q3.RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, h, cos, sin, allowed, router_out):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, allowed)
        x = self.post_attention_layernorm(h)
        if isinstance(self.mlp, SparseMoeBlock):
            y, logits = self.mlp(x)
            router_out.append(logits)
        else:
            y = self.mlp(x)
        return h + y


class _Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size, padding_idx=c.pad_token_id)
        self.layers = nn.ModuleList([DecoderLayer(c, i) for i in range(c.num_hidden_layers)])
        self.norm = q3.RMSNorm(c.hidden_size, c.rms_norm_eps)


class Qwen3MoeRef(nn.Module):
    """Qwen3MoeForCausalLM.  named_parameters() are HF's names in HF's order."""

    def __init__(self, config, dtype=torch.float32):
        super().__init__()
        self.config = config if isinstance(config, q3.Qwen3Config) else moe_config(config)
        c = self.config
        self.model = _Body(c)
        self.lm_head = None if c.tie_word_embeddings else nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.to(dtype)
        self.dtype = dtype

    # HF init (normal(0, initializer_range) for Linear/Embedding, norms 1) and loading by HF name
    # are the dense reference's, which iterate named_parameters().
    init_weights = q3.Qwen3Ref.init_weights
    load_tensors = q3.Qwen3Ref.load_tensors

    def forward(self, input_ids, position_ids=None, segment_ids=None, router_out=None):
        """input_ids [B, S] -> logits [B, S, V]; router_out (list) receives each MoE layer's
        router logits [B*S, E] in layer order."""
        c = self.config
        B, S = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(S, dtype=torch.int64)[None].expand(B, S)
            if segment_ids is None:
                segment_ids = torch.zeros(B, S, dtype=torch.int64)
        elif segment_ids is None:
            segment_ids = q3.segments_from_position_ids(position_ids)
        causal = torch.ones(S, S, dtype=torch.bool).tril()
        allowed = (causal[None] & (segment_ids[:, :, None] == segment_ids[:, None, :]))[:, None]
        cos, sin = q3.rope_cos_sin(position_ids, c.head_dim, c.rope_theta, self.dtype)
        router_out = [] if router_out is None else router_out
        h = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            h = layer(h, cos, sin, allowed, router_out)
        h = self.model.norm(h)
        w = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(h, w)

    def losses(self, batch, attention_mask=None):
        """-> (CE sum over the labelled targets, number of targets, transformers' aux loss value
        (load_balancing_loss; padding excluded by attention_mask [B, S]), router logits list)."""
        router = []
        logits = self(batch["input_ids"], batch.get("position_ids"), batch.get("segment_ids"), router_out=router)
        tgt = q3.shift_labels(batch["labels"])
        V = self.config.vocab_size
        ce = F.cross_entropy(logits.to(q3._upcast(self.dtype)).reshape(-1, V), tgt.reshape(-1),
                             ignore_index=q3.IGNORE_INDEX, reduction="sum")
        aux = load_balancing_loss(router, self.config.num_experts, self.config.num_experts_per_tok, attention_mask)
        return ce, int((tgt != q3.IGNORE_INDEX).sum()), aux, router


def attention_mask_of(d):
    """The [B, S] attention mask (1 = real token) of a batch dict as qwen3_ref.make_batch pads it."""
    ids = d["input_ids"]
    S = max(len(r) for r in ids)
    m = torch.zeros(len(ids), S, dtype=torch.int64)
    for i, r in enumerate(ids):
        m[i, :len(r)] = 1
    return m


# ---------------------------------------------------------------------------------------------
# training (CLI)


def real_token_mask(mb, row_lengths=None):
    """[B, S] 1 for real tokens: positions < each row's length (right padding), and for a packed
    row (cu_seqlens) positions < cu_seqlens[-1]."""
    B, S = mb["input_ids"].shape
    m = torch.ones(B, S, dtype=torch.int64)
    if row_lengths is not None:
        for i, n in enumerate(row_lengths):
            m[i, n:] = 0
    return m


def load_steps(path):
    """batch.json -> list of steps, each a list of (micro batch dict, attention mask)."""
    with open(path) as f:
        d = json.load(f)

    def one(x, where):
        mb = q3.make_batch(x, where)
        if x.get("cu_seqlens") is not None:
            lengths = [int(x["cu_seqlens"][-1])]
        else:
            lengths = [len(r) for r in x["input_ids"]]
        return mb, real_token_mask(mb, lengths)

    def one_step(x, where):
        if "micro_batches" in x:
            return [one(m, f"{where}.micro_batches[{i}]") for i, m in enumerate(x["micro_batches"])]
        return [one(x, where)]

    if "steps" in d:
        return [one_step(x, f"{path}: steps[{i}]") for i, x in enumerate(d["steps"])]
    return [one_step(d, path)]


def load_model(model_dir, dtype=torch.float32):
    model = Qwen3MoeRef(q3.read_config(os.path.join(model_dir, "config.json")), dtype)
    model.load_tensors(st.load_dir(model_dir), source=model_dir)
    return model


def step_losses(model, micro_batches, aux_coef, aux_type, z_coef, backward=True):
    """One optimizer step's forward (+ backward) over the micro batches with the objective above.
    Returns a dict of floats: loss, lm_loss, aux_loss, z_loss, tokens, expert_load_max/min."""
    c = model.config
    E, k = c.num_experts, c.num_experts_per_tok
    total = sum(q3.count_targets(mb) for mb, _ in micro_batches)
    if total == 0:
        raise ValueError("batch has no labelled targets")
    nmb = len(micro_batches)
    lm = aux_sum = z_sum = 0.0
    counts = torch.zeros(E, dtype=torch.float64)
    for mb, mask in micro_batches:
        ce, _, aux_g, router = model.losses(mb, mask)
        if aux_type == "global":
            aux = aux_g
        else:
            aux = sum(megatron_aux_loss(lg, E, k, 1.0, mask) for lg in router) if router else torch.zeros(())
        z = sum(z_loss(lg, 1.0, mask) for lg in router) if router else torch.zeros(())
        obj = ce / total + aux_coef * aux / nmb + z_coef * z / nmb
        if backward:
            obj.backward()
        lm += float(ce)
        aux_sum += float(aux)
        z_sum += float(z)
        keep = mask.reshape(-1).bool()
        for lg in router:
            _, sel = topk_lower(F.softmax(lg.detach(), -1), k)
            counts += F.one_hot(sel[keep], E).sum((0, 1)).double()
    share = counts / counts.sum() if float(counts.sum()) > 0 else counts
    lm_loss = lm / total
    return {"loss": lm_loss + aux_coef * aux_sum / nmb + z_coef * z_sum / nmb, "lm_loss": lm_loss,
            "aux_loss": aux_sum / nmb, "z_loss": z_sum / nmb, "tokens": total,
            "expert_load_max": float(share.max()) if E else 0.0, "expert_load_min": float(share.min()) if E else 0.0}


def cmd_init(a):
    model = Qwen3MoeRef(q3.read_config(a.config), torch.float32)
    model.init_weights(a.seed)
    os.makedirs(a.out, exist_ok=True)
    st.save(os.path.join(a.out, st.SINGLE_NAME), q3.param_tensors(model), dtype=a.dtype)
    if os.path.abspath(a.config) != os.path.abspath(os.path.join(a.out, "config.json")):
        shutil.copyfile(a.config, os.path.join(a.out, "config.json"))
    print(json.dumps({"out": a.out, "params": sum(p.numel() for p in model.parameters())}))


def cmd_loss(a):
    model = load_model(a.model, q3._DTYPES[a.dtype])
    with torch.no_grad():
        r = step_losses(model, load_steps(a.batch)[0], a.aux_coef, a.aux_type, a.z_coef, backward=False)
    print(json.dumps(r))


def cmd_step(a):
    dtype = q3._DTYPES[a.dtype]
    if dtype == torch.bfloat16:
        raise SystemExit("qwen3_moe_ref step: float32 or float64 only")
    model = load_model(a.model, dtype)
    steps = load_steps(a.batch)
    opt = q3.make_optimizer(model, a.lr, a.weight_decay, a.beta1, a.beta2, a.eps)
    params = list(model.parameters())
    os.makedirs(a.out, exist_ok=True)
    keys = ["loss", "lm_loss", "aux_loss", "z_loss", "grad_norm", "tokens", "clip_coef", "expert_load_max",
            "expert_load_min"]
    metrics = {k: [] for k in keys}
    metrics["settings"] = {k: getattr(a, k) for k in ("lr", "weight_decay", "beta1", "beta2", "eps", "clip_grad",
                                                      "dtype", "steps", "aux_coef", "aux_type", "z_coef")}
    for i in range(max(a.steps, 1)):
        opt.zero_grad(set_to_none=True)
        r = step_losses(model, steps[i % len(steps)], a.aux_coef, a.aux_type, a.z_coef)
        for p in params:  # an expert that received no token has a zero gradient
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if i == 0:
            st.save(os.path.join(a.out, "grads_step0.safetensors"),
                    {n: p.grad.detach().clone() for n, p in model.named_parameters()}, dtype=a.save_dtype)
        max_norm = a.clip_grad if a.clip_grad > 0 else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        r["grad_norm"] = norm
        r["clip_coef"] = min(1.0, max_norm / (norm + 1e-6)) if a.clip_grad > 0 else 1.0
        for k in keys:
            metrics[k].append(r[k])
        if a.steps > 0:
            opt.step()
        print(f"step {i}: loss {r['loss']:.8f} lm {r['lm_loss']:.8f} aux {r['aux_loss']:.6f} "
              f"grad_norm {norm:.8f} load max {r['expert_load_max']:.3f} min {r['expert_load_min']:.3f}",
              file=sys.stderr)
    st.save(os.path.join(a.out, "final.safetensors"), q3.param_tensors(model), dtype=a.save_dtype)
    with open(os.path.join(a.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    print(json.dumps({"loss": metrics["loss"], "grad_norm": metrics["grad_norm"]}))


# ---------------------------------------------------------------------------------------------
# selftest: the block and the losses against independent formulations


def tiny_config(**over):
    d = {"model_type": "qwen3_moe", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 24,
         "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
         "num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 12, "norm_topk_prob": True,
         "mlp_only_layers": [1], "tie_word_embeddings": False, "rope_theta": 10000.0}
    d.update(over)
    return d


def selftest():
    torch.manual_seed(0)
    failures = []

    def check(name, cond, detail=""):
        print(f"  {'ok  ' if cond else 'FAIL'} {name} {detail}")
        if not cond:
            failures.append(name)

    # defaults
    c = moe_config({"model_type": "qwen3_moe", "vocab_size": 8, "hidden_size": 64, "intermediate_size": 8,
                    "num_hidden_layers": 1, "num_attention_heads": 4})
    check("defaults", (c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size, c.norm_topk_prob,
                       c.decoder_sparse_step, c.mlp_only_layers, c.router_aux_loss_coef, c.output_router_logits,
                       c.head_dim) == (128, 8, 768, False, 1, [], 0.001, False, 16))
    c = moe_config(tiny_config(num_hidden_layers=6, mlp_only_layers=[1], decoder_sparse_step=2))
    check("layer rule", [is_moe_layer(c, i) for i in range(6)] == [False, False, False, True, False, True])

    # the embedded default MoE model: sparse layers 0, 2, 3; untied; renormalised top-2 of 8
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    c = moe_config(q3.read_config(os.path.join(root, "models", "qwen3-moe-tiny", "config.json")))
    check("models/qwen3-moe-tiny", [is_moe_layer(c, i) for i in range(c.num_hidden_layers)] ==
          [True, False, True, True] and (c.num_experts, c.num_experts_per_tok, c.norm_topk_prob,
                                         c.tie_word_embeddings) == (8, 2, True, False))

    # the block == a dense formulation (every expert on every token, weights scattered to [N, E])
    for norm in (True, False):
        c = moe_config(tiny_config(norm_topk_prob=norm))
        blk = SparseMoeBlock(c).double()
        x = torch.randn(10, c.hidden_size, dtype=torch.float64)
        out, logits = blk(x)
        p = torch.softmax(logits, -1)
        dense_w = torch.zeros_like(p)
        order = torch.argsort(-p, dim=-1, stable=True)[:, :c.num_experts_per_tok]
        dense_w.scatter_(1, order, p.gather(1, order))
        if norm:
            dense_w = dense_w / dense_w.sum(-1, keepdim=True)
        ref = sum(dense_w[:, e:e + 1] * blk.experts[e](x) for e in range(c.num_experts))
        check(f"block == dense formulation (norm_topk_prob={norm})", torch.allclose(out, ref, atol=1e-12))
    # ties go to the lower index
    _, _, sel = route(torch.tensor([[0.5, 1.0, 1.0, 1.0, 0.0]], dtype=torch.float64), 2, True)
    check("topk ties to the lower index", sel.tolist() == [[1, 2]], str(sel.tolist()))
    x = torch.randn(50, 16, dtype=torch.float64)
    check("topk_lower == torch.topk without ties", torch.equal(topk_lower(x, 5)[1], torch.topk(x, 5)[1]))

    # load_balancing_loss == E/N^2 sum count*Psum; perfect balance gives k; padding excluded
    E, k, N = 4, 2, 8
    lg = [torch.randn(N, E, dtype=torch.float64) for _ in range(2)]
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    aux = load_balancing_loss(lg, E, k, mask)
    keep = mask.reshape(-1).bool()
    real = [g[keep] for g in lg]
    aux_nomask = load_balancing_loss(real, E, k, None)
    check("aux: padding excluded == padding removed", torch.allclose(aux, aux_nomask, atol=1e-14))
    cat = torch.cat(real)
    pp = torch.softmax(cat, -1)
    cnt = F.one_hot(torch.topk(pp, k, -1)[1], E).sum((0, 1)).double()
    n_all = cat.shape[0]
    check("aux == E/N^2 sum count*Psum", torch.allclose(aux, E / n_all ** 2 * (cnt * pp.sum(0)).sum(), atol=1e-14))
    flat = torch.zeros(N, E, dtype=torch.float64)
    flat[:, :] = torch.tensor([3.0, 3.0, 0.0, 0.0])[None]
    flat[N // 2:] = torch.tensor([0.0, 0.0, 3.0, 3.0])[None]
    pb = load_balancing_loss([flat], E, k)
    # balanced counts (each expert N*k/E), probs not uniform: E * sum (k/E) * P_e = k * sum P_e = k
    check("aux with balanced counts == k", abs(float(pb) - k) < 1e-12, f"{float(pb)}")
    mg = megatron_aux_loss(flat, E, k, 1.0)
    check("megatron aux with balanced counts == 1", abs(float(mg) - 1.0) < 1e-12, f"{float(mg)}")

    # the whole model runs, named like HF, and the aux loss backpropagates to every gate
    cfg = tiny_config()
    m = Qwen3MoeRef(cfg, torch.float64)
    m.init_weights(1)
    names = [n for n, _ in m.named_parameters()]
    want_prefix = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"]
    check("names start like HF", names[:2] == want_prefix, str(names[:2]))
    check("gate and expert names", "model.layers.0.mlp.gate.weight" in names and
          "model.layers.2.mlp.experts.5.down_proj.weight" in names and
          "model.layers.1.mlp.gate_proj.weight" in names and "lm_head.weight" in names)
    b = q3.make_batch({"input_ids": [[1, 2, 3, 4, 5], [6, 7, 8]], "labels": [[1, 2, 3, 4, 5], [-100, 7, 8]]})
    am = attention_mask_of({"input_ids": [[1, 2, 3, 4, 5], [6, 7, 8]]})
    ce, n, aux, router = m.losses(b, am)
    check("two MoE layers' logits", len(router) == 2)
    (ce / n + 0.5 * aux).backward()
    check("gate gradients nonzero", all(float(m.model.layers[i].mlp.gate.weight.grad.abs().sum()) > 0 for i in (0, 2)))
    check("dense layer has no gate", not hasattr(m.model.layers[1].mlp, "gate"))
    # CLI: init -> step (aux global on, padded rows, 2 micro batches) runs, learns, and its step-0
    # objective equals transformers' formula computed here by hand for each micro batch
    with tempfile.TemporaryDirectory() as tmp:
        cfgp = os.path.join(tmp, "config.json")
        with open(cfgp, "w") as f:
            json.dump(tiny_config(), f)
        batch = {"micro_batches": [
            {"input_ids": [[1, 2, 3, 4, 5, 6], [7, 8, 9]], "labels": [[1, 2, 3, 4, 5, 6], [-100, 8, 9]]},
            {"input_ids": [[10, 11, 12, 13]], "labels": [[10, 11, 12, 13]]}]}
        bp = os.path.join(tmp, "batch.json")
        with open(bp, "w") as f:
            json.dump(batch, f)
        main(["init", "--config", cfgp, "--seed", "3", "--out", os.path.join(tmp, "m")])
        main(["step", "--model", os.path.join(tmp, "m"), "--batch", bp, "--steps", "4", "--lr", "1e-2",
              "--aux-coef", "0.1", "--out", os.path.join(tmp, "o")])
        with open(os.path.join(tmp, "o", "metrics.json")) as f:
            met = json.load(f)
        check("step: loss falls", met["loss"][-1] < met["loss"][0], str(met["loss"]))
        check("step: loss = lm + coef * aux", abs(met["loss"][0] - met["lm_loss"][0] - 0.1 * met["aux_loss"][0]) < 1e-9)
        m = load_model(os.path.join(tmp, "m"), torch.float64)
        mbs = load_steps(bp)[0]
        n_all = sum(q3.count_targets(mb) for mb, _ in mbs)
        auxes = []
        ce_all = 0.0
        for mb, mask in mbs:
            ce, _, _, router = m.losses(mb, mask)
            real = [lg[mask.reshape(-1).bool()] for lg in router]  # padding removed instead of masked
            auxes.append(float(load_balancing_loss(real, m.config.num_experts, m.config.num_experts_per_tok)))
            ce_all += float(ce)
        want = ce_all / n_all + 0.1 * sum(auxes) / 2
        check("step: step-0 objective by hand", abs(met["loss"][0] - want) < 1e-5 * abs(want),
              f"{met['loss'][0]} vs {want}")
        check("step: load shares", 0 < met["expert_load_min"][0] <= met["expert_load_max"][0] < 1)
    print("qwen3_moe_ref selftest:", "FAILED " + ", ".join(failures) if failures else "all ok")
    return 1 if failures else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--model", required=True, help="dir with config.json + safetensors")
        p.add_argument("--batch", required=True, help="batch.json")
        p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
        p.add_argument("--aux-coef", type=float, default=0.0, help="load-balancing loss coefficient")
        p.add_argument("--aux-type", choices=["global", "per_layer"], default="global")
        p.add_argument("--z-coef", type=float, default=0.0, help="router z-loss coefficient")
        p.add_argument("--threads", type=int, default=0)

    p = sub.add_parser("init", help="random-init checkpoint (HF init, HF names)")
    p.add_argument("--config", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", choices=["F32", "BF16", "F16"], default="F32")
    p.add_argument("--threads", type=int, default=0)
    p.set_defaults(fn=cmd_init)

    p = sub.add_parser("loss", help="print the losses of the first step's micro batches")
    common(p)
    p.set_defaults(fn=cmd_loss)

    p = sub.add_parser("step", help="N AdamW training steps")
    common(p)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--clip-grad", type=float, default=1.0)
    p.add_argument("--save-dtype", choices=["F32", "F64"], default="F32")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_step)

    p = sub.add_parser("selftest")
    p.add_argument("--threads", type=int, default=0)
    p.set_defaults(fn=lambda a: selftest())

    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    if getattr(a, "steps", 0) < 0:
        raise SystemExit("--steps must be >= 0")
    return a.fn(a) or 0


if __name__ == "__main__":
    sys.exit(main())
