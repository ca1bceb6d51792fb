#!/usr/bin/env python3
"""Independent PyTorch LoRA (PEFT's formulas) on tests/reference/qwen3_ref.py, for checking twinkle.

  y = base(x) + scaling * (x @ A^T) @ B^T,  scaling = lora_alpha / r  (lora_alpha / sqrt(r) with
  use_rslora)  -- peft/tuners/lora/layer.py Linear.forward / LoraLayer.update_layer.

The adapter is read from a PEFT adapter directory the way PEFT reads it: adapter_config.json
(peft_type LORA, r, lora_alpha, use_rslora, target_modules: "all-linear" = every nn.Linear but
lm_head, else names matched as the module's full name or a "."-suffix of it) and
adapter_model.safetensors with keys "base_model.model.<module>.lora_A.weight" /
"...lora_B.weight". Every key must land on a targeted module and every targeted module needs
both keys, so a renamed key or a wrong target fails.

  step:  train only the adapter (base frozen; --dropout p --dropout-masks DIR: lora_dropout with
         the masks twinkle drew, see DROPOUT) with torch.optim.AdamW (adapters are 2-D:
         decayed) and clip_grad_norm_ over the adapter; writes metrics.json (loss, grad_norm),
         grads_step0.safetensors, final.safetensors (adapter tensors, HF names without
         PEFT's prefix) and adam_sensitivity.safetensors (see adam_sensitivity).
  loss:  the loss of a batch with the adapter (unmerged), and with W + scaling B A merged.
Run with the project environment's python (.venv, scripts/setup).
"""
import argparse
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_py as st  # noqa: E402
import qwen3_ref  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

PREFIX = "base_model.model."


# lora_dropout (PEFT: result += lora_B(lora_A(dropout(x))) * scaling, nn.Dropout on the LoRA input
# only, training only, kept elements scaled by 1/(1-p)) with masks fed from files instead of drawn:
# DROPOUT = {"p": p, "dir": d, "step": i} makes module m read d/<i>.0.<m>.mask (uint8 [tokens, in],
# 1 = kept; twinkle's test hook TWINKLE_TEST_LORA_DROPOUT_DUMP writes them), so the reference applies
# exactly twinkle's masks and checks everything else about the dropout.
DROPOUT = None


def dropout_mask(name, shape, dtype):
    path = os.path.join(DROPOUT["dir"], f"{DROPOUT['step']}.0.{name}.mask")
    with open(path, "rb") as f:
        m = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
    n = 1
    for d in shape:
        n *= d
    if m.numel() != n:
        raise SystemExit(f"{path}: {m.numel()} mask elements, the reference's input {tuple(shape)} has {n}")
    return m.reshape(shape).to(dtype)


class LoraLinear(nn.Module):
    def __init__(self, base, A, B, scaling, name=""):
        super().__init__()
        self.base = base
        self.lora_A = nn.Parameter(A)
        self.lora_B = nn.Parameter(B)
        self.scaling = scaling
        self.name = name

    def forward(self, x):
        xa = x
        if DROPOUT is not None and self.training:
            xa = x * dropout_mask(self.name, x.shape, x.dtype) / (1.0 - DROPOUT["p"])
        return self.base(x) + (xa @ self.lora_A.t()) @ self.lora_B.t() * self.scaling


def targeted(name, targets):
    if targets == "all-linear":
        return name != "lm_head"
    if isinstance(targets, str):
        targets = [targets]
    return any(name == t or name.endswith("." + t) for t in targets)


def attach(model, adapter_dir, dtype):
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    if cfg.get("peft_type") != "LORA":
        raise SystemExit(f"adapter_config.json: peft_type {cfg.get('peft_type')!r} is not LORA")
    r, alpha = cfg["r"], cfg["lora_alpha"]
    scaling = alpha / math.sqrt(r) if cfg.get("use_rslora", False) else alpha / r
    tensors = st.load(os.path.join(adapter_dir, "adapter_model.safetensors"))
    used = set()
    wrapped = {}
    for name, mod in list(model.named_modules()):
        if not isinstance(mod, nn.Linear) or not targeted(name, cfg["target_modules"]):
            continue
        ka, kb = PREFIX + name + ".lora_A.weight", PREFIX + name + ".lora_B.weight"
        if ka not in tensors or kb not in tensors:
            raise SystemExit(f"adapter: targeted module {name} has no {ka} / {kb}")
        A, B = tensors[ka].to(dtype), tensors[kb].to(dtype)
        if A.shape != (r, mod.in_features) or B.shape != (mod.out_features, r):
            raise SystemExit(f"adapter: {name}: A {tuple(A.shape)} B {tuple(B.shape)} do not fit r={r}, "
                             f"in={mod.in_features}, out={mod.out_features}")
        used.update([ka, kb])
        parent_name, child = name.rsplit(".", 1)
        parent = model.get_submodule(parent_name)
        lin = LoraLinear(mod, A.clone(), B.clone(), scaling, name)
        setattr(parent, child, lin)
        wrapped[name] = lin
    extra = sorted(set(tensors) - used)
    if extra:
        raise SystemExit(f"adapter: keys that match no targeted module: {extra[:5]}")
    if not wrapped:
        raise SystemExit("adapter: no module targeted")
    for n, p in model.named_parameters():
        p.requires_grad_(".lora_A" in n or ".lora_B" in n)
    return wrapped, scaling


# How far float32 rounding of the gradients can move an adapter element through AdamW, from this
# run's own history (meaningful for the float64 run; used by check_train.adapter_bound). Per element
# and step t, with m = m_hat_t and s = sqrt(v_hat_t) the bias-corrected moments after step t and
# g_i the clipped gradients so far: update_t = lr * m / (s + eps). A gradient error |dg_i| <= D
# changes m_hat by <= D (its weights sum to 1) and v_hat by <= 2 max_i|g_i| D (+ D^2), so
#   |d update_t| <= lr * D * k_t,  k_t = 1 / (s + eps) + |m| max_i|g_i| / (s (s + eps)^2).
# Written per tensor as [steps, *shape]: lr * G_t * k_t with G_t = max|g_t| over the tensor, i.e.
# the update change per unit of relative gradient error D / G_t. Large exactly where Adam amplifies
# rounding (an element's gradient near 0 relative to the tensor's largest, s small).
def adam_sensitivity(params, names, opt, grads, hist):
    b1, b2 = opt.param_groups[0]["betas"]
    lr, eps = opt.param_groups[0]["lr"], opt.param_groups[0]["eps"]
    for p, name, g in zip(params, names, grads):
        h = hist.setdefault(name, {"gmax": torch.zeros_like(g, dtype=torch.float64), "terms": []})
        h["gmax"] = torch.maximum(h["gmax"], g.double().abs())
        st_ = opt.state[p]
        t = int(st_["step"])
        m = st_["exp_avg"].double() / (1 - b1 ** t)
        s = (st_["exp_avg_sq"].double() / (1 - b2 ** t)).sqrt()
        k = 1.0 / (s + eps) + m.abs() * h["gmax"] / (s * (s + eps) ** 2).clamp_min(1e-300)
        h["terms"].append(lr * g.double().abs().max() * k)


def adapter_tensors(wrapped, grads=False):
    out = {}
    for name, lin in wrapped.items():
        for k, p in (("lora_A", lin.lora_A), ("lora_B", lin.lora_B)):
            t = p.grad if grads else p
            out[f"{name}.{k}.weight"] = (t if t is not None else torch.zeros_like(p)).detach().clone()
    return out


def merge(model, wrapped):
    with torch.no_grad():
        for name, lin in wrapped.items():
            lin.base.weight += lin.scaling * (lin.lora_B @ lin.lora_A)
            parent_name, child = name.rsplit(".", 1)
            setattr(model.get_submodule(parent_name), child, lin.base)


def is_moe(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f).get("model_type") == "qwen3_moe"


def cmd_step(a):
    global DROPOUT
    dtype = qwen3_ref._DTYPES[a.dtype]
    moe = is_moe(a.model)
    if moe:  # Qwen3-MoE (tests/reference/qwen3_moe_ref.py): router / expert modules are nn.Linear too
        import qwen3_moe_ref
        model = qwen3_moe_ref.load_model(a.model, dtype)
        steps = qwen3_moe_ref.load_steps(a.batch)
    else:
        model = qwen3_ref.load_model(a.model, dtype)
        steps = qwen3_ref.load_batches(a.batch)
    wrapped, _ = attach(model, a.adapter, dtype)
    params = [p for lin in wrapped.values() for p in (lin.lora_A, lin.lora_B)]
    names = [f"{n}.{k}.weight" for n in wrapped for k in ("lora_A", "lora_B")]
    hist = {}
    opt = torch.optim.AdamW([{"params": params, "weight_decay": a.weight_decay}], lr=a.lr, betas=(a.beta1, a.beta2),
                            eps=a.eps)
    os.makedirs(a.out, exist_ok=True)
    metrics = {"loss": [], "grad_norm": []}
    if a.dropout > 0:
        if not a.dropout_masks:
            raise SystemExit("--dropout needs --dropout-masks (the masks twinkle drew)")
        model.train()
    for i in range(a.steps):
        if a.dropout > 0:
            DROPOUT = {"p": a.dropout, "dir": a.dropout_masks, "step": i}
        opt.zero_grad(set_to_none=True)
        if moe:  # lm loss + the router losses, as qwen3_moe_ref.py step
            r = qwen3_moe_ref.step_losses(model, steps[i % len(steps)], a.aux_coef, a.aux_type, a.z_coef)
            loss = r["loss"]
            for k in ("lm_loss", "aux_loss", "z_loss"):
                metrics.setdefault(k, []).append(r[k])
        else:
            loss, _ = qwen3_ref.train_step(model, steps[i % len(steps)])
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if i == 0:
            st.save(os.path.join(a.out, "grads_step0.safetensors"), adapter_tensors(wrapped, grads=True), dtype="F64")
        max_norm = a.clip_grad if a.clip_grad > 0 else float("inf")
        norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        metrics["loss"].append(loss)
        metrics["grad_norm"].append(norm)
        grads = [p.grad.detach().clone() for p in params]
        opt.step()
        adam_sensitivity(params, names, opt, grads, hist)
    st.save(os.path.join(a.out, "final.safetensors"), adapter_tensors(wrapped), dtype="F64")
    st.save(os.path.join(a.out, "adam_sensitivity.safetensors"),
            {n: torch.stack(h["terms"]) for n, h in hist.items()}, dtype="F64")
    with open(os.path.join(a.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    print(json.dumps(metrics))


def cmd_loss(a):
    dtype = qwen3_ref._DTYPES[a.dtype]
    if is_moe(a.model):  # Qwen3-MoE: the lm loss (cross entropy mean over the labelled targets)
        import qwen3_moe_ref
        model = qwen3_moe_ref.load_model(a.model, dtype)
        mbs = qwen3_moe_ref.load_steps(a.batch)[0]

        def lm(mb):
            return float(model.losses(mb[0], mb[1])[0])

        def count(mb):
            return qwen3_ref.count_targets(mb[0])
    else:
        model = qwen3_ref.load_model(a.model, dtype)
        mbs = qwen3_ref.load_batches(a.batch)[0]

        def lm(mb):
            return float(model.loss_sum(mb)[0])

        count = qwen3_ref.count_targets
    wrapped, _ = attach(model, a.adapter, dtype)
    n = sum(count(mb) for mb in mbs)
    with torch.no_grad():
        unmerged = sum(lm(mb) for mb in mbs) / n
        merge(model, wrapped)
        merged = sum(lm(mb) for mb in mbs) / n
    print(json.dumps({"loss": unmerged, "merged_loss": merged}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("step", "loss"):
        p = sub.add_parser(name)
        p.add_argument("--model", required=True)
        p.add_argument("--adapter", required=True)
        p.add_argument("--batch", required=True)
        p.add_argument("--dtype", default="float64")
        if name == "step":
            p.add_argument("--steps", type=int, default=1)
            p.add_argument("--lr", type=float, default=1e-3)
            p.add_argument("--weight-decay", type=float, default=0.0)
            p.add_argument("--beta1", type=float, default=0.9)
            p.add_argument("--beta2", type=float, default=0.999)
            p.add_argument("--eps", type=float, default=1e-8)
            p.add_argument("--clip-grad", type=float, default=1.0)
            p.add_argument("--dropout", type=float, default=0.0, help="lora_dropout p (training only)")
            p.add_argument("--dropout-masks", default="", help="directory of twinkle's dumped dropout masks")
            p.add_argument("--aux-coef", type=float, default=0.0, help="Qwen3-MoE: router aux-loss coefficient")
            p.add_argument("--aux-type", choices=["global", "per_layer"], default="global")
            p.add_argument("--z-coef", type=float, default=0.0)
            p.add_argument("--out", required=True)
    a = ap.parse_args()
    {"step": cmd_step, "loss": cmd_loss}[a.cmd](a)


if __name__ == "__main__":
    main()
