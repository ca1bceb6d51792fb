#!/usr/bin/env python3
"""transformers, PEFT and torch themselves as the oracle of twinkle's training step.

The same command line and output files as tests/reference/qwen3_ref.py / qwen3_moe_ref.py /
lora_ref.py `step` (check_train.py and check_train_moe.py pick it with --oracle hf), computed
with the libraries twinkle's users run, not with a model written for the tests:

  * the model is transformers' own: AutoModelForCausalLM.from_pretrained(DIR, dtype=float64,
    attn_implementation="eager"; MoE: experts_implementation="eager") -> Qwen3ForCausalLM or Qwen3MoeForCausalLM, reading the config
    (every RoPE variant, sliding window, tie rule, mlp_only_layers, norm_topk_prob) and the
    safetensors exactly as a user's from_pretrained does;
  * the loss is transformers' own: model(input_ids, attention_mask, labels,
    num_items_in_batch=N) -> ForCausalLMLoss (label shift, ignore_index -100, the sum over the
    micro-batch divided by the step's N labelled targets: the global per-token mean over the
    micro-batches, as transformers' Trainer accumulates gradients); with output_router_logits the
    model adds router_aux_loss_coef * load_balancing_loss_func over the real tokens
    (attention_mask), per forward. Note: ForCausalLMLoss and load_balancing_loss_func compute in
    float32 even for a float64 model (transformers upcasts logits with .float()), and so do the
    eager attention's softmax and Qwen3-MoE's router softmax (softmax(..., dtype=torch.float32 /
    torch.float) in modeling_qwen3.py / modeling_qwen3_moe.py), so this oracle is good to ~1e-7
    relative (5e-8 on the loss with the rigged router of check_train_moe.py --rig-router, whose
    logits ~8 sharpen the routing), far inside the 1e-5 the checks use;
  * the optimizer is torch.optim.AdamW (decoupled weight decay; Megatron's two groups: dim >= 2
    decayed, biases and norm weights not) after torch.nn.utils.clip_grad_norm_ (its returned
    total norm is the logged grad norm);
  * LoRA is PEFT's: PeftModel.from_pretrained(base, ADAPTER, is_trainable=True) loads the
    adapter directory twinkle saved (so the load itself is checked), only lora_A / lora_B train;
  * gradients and parameters are written under the checkpoint's names by transformers' own
    save_pretrained (its reverse weight conversion: Qwen3-MoE's fused experts tensors back to
    model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight), so nothing here maps names.

Rows are right-padded per micro-batch (token 0, label -100, attention_mask 0); packed batches
(position_ids / cu_seqlens) are refused: transformers' eager attention has no segment mask.

CLI:
  step  --model DIR --batch batch.json --steps N --lr --weight-decay --beta1 --beta2 --eps
        --clip-grad --out OUT [--dtype float64|float32] [--save-dtype F64|F32]
        [--aux-coef X --aux-type global --z-coef 0] [--adapter DIR]
        OUT/metrics.json (loss, grad_norm, tokens, clip_coef; MoE: lm_loss, aux_loss, z_loss,
        expert_load_max/min), OUT/grads_step0.safetensors, OUT/final.safetensors (LoRA: the
        adapter's tensors under twinkle's / lora_ref.py's names, and adam_sensitivity.safetensors)
  loss  --model DIR [--model DIR2 ...] --batch batch.json [--adapter DIR] [--dtype ...]
        -> {"loss" (the first model's), "losses" (each model's), "tokens"}
"""
import argparse
import contextlib
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_py as st  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

IGNORE_INDEX = -100
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def micro_batch(d, where):
    """{"input_ids": rows, "labels": rows} -> right-padded int64 tensors and the attention mask."""
    if "position_ids" in d or "cu_seqlens" in d:
        raise SystemExit(f"hf_oracle: {where}: packed batches are not supported (eager attention has no "
                         "segment mask); use tests/reference/qwen3_ref.py")
    ids, labs = d["input_ids"], d["labels"]
    if not ids or len(ids) != len(labs):
        raise SystemExit(f"hf_oracle: {where}: {len(ids)} input_ids rows but {len(labs)} labels rows")
    S = max(len(r) for r in ids)
    B = len(ids)
    out = {"input_ids": torch.zeros(B, S, dtype=torch.int64),
           "labels": torch.full((B, S), IGNORE_INDEX, dtype=torch.int64),
           "attention_mask": torch.zeros(B, S, dtype=torch.int64)}
    for i, (r, lr) in enumerate(zip(ids, labs)):
        if len(r) != len(lr) or not r:
            raise SystemExit(f"hf_oracle: {where}: row {i}: {len(r)} input_ids, {len(lr)} labels")
        out["input_ids"][i, :len(r)] = torch.tensor(r)
        out["labels"][i, :len(r)] = torch.tensor(lr)
        out["attention_mask"][i, :len(r)] = 1
    return out


def load_steps(path):
    """batch.json (one batch, {"micro_batches": [...]} or {"steps": [...]}) -> steps of micro-batches."""
    with open(path) as f:
        d = json.load(f)

    def one(x, where):
        if "micro_batches" in x:
            return [micro_batch(m, f"{where}.micro_batches[{i}]") for i, m in enumerate(x["micro_batches"])]
        return [micro_batch(x, where)]

    if "steps" in d:
        return [one(x, f"{path}: steps[{i}]") for i, x in enumerate(d["steps"])]
    return [one(d, path)]


def attention_mask(mb, moe):
    """The attention_mask given to transformers. Dense models: none. The rows are right-padded and the
    attention causal, so a real token never sees the padding and its outputs are the same with or without
    the mask; with the mask, transformers 5.23's eager attention under a sliding window gives a padding
    query whose whole window is padding a fully masked row -> NaN, and the next layer's P @ V then
    multiplies those NaN values by 0 for every real query (NaN loss; seen with sliding_window 5 on rows
    of 40..64 tokens). Qwen3-MoE: the mask, which load_balancing_loss_func needs to leave the padding
    out of the router statistics (the MoE configs here have no sliding window)."""
    return mb["attention_mask"] if moe else None


def targets(mb):
    """labelled targets after transformers' shift (labels[:, 1:] != -100)."""
    return int((mb["labels"][:, 1:] != IGNORE_INDEX).sum())


def moe_dir(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f).get("model_type") == "qwen3_moe"


def load_model(model_dir, dtype, adapter=None):
    """transformers' model (eager attention; Qwen3-MoE: the eager expert loop, one F.linear per routed
    expert, since torch's grouped_mm has no float64 kernel)."""
    kw = {"experts_implementation": "eager"} if moe_dir(model_dir) else {}
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager", **kw)
    model.train()  # as a training step runs it (the tiny configs have attention_dropout 0)
    if adapter:
        import peft
        model = peft.PeftModel.from_pretrained(model, adapter, is_trainable=True)
        model.train()
    return model


def is_moe(model):
    return getattr(model.config, "model_type", "") == "qwen3_moe" or \
        getattr(getattr(model, "base_model", None), "config", None) is not None and \
        getattr(model.base_model.config, "model_type", "") == "qwen3_moe"


def forward_losses(model, mbs, aux_coef):
    """One step's forward + backward over the micro-batches. Returns the metrics of the step."""
    moe = is_moe(model)
    total = sum(targets(mb) for mb in mbs)
    if total == 0:
        raise SystemExit("hf_oracle: the step has no labelled targets")
    nmb = len(mbs)
    lm = aux_sum = z_sum = 0.0
    cfg = model.config
    E = getattr(cfg, "num_experts", 0)
    k = getattr(cfg, "num_experts_per_tok", 0)
    counts = torch.zeros(max(E, 1), dtype=torch.float64)
    for mb in mbs:
        kw = {}
        if moe:
            kw = {"output_router_logits": True}
        out = model(input_ids=mb["input_ids"], attention_mask=attention_mask(mb, moe), labels=mb["labels"],
                    num_items_in_batch=total, **kw)
        if moe:
            # transformers adds router_aux_loss_coef * aux per forward; the objective twinkle and
            # Megatron use with several micro-batches takes the aux term's mean over them
            aux = out.aux_loss
            ce = out.loss - model.config.router_aux_loss_coef * aux
            obj = ce + aux_coef * aux / nmb
            aux_sum += float(aux)
            keep = mb["attention_mask"].reshape(-1).bool()
            # the router z-loss statistic twinkle logs with coefficient 0 (Megatron's z_loss_func:
            # mean over the real tokens of logsumexp(router logits)^2, summed over the MoE layers), from
            # transformers' router logits; transformers itself has no z-loss term
            z_sum += sum(float(torch.logsumexp(lg.detach().double()[keep], -1).square().mean())
                         for lg in out.router_logits)
            for lg in out.router_logits:
                _, sel = torch.topk(F.softmax(lg.detach().double(), -1), k, dim=-1)
                counts += F.one_hot(sel[keep], E).sum((0, 1)).double()
        else:
            ce = out.loss
            obj = ce
        obj.backward()
        lm += float(ce)
    r = {"loss": lm + aux_coef * aux_sum / nmb, "tokens": total}
    if moe:
        share = counts / counts.sum() if float(counts.sum()) > 0 else counts
        r.update({"lm_loss": lm, "aux_loss": aux_sum / nmb, "z_loss": z_sum / nmb,
                  "expert_load_max": float(share.max()), "expert_load_min": float(share.min())})
    return r


@contextlib.contextmanager
def swapped(values):
    """Within the block each parameter p of values ({param: tensor}) holds values[p] (e.g. its gradient)."""
    backup = {}
    try:
        for p, v in (values or {}).items():
            backup[p] = p.data
            p.data = v
        yield
    finally:
        for p, v in backup.items():
            p.data = v


def saved_tensors(model, values=None):
    """The model's tensors under the checkpoint's names, as transformers' save_pretrained writes them
    (values: {param: tensor} to write instead of the parameters, e.g. their gradients)."""
    with swapped(values), tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d, safe_serialization=True)
        return st.load_dir(d)


def adapter_tensors(model, values=None):
    """PEFT's adapter state dict (get_peft_model_state_dict) under lora_ref.py's names:
    '<module>.lora_A.weight', the module named from the base model (model.layers.L....)."""
    import peft
    with swapped(values):
        sd = peft.get_peft_model_state_dict(model)
    prefix = "base_model.model."
    return {(n[len(prefix):] if n.startswith(prefix) else n): t.detach().clone() for n, t in sd.items()}


def make_optimizer(model, lr, weight_decay, beta1, beta2, eps, lora):
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if lora:  # lora_ref.py / twinkle: every adapter tensor decayed
        groups = [{"params": [p for _, p in named], "weight_decay": weight_decay}]
    else:
        groups = [{"params": [p for _, p in named if p.dim() >= 2], "weight_decay": weight_decay}]
        nd = [p for _, p in named if p.dim() < 2]
        if nd:
            groups.append({"params": nd, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), eps=eps), [p for _, p in named]


def cmd_step(a):
    if a.aux_type != "global" or a.z_coef != 0:
        raise SystemExit("hf_oracle: transformers has only the global load-balancing loss and no z-loss "
                         "(--aux-type global --z-coef 0)")
    dtype = DTYPES[a.dtype]
    model = load_model(a.model, dtype, a.adapter)
    steps = load_steps(a.batch)
    lora = bool(a.adapter)
    opt, params = make_optimizer(model, a.lr, a.weight_decay, a.beta1, a.beta2, a.eps, lora)
    os.makedirs(a.out, exist_ok=True)
    metrics = {"settings": {k: getattr(a, k) for k in ("lr", "weight_decay", "beta1", "beta2", "eps", "clip_grad",
                                                       "dtype", "steps", "aux_coef")},
               "oracle": f"transformers {transformers.__version__}, torch {torch.__version__}"}
    hist = {}
    if lora:
        import lora_ref
        names = sorted(adapter_tensors(model))
    for i in range(max(a.steps, 1)):
        opt.zero_grad(set_to_none=True)
        r = forward_losses(model, steps[i % len(steps)], a.aux_coef)
        for p in params:  # a parameter that received no gradient (an unrouted expert) has a zero one
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if i == 0:
            grads = {p: p.grad.detach().clone() for p in params}
            if lora:
                st.save(os.path.join(a.out, "grads_step0.safetensors"), adapter_tensors(model, grads), dtype=a.save_dtype)
            else:
                st.save(os.path.join(a.out, "grads_step0.safetensors"), saved_tensors(model, grads), dtype=a.save_dtype)
        max_norm = a.clip_grad if a.clip_grad > 0 else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        r["grad_norm"] = norm
        r["clip_coef"] = min(1.0, max_norm / (norm + 1e-6)) if a.clip_grad > 0 else 1.0
        for key, v in r.items():
            metrics.setdefault(key, []).append(v)
        if a.steps > 0:
            clipped = [p.grad.detach().clone() for p in params]
            opt.step()
            if lora:  # lora_ref.py's bound of what float32 gradient rounding can do through AdamW
                named = {id(p): n for n, p in model.named_parameters()}
                pnames = [peft_name(named[id(p)]) for p in params]
                lora_ref.adam_sensitivity(params, pnames, opt, clipped, hist)
        print(f"step {i}: loss {r['loss']:.10f} grad_norm {norm:.10f} tokens {r['tokens']}", file=sys.stderr)
    if lora:
        st.save(os.path.join(a.out, "final.safetensors"), adapter_tensors(model), dtype=a.save_dtype)
        sens = {n: torch.stack(h["terms"]) for n, h in hist.items()}
        missing = sorted(set(names) - set(sens))
        if a.steps > 0 and missing:
            raise SystemExit(f"hf_oracle: no AdamW history for {missing[:4]}")
        st.save(os.path.join(a.out, "adam_sensitivity.safetensors"), sens, dtype="F64")
    else:
        st.save(os.path.join(a.out, "final.safetensors"), saved_tensors(model), dtype=a.save_dtype)
    with open(os.path.join(a.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    print(json.dumps({"loss": metrics["loss"], "grad_norm": metrics["grad_norm"]}))


def peft_name(n):
    """PEFT parameter name -> lora_ref.py's adapter tensor name:
    base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight
    -> model.layers.0.self_attn.q_proj.lora_A.weight"""
    prefix = "base_model.model."
    if n.startswith(prefix):
        n = n[len(prefix):]
    return n.replace(".lora_A.default.", ".lora_A.").replace(".lora_B.default.", ".lora_B.")


def cmd_loss(a):
    """The loss of each --model (same batch) in one process: transformers' import is most of the cost."""
    out = []
    for m in a.model:
        model = load_model(m, DTYPES[a.dtype], a.adapter)
        mbs = load_steps(a.batch)[0]
        total = sum(targets(mb) for mb in mbs)
        with torch.no_grad():
            s = 0.0
            for mb in mbs:
                r = model(input_ids=mb["input_ids"], attention_mask=attention_mask(mb, is_moe(model)),
                          labels=mb["labels"], num_items_in_batch=total)
                s += float(r.loss)
        out.append(s)
    print(json.dumps({"loss": out[0], "losses": out, "tokens": total}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("step", "loss"):
        p = sub.add_parser(name)
        if name == "loss":
            p.add_argument("--model", required=True, action="append", help="repeatable: one loss per model")
        else:
            p.add_argument("--model", required=True)
        p.add_argument("--batch", required=True)
        p.add_argument("--adapter", default=None, help="a PEFT adapter directory: train it (PeftModel)")
        p.add_argument("--dtype", choices=sorted(DTYPES), default="float64")
        p.add_argument("--threads", type=int, default=0)
        if name == "step":
            p.add_argument("--steps", type=int, default=1)
            p.add_argument("--lr", type=float, default=1e-3)
            p.add_argument("--weight-decay", type=float, default=0.0)
            p.add_argument("--beta1", type=float, default=0.9)
            p.add_argument("--beta2", type=float, default=0.999)
            p.add_argument("--eps", type=float, default=1e-8)
            p.add_argument("--clip-grad", type=float, default=1.0)
            p.add_argument("--save-dtype", choices=["F32", "F64"], default="F64")
            p.add_argument("--out", required=True)
            p.add_argument("--aux-coef", type=float, default=0.0)
            p.add_argument("--aux-type", default="global")
            p.add_argument("--z-coef", type=float, default=0.0)
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.use_deterministic_algorithms(True)
    {"step": cmd_step, "loss": cmd_loss}[a.cmd](a)


if __name__ == "__main__":
    main()
