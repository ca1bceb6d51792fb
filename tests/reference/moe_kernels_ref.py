#!/usr/bin/env python3
"""Float64 PyTorch references for twinkle's MoE CPU kernels (tests/unit/kernels/torch_ref_moe.cpp).

Run with the project environment's python:  .venv/bin/python tests/reference/moe_kernels_ref.py --out DIR
Same file format as tests/reference/kernels_ref.py (DIR/<case>/meta.json + raw .bin tensors; inputs
float32, references float64 computed from those float32 values with autograd). The semantics are
tests/reference/qwen3_moe_ref.py's (transformers' Qwen3MoeSparseMoeBlock and
load_balancing_loss_func, Megatron's switch_load_balancing_loss_func and z_loss_func) - never
the code under test.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernels_ref as kr  # noqa: E402  (Case, f32, leaf64)
import qwen3_moe_ref as mr  # noqa: E402


def router_case(root, name, T, E, k, norm, ties):
    c = kr.Case(root, name, T=T, E=E, k=k, norm=int(norm))
    logits = kr.f32((T, E), 1.5)
    if ties:  # exact duplicates inside the top-k and at its boundary
        logits[0, :] = 0.0
        logits[1, 3] = logits[1, 5] = logits[1, 1] = 4.0
        logits[2, 2] = 5.0
        logits[2, 0] = logits[2, E - 1] = 3.0
    dw, dprobs = kr.f32((T, k)), kr.f32((T, E), 0.3)
    L = kr.leaf64(logits)
    p, w, sel = mr.route(L, k, norm)
    (w * dw.double()).sum().add((p * dprobs.double()).sum()).backward()
    for n, t in [("logits", logits), ("dw", dw), ("dprobs", dprobs)]:
        c.put(n, t, "f32")
    c.put("probs", p, "f64")
    c.put("w", w, "f64")
    c.put("sel", sel, "i32")
    c.put("dlogits", L.grad, "f64")
    c.close()


def experts_case(root, name, T, H, I, E, k, norm, empty_expert):
    """The whole sparse block (fixed router logits as an input) with its gradients."""
    c = kr.Case(root, name, T=T, H=H, I=I, E=E, k=k, norm=int(norm), empty_expert=empty_expert)
    cfg = mr.moe_config({"model_type": "qwen3_moe", "vocab_size": 8, "hidden_size": H, "intermediate_size": 8,
                         "num_hidden_layers": 1, "num_attention_heads": 1, "head_dim": 2, "num_experts": E,
                         "num_experts_per_tok": k, "moe_intermediate_size": I, "norm_topk_prob": norm})
    blk = mr.SparseMoeBlock(cfg)
    x, logits, dout = kr.f32((T, H)), kr.f32((T, E)), kr.f32((T, H))
    if empty_expert >= 0:
        logits[:, empty_expert] = -20.0  # nobody routes there
    wg, wu, wd = kr.f32((E, I, H), 0.2), kr.f32((E, I, H), 0.2), kr.f32((E, H, I), 0.2)
    blk = blk.double()
    with torch.no_grad():
        for e in range(E):
            blk.experts[e].gate_proj.weight.copy_(wg[e].double())
            blk.experts[e].up_proj.weight.copy_(wu[e].double())
            blk.experts[e].down_proj.weight.copy_(wd[e].double())
    X, L = kr.leaf64(x), kr.leaf64(logits)
    routing = {}
    out, _ = blk(X, fixed_logits=L, routing_out=routing)
    out.backward(dout.double())
    for n, t in [("x", x), ("logits", logits), ("dout", dout), ("wg", wg), ("wu", wu), ("wd", wd)]:
        c.put(n, t, "f32")
    c.put("out", out, "f64")
    c.put("w", routing["w"], "f64")
    c.put("sel", routing["sel"], "i32")
    c.put("dx", X.grad, "f64")
    c.put("dlogits", L.grad, "f64")
    def grads(proj):  # an expert that got no token has no .grad: its gradient is zero
        ws = [getattr(blk.experts[e], proj).weight for e in range(E)]
        return torch.stack([w.grad if w.grad is not None else torch.zeros_like(w) for w in ws])

    assert empty_expert < 0 or blk.experts[empty_expert].gate_proj.weight.grad is None
    c.put("dwg", grads("gate_proj"), "f64")
    c.put("dwu", grads("up_proj"), "f64")
    c.put("dwd", grads("down_proj"), "f64")
    c.close()


def block_fixed_router_case(root, name, norm):
    """The whole sparse block, router included (tests/unit/model/torch_ref_moe_block.cpp):
    gate.weight = [I_E | 0] so router_logits[t] = x[t, :E] exactly, with the logits chosen by
    hand: ties inside the top-k, at its boundary (torch.topk keeps the lower index), all equal,
    a dominant expert. transformers' Qwen3MoeSparseMoeBlock semantics through the gate (no
    fixed_logits): combine weights, selection, output, d(x) and d(gate.weight)."""
    T, H, E, k, I = 8, 8, 4, 2, 6
    c = kr.Case(root, name, T=T, H=H, E=E, k=k, I=I, norm=int(norm))
    cfg = mr.moe_config({"model_type": "qwen3_moe", "vocab_size": 8, "hidden_size": H, "intermediate_size": 8,
                         "num_hidden_layers": 1, "num_attention_heads": 1, "head_dim": 2, "num_experts": E,
                         "num_experts_per_tok": k, "moe_intermediate_size": I, "norm_topk_prob": norm})
    blk = mr.SparseMoeBlock(cfg).double()
    logits = torch.tensor([[1.0, 1.0, 1.0, 1.0],     # all equal: experts 0, 1
                           [0.5, 2.0, 2.0, -1.0],    # tie inside the top-k: 1, 2
                           [3.0, 0.0, 3.0, 3.0],     # three-way tie at the boundary: 0, 2
                           [2.0, 1.0, 1.0, 0.0],     # tie for the second place: 0, 1
                           [-1.0, 0.0, 4.0, 0.25],   # distinct: 2, 3
                           [0.0, 0.0, 0.0, 8.0],     # dominant expert 3, then 0 (lowest of the tie)
                           [1.5, -2.0, 1.5, 1.5],    # 0, 2
                           [0.75, 0.25, -0.5, 0.75]], dtype=torch.float32)  # 0, 3
    x = kr.f32((T, H))
    x[:, :E] = logits
    gate = torch.zeros(E, H, dtype=torch.float32)
    gate[:, :E] = torch.eye(E)
    wg, wu, wd = kr.f32((E, I, H), 0.3), kr.f32((E, I, H), 0.3), kr.f32((E, H, I), 0.3)
    dout = kr.f32((T, H))
    with torch.no_grad():
        blk.gate.weight.copy_(gate.double())
        for e in range(E):
            blk.experts[e].gate_proj.weight.copy_(wg[e].double())
            blk.experts[e].up_proj.weight.copy_(wu[e].double())
            blk.experts[e].down_proj.weight.copy_(wd[e].double())
    X = kr.leaf64(x)
    routing = {}
    out, L = blk(X, routing_out=routing)
    assert torch.equal(L.detach(), logits.double()), "gate = [I|0] must reproduce the chosen logits"
    out.backward(dout.double())
    for n, t in [("x", x), ("gate", gate), ("dout", dout), ("wg", wg), ("wu", wu), ("wd", wd)]:
        c.put(n, t, "f32")
    c.put("logits", L, "f64")
    c.put("w", routing["w"], "f64")
    c.put("sel", routing["sel"], "i32")
    c.put("out", out, "f64")
    c.put("dx", X.grad, "f64")
    c.put("dgate", blk.gate.weight.grad, "f64")
    c.close()


def aux_global_case(root, name, layers, B, S, E, k):
    """transformers' load_balancing_loss_func over `layers` MoE layers with right padding."""
    c = kr.Case(root, name, layers=layers, B=B, S=S, E=E, k=k)
    mask = torch.ones(B, S, dtype=torch.int32)
    mask[0, S - 3:] = 0
    mask[B - 1, S - 1:] = 0
    logits = kr.f32((layers, B * S, E), 1.2)
    L = kr.leaf64(logits)
    aux = mr.load_balancing_loss([L[i] for i in range(layers)], E, k, mask)
    aux.backward()
    c.put("logits", logits, "f32")
    c.put("mask", mask, "i32")
    c.put("aux", aux.reshape(1), "f64")
    c.put("dlogits", L.grad, "f64")
    c.close()


def aux_per_layer_case(root, name, T, E, k, coeff):
    c = kr.Case(root, name, T=T, E=E, k=k, coeff=coeff)
    mask = torch.ones(T, dtype=torch.int32)
    mask[T - 4:] = 0
    logits = kr.f32((T, E), 1.2)
    L = kr.leaf64(logits)
    aux = mr.megatron_aux_loss(L, E, k, coeff, mask)
    aux.backward()
    c.put("logits", logits, "f32")
    c.put("mask", mask, "i32")
    c.put("aux", aux.reshape(1), "f64")
    c.put("dlogits", L.grad, "f64")
    c.close()


def z_loss_case(root, name, T, E, coeff):
    c = kr.Case(root, name, T=T, E=E, coeff=coeff)
    mask = torch.ones(T, dtype=torch.int32)
    mask[1] = 0
    logits = kr.f32((T, E), 2.0, 1.0)
    L = kr.leaf64(logits)
    z = mr.z_loss(L, coeff, mask)
    z.backward()
    c.put("logits", logits, "f32")
    c.put("mask", mask, "i32")
    c.put("z", z.reshape(1), "f64")
    c.put("dlogits", L.grad, "f64")
    c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(20261130)
    router_case(a.out, "moe_router_norm", 41, 8, 2, True, True)
    router_case(a.out, "moe_router_raw", 41, 8, 2, False, True)
    router_case(a.out, "moe_router_e16_k4", 23, 16, 4, True, False)
    experts_case(a.out, "moe_experts_norm", 29, 16, 12, 6, 2, True, 4)
    experts_case(a.out, "moe_experts_raw_k3", 19, 24, 8, 5, 3, False, -1)
    block_fixed_router_case(a.out, "moe_block_fixed_router_norm", True)
    block_fixed_router_case(a.out, "moe_block_fixed_router_raw", False)
    aux_global_case(a.out, "moe_aux_global", 3, 2, 7, 6, 2)
    aux_per_layer_case(a.out, "moe_aux_per_layer", 21, 8, 2, 0.01)
    z_loss_case(a.out, "moe_z_loss", 17, 8, 1e-3)
    open(os.path.join(a.out, "DONE"), "w").close()


if __name__ == "__main__":
    main()
