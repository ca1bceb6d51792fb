#!/usr/bin/env python3
"""PyTorch-eager peer of bench/cuda_ops_bench.cpp: the same ops on the same shapes on the same GPU, fp32,
TF32 off (torch.backends.cuda.matmul.allow_tf32 = False, cudnn too), written the way HF transformers'
Qwen3 eager code writes them (Qwen3RMSNorm, apply_rotary_pos_emb, Qwen3MLP act, repeat_kv-free
scaled_dot_product_attention with enable_gqa, F.linear + F.cross_entropy, torch.optim.AdamW default
(foreach), torch.linalg.vector_norm as clip_grad_norm_ uses). Backward ops are timed as
torch.autograd.grad of a graph built once (retain_graph), so only the backward kernels are timed.

  .venv/bin/python bench/cuda_ops_peer.py --out torch.json [--quick] [--min-time S]

Writes {"ops": {name: ms}, "device": ..., "torch": version}; cuda_ops_bench --peer torch.json prints
the ratios; when twinkle's figures exist (--twinkle, default cuda_ops_twinkle.json, which cuda_ops_bench
writes), this script prints the same table at its end, so the table appears whichever runs last. Timing: 2 warm-up calls, then calls until min-time seconds and >= 5 calls, one synchronize
at the end; mean wall time per call (the same rule as cuda_ops_bench).
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="torch_ops.json")
    ap.add_argument("--twinkle", default="cuda_ops_twinkle.json", help="twinkle's figures (cuda_ops_bench --out)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script (with --tiny)")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (smoke test only)")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("SKIPPED: torch sees no GPU")
        raise SystemExit(77)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    T = 64 if a.tiny else 1024 if a.quick else 4096
    S, H, Hq, Hkv, D, I = T // 2, 1024, 16, 8, 128, 3072
    if a.tiny:
        H, I = 64, 96
    V = 512 if a.tiny else 32000 if a.quick else 151936
    NP = 1000 if a.tiny else 10_000_000 if a.quick else 150_000_000
    eps = 1e-6
    ops = {}

    def bench(name, fn):
        fn()
        fn()
        sync()
        n, t0, el = 0, time.perf_counter(), 0.0
        while n < 5 or el < a.min_time:
            fn()
            n += 1
            if n % 5 == 0:
                sync()
                el = time.perf_counter() - t0
        ops[name] = 1e3 * el / n
        print(f"  {name:30s} {ops[name]:9.3f} ms", flush=True)

    z = lambda *s: torch.zeros(*s, device=dev, dtype=torch.float32)
    zg = lambda *s: torch.zeros(*s, device=dev, dtype=torch.float32, requires_grad=True)
    t = torch.arange(T, device=dev)
    ids = (t * 7919) % V
    pos = t % S
    labels = torch.where(t % 16 == 0, torch.full_like(t, -100), (t * 104729) % V)

    def rmsnorm(x, w):  # HF Qwen3RMSNorm.forward
        var = x.pow(2).mean(-1, keepdim=True)
        return w * (x * torch.rsqrt(var + eps))

    # embedding
    table = zg(V, H)
    out = F.embedding(ids, table)
    dout = z(T, H)
    bench("embedding_fwd", lambda: F.embedding(ids, table))
    bench("embedding_bwd", lambda: torch.autograd.grad(out, table, dout, retain_graph=True))
    # norms
    x, r, w = zg(T, H), zg(T, H), zg(H)
    y = rmsnorm(x, w)
    dy = z(T, H)
    bench("rms_norm_fwd", lambda: rmsnorm(x, w))
    bench("rms_norm_bwd", lambda: torch.autograd.grad(y, (x, w), dy, retain_graph=True))
    y2 = rmsnorm(x + r, w)
    bench("add_rms_norm_fwd", lambda: rmsnorm(x + r, w))
    bench("add_rms_norm_bwd", lambda: torch.autograd.grad(y2, (x, r, w), dy, retain_graph=True))
    # q norm + rope (HF Qwen3Attention: q_norm on [.., heads, D], then apply_rotary_pos_emb)
    inv = 1.0 / (1000000.0 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
    ang = pos[:, None].float() * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]

    def rot_half(v):
        return torch.cat((-v[..., D // 2:], v[..., : D // 2]), dim=-1)

    def qk_norm_rope(q, wq):
        n = rmsnorm(q, wq)
        return n * cos + rot_half(n) * sin

    q, wq = zg(T, Hq, D), zg(D)
    yq = qk_norm_rope(q, wq)
    dyq = z(T, Hq, D)
    bench("qk_norm_rope_fwd", lambda: qk_norm_rope(q, wq))
    bench("qk_norm_rope_bwd", lambda: torch.autograd.grad(yq, (q, wq), dyq, retain_graph=True))
    # swiglu and gate|up
    g, u = zg(T, I), zg(T, I)
    ys = F.silu(g) * u
    dys = z(T, I)
    bench("swiglu_fwd", lambda: F.silu(g) * u)
    bench("swiglu_bwd", lambda: torch.autograd.grad(ys, (g, u), dys, retain_graph=True))
    xg, wgu = zg(T, H), zg(2 * I, H)

    def gate_up(xx):
        gu = F.linear(xx, wgu)
        return F.silu(gu[:, :I]) * gu[:, I:]

    yg = gate_up(xg)
    bench("gate_up_swiglu_fwd", lambda: gate_up(xg))
    bench("gate_up_swiglu_bwd", lambda: torch.autograd.grad(yg, (xg, wgu), dys, retain_graph=True))
    # linear (q_proj)
    xl, wl = zg(T, H), zg(Hq * D, H)
    yl = F.linear(xl, wl)
    dyl = z(T, Hq * D)
    bench("linear_fwd", lambda: F.linear(xl, wl))
    bench("linear_bwd", lambda: torch.autograd.grad(yl, (xl, wl), dyl, retain_graph=True))
    # attention: 2 sequences of S, causal, GQA
    qa, ka, va = zg(2, Hq, S, D), zg(2, Hkv, S, D), zg(2, Hkv, S, D)

    def sdpa():
        if not hasattr(F, "scaled_dot_product_attention"):  # old torch (smoke test here): the math path
            rep = Hq // Hkv
            kk, vv = ka.repeat_interleave(rep, 1), va.repeat_interleave(rep, 1)
            sc = (qa @ kk.transpose(-1, -2)) / math.sqrt(D)
            sc = sc.masked_fill(torch.ones(S, S, dtype=torch.bool, device=dev).triu(1), float("-inf"))
            return sc.softmax(-1) @ vv
        try:
            return F.scaled_dot_product_attention(qa, ka, va, is_causal=True, enable_gqa=True)
        except TypeError:  # torch < 2.5: repeat_kv as HF eager
            rep = Hq // Hkv
            return F.scaled_dot_product_attention(qa, ka.repeat_interleave(rep, 1), va.repeat_interleave(rep, 1),
                                                  is_causal=True)

    oa = sdpa()
    doa = z(2, Hq, S, D)
    bench("attention_fwd", sdpa)
    bench("attention_bwd", lambda: torch.autograd.grad(oa, (qa, ka, va), doa, retain_graph=True))
    # lm head + cross entropy (sum), forward and backward
    xc, wc = zg(T, H), zg(V, H)

    def lce():
        loss = F.cross_entropy(F.linear(xc, wc), labels, ignore_index=-100, reduction="sum") / T
        return torch.autograd.grad(loss, (xc, wc))

    bench("linear_cross_entropy_fwdbwd", lce)
    del wc, xc
    if a.device == "cuda":
        torch.cuda.empty_cache()
    # optimizer and grad norm
    p = torch.nn.Parameter(z(NP))
    p.grad = z(NP)
    opt = torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    bench("adamw", opt.step)
    bench("sum_squares", lambda: torch.linalg.vector_norm(p.grad))
    res = {"ops": ops, "device": torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu", "torch": torch.__version__,
           "shapes": dict(T=T, S=S, H=H, Hq=Hq, Hkv=Hkv, D=D, I=I, V=V, NP=NP)}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    print(f"wrote {a.out} ({res['device']}, torch {res['torch']})")
    try:
        with open(a.twinkle) as f:
            tw = json.load(f)["ops"]
    except (OSError, ValueError, KeyError):
        return
    print(f"\n{'op':30s} {'twinkle ms':>10s} {'torch ms':>10s} {'ratio':>8s}   (ratio = torch ms / twinkle ms)")
    for name, ms in ops.items():
        if name in tw and tw[name] > 0:
            print(f"{name:30s} {tw[name]:10.3f} {ms:10.3f} {ms / tw[name]:7.2f}x")


if __name__ == "__main__":
    main()
