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
    with --dropout P --dropout-masks DIR (lora_dropout) PEFT builds its own nn.Dropout(P) from the
    adapter's lora_dropout, and each of them (every LoraLayer's lora_dropout[adapter]) is replaced by
    SharedMaskDropout: x * mask / (1 - P) with the mask twinkle drew for that module and step (the
    files of its test hook TWINKLE_TEST_LORA_DROPOUT_DUMP, read by lora_ref.dropout_mask), so PEFT's
    own Linear.forward, result + lora_B(lora_A(dropout(x))) * scaling, runs with the shared masks;
  * gradients and parameters are written under the checkpoint's names by transformers' own
    save_pretrained (its reverse weight conversion: Qwen3-MoE's fused experts tensors back to
    model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight), so nothing here maps names.

Rows are right-padded per micro-batch (token 0, label -100, attention_mask 0); packed batches
(position_ids / cu_seqlens) are refused: transformers' eager attention has no segment mask.

CLI:
  step  --model DIR --batch batch.json --steps N --lr --weight-decay --beta1 --beta2 --eps
        --clip-grad --out OUT [--dtype float64|float32] [--save-dtype F64|F32]
        [--aux-coef X --aux-type global --z-coef 0] [--adapter DIR [--dropout P --dropout-masks DIR]]
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


class SharedMaskDropout(torch.nn.Module):
    """Stands in for PEFT's lora_dropout[adapter] (nn.Dropout(p) on one LoraLayer's input): in training
    x * mask / (1 - p) with twinkle's mask for this module and the step in lora_ref.DROPOUT (file
    DIR/<step>.0.<name>.mask, name = the module's path in the base model, as twinkle names its adapter
    tensors), in eval x, as nn.Dropout. `used` collects the names read in the step (check_masks_used)."""

    def __init__(self, name, p, used):
        super().__init__()
        self.name, self.p, self.used = name, p, used

    def forward(self, x):
        if not self.training:
            return x
        import lora_ref
        d = lora_ref.DROPOUT
        path = os.path.join(d["dir"], f"{d['step']}.0.{self.name}.mask")
        if not os.path.isfile(path):
            raise SystemExit(f"hf_oracle: PEFT module {self.name}: no dropout mask {path} for step {d['step']} "
                             "(twinkle drew none for this module and step, or the module names do not map)")
        if self.name in self.used:
            raise SystemExit(f"hf_oracle: PEFT module {self.name} ran its lora_dropout twice in step {d['step']} "
                             "(one forward per step is what the masks are for)")
        self.used.add(self.name)
        return x * lora_ref.dropout_mask(self.name, x.shape, x.dtype) / (1.0 - self.p)

    def extra_repr(self):
        return f"p={self.p}, name={self.name}"


def share_dropout_masks(model, p, adapter_dir):
    """Replace every PEFT LoraLayer's lora_dropout[adapter] by SharedMaskDropout. PEFT must have built
    nn.Dropout(p) from the adapter's config (lora_dropout = p) on lora.Linear modules only: PEFT's
    lora.Embedding never calls its lora_dropout (and twinkle adapts no embedding), its ParamWrapper
    refuses dropout. Every module's name must be one of the adapter's ("<name>.lora_A.weight").
    Returns the set the modules record the masks they read in."""
    import peft
    from peft.tuners.lora import LoraLayer
    from peft.tuners.lora import Linear as PeftLoraLinear
    used = set()
    adapter_names = set(adapter_tensors(model))
    prefix = "base_model.model."
    replaced = []
    for path, mod in model.named_modules():
        if not isinstance(mod, LoraLayer):
            continue
        if not isinstance(mod, PeftLoraLinear):
            raise SystemExit(f"hf_oracle: {path} is a PEFT {type(mod).__name__}: only lora.Linear applies "
                             "lora_dropout as twinkle does (dropout(x) before lora_A)")
        if not path.startswith(prefix):
            raise SystemExit(f"hf_oracle: PEFT LoRA module {path} is not under {prefix}")
        name = path[len(prefix):]
        if name + ".lora_A.weight" not in adapter_names:
            raise SystemExit(f"hf_oracle: PEFT LoRA module {path} -> {name}: not an adapter tensor's module")
        for adapter in list(mod.lora_dropout.keys()):
            drop = mod.lora_dropout[adapter]
            if not isinstance(drop, torch.nn.Dropout) or drop.p != p:
                raise SystemExit(f"hf_oracle: {path}.lora_dropout[{adapter}] is {drop!r}, not nn.Dropout(p={p}): "
                                 f"{adapter_dir}/adapter_config.json's lora_dropout is not --dropout {p}")
            mod.lora_dropout[adapter] = SharedMaskDropout(name, p, used)
            replaced.append(name)
    if not replaced:
        raise SystemExit("hf_oracle: --dropout: the PEFT model has no LoRA module")
    print(f"hf_oracle: PEFT lora_dropout of {len(replaced)} modules fed twinkle's masks (p {p}, {peft.__version__})",
          file=sys.stderr)
    return used


def check_masks_used(d, step, used):
    """After a step: the modules that read a mask are exactly those twinkle drew one for (file names
    <step>.<slot>.<module>.mask; one micro-batch: slot 0 only)."""
    files = [f for f in os.listdir(d) if f.startswith(f"{step}.") and f.endswith(".mask")]
    other = sorted(f for f in files if not f.startswith(f"{step}.0."))
    if other:
        raise SystemExit(f"hf_oracle: dropout masks of another slot in step {step}: {other[:4]}")
    drawn = {f[len(f"{step}.0."):-len(".mask")] for f in files}
    if drawn != used:
        raise SystemExit(f"hf_oracle: step {step}: twinkle drew masks for {sorted(drawn - used)[:4]} that no PEFT "
                         f"module read, PEFT read {sorted(used - drawn)[:4]} twinkle did not draw")


def cmd_step(a):
    if a.aux_type != "global" or a.z_coef != 0:
        raise SystemExit("hf_oracle: transformers has only the global load-balancing loss and no z-loss "
                         "(--aux-type global --z-coef 0)")
    dtype = DTYPES[a.dtype]
    model = load_model(a.model, dtype, a.adapter)
    steps = load_steps(a.batch)
    lora = bool(a.adapter)
    used = None
    if a.dropout > 0:
        if not lora or not a.dropout_masks:
            raise SystemExit("hf_oracle: --dropout needs --adapter and --dropout-masks (the masks twinkle drew)")
        if any(len(mbs) != 1 for mbs in steps):
            raise SystemExit("hf_oracle: --dropout: one micro-batch per step (the masks are per forward)")
        used = share_dropout_masks(model, a.dropout, a.adapter)
    elif lora:
        from peft.tuners.lora import LoraLayer
        drawn = sorted(n for n, m in model.named_modules() if isinstance(m, LoraLayer) and
                       any(isinstance(d, torch.nn.Dropout) for d in m.lora_dropout.values()))
        if drawn:  # PEFT would draw masks of its own: a different function on every run
            raise SystemExit(f"hf_oracle: the adapter's lora_dropout is > 0 ({drawn[0]}, ...): pass --dropout P "
                             "--dropout-masks DIR (the masks twinkle drew)")
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
        if used is not None:
            import lora_ref
            lora_ref.DROPOUT = {"p": a.dropout, "dir": a.dropout_masks, "step": i}
            used.clear()
        r = forward_losses(model, steps[i % len(steps)], a.aux_coef)
        if used is not None:
            check_masks_used(a.dropout_masks, i, used)
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
            p.add_argument("--dropout", type=float, default=0.0,
                           help="LoRA: the adapter's lora_dropout p, applied with the masks of --dropout-masks")
            p.add_argument("--dropout-masks", default="", help="directory of twinkle's dumped dropout masks")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.use_deterministic_algorithms(True)
    {"step": cmd_step, "loss": cmd_loss}[a.cmd](a)


if __name__ == "__main__":
    main()
