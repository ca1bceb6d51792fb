#!/usr/bin/env python3
"""Independent references for twinkle's CPU kernels (tests/unit/kernels/torch_ref_kernels.cpp).

Run with the project environment's python:  .venv/bin/python tests/reference/kernels_ref.py --out DIR

For every case it generates deterministic inputs (torch.manual_seed), computes the reference outputs
and gradients in float64 with torch autograd, and writes
  DIR/<case>/meta.json          {"params": {...}, "tensors": {name: {"dtype": "f32"|"f64"|"i32", "shape": [...]}}}
  DIR/<case>/<name>.bin         raw little-endian data
Inputs are stored as float32 (what the C++ kernels consume); references as float64 computed from
those same float32 values. Semantics follow the sources named in each function (HF transformers
Qwen3, torch.nn.functional, torch.optim.AdamW) -- never the code under test.
"""
import argparse
import json
import math
import os

import torch
import torch.nn.functional as F

torch.set_grad_enabled(True)


class Case:
    def __init__(self, root, name, **params):
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir, exist_ok=True)
        self.meta = {"params": params, "tensors": {}}

    def put(self, name, t, dtype):
        t = t.detach().contiguous()
        np_dtype = {"f32": "float32", "f64": "float64", "i32": "int32"}[dtype]
        arr = t.cpu().numpy().astype(np_dtype)
        arr.tofile(os.path.join(self.dir, name + ".bin"))
        self.meta["tensors"][name] = {"dtype": dtype, "shape": list(t.shape)}

    def close(self):
        with open(os.path.join(self.dir, "meta.json"), "w") as f:
            json.dump(self.meta, f, indent=1)


def f32(shape, scale=1.0, offset=0.0):
    return (torch.randn(*shape) * scale + offset).float()


def leaf64(t32):
    return t32.double().clone().requires_grad_(True)


# ---------------------------------------------------------------- RMSNorm (HF Qwen3RMSNorm)
def rmsnorm_case(root, name, rows, dim, eps):
    c = Case(root, name, rows=rows, dim=dim, eps=eps)
    x, w, dy = f32((rows, dim), 2.0, 0.3), f32((dim,), 0.1, 1.0), f32((rows, dim))
    X, W = leaf64(x), leaf64(w)
    var = X.pow(2).mean(-1, keepdim=True)
    rstd = torch.rsqrt(var + eps)
    y = W * (X * rstd)
    y.backward(dy.double())
    for n, t in [("x", x), ("w", w), ("dy", dy)]:
        c.put(n, t, "f32")
    c.put("y", y, "f64")
    c.put("rstd", rstd.squeeze(-1), "f64")
    c.put("dx", X.grad, "f64")
    c.put("dw", W.grad, "f64")
    c.close()


# ---------------------------------------------------------------- RoPE (HF Qwen3RotaryEmbedding + apply_rotary_pos_emb)
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_case(root, name, positions, heads, head_dim, theta, max_pos):
    tokens = len(positions)
    c = Case(root, name, tokens=tokens, heads=heads, head_dim=head_dim, theta=theta, max_pos=max_pos)
    pos = torch.tensor(positions, dtype=torch.int32)
    x, dy = f32((tokens, heads, head_dim)), f32((tokens, heads, head_dim))
    # HF: inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))  (float32)
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    # HF: freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2); emb = cat(freqs, freqs)
    freqs = pos.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # float32, as HF returns them (attention_scaling = 1)
    X = leaf64(x)
    cos64, sin64 = cos.double()[:, None, :], sin.double()[:, None, :]  # unsqueeze over heads
    y = X * cos64 + rotate_half(X) * sin64
    y.backward(dy.double())
    c.put("pos", pos, "i32")
    c.put("x", x, "f32")
    c.put("dy", dy, "f32")
    c.put("y", y, "f64")
    c.put("dx", X.grad, "f64")
    c.close()


def rope_variant_case(root, name, positions, heads, head_dim, theta, max_pos, variant, seq_len=0):
    """A scaled RoPE variant: inv_freq and attention scaling from qwen3_ref.rope_inv_freq (written
    from transformers 5 modeling_rope_utils.py) in float32 as HF computes them; cos/sin times the
    scaling (Qwen3RotaryEmbedding.forward). Also stores inv_freq for seq_len (dynamic's recompute)."""
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from qwen3_ref import rope_inv_freq
    tokens = len(positions)
    c = Case(root, name, tokens=tokens, heads=heads, head_dim=head_dim, theta=theta, max_pos=max_pos,
             variant=variant, seq_len=seq_len)
    pos = torch.tensor(positions, dtype=torch.int32)
    x, dy = f32((tokens, heads, head_dim)), f32((tokens, heads, head_dim))
    inv_freq, att = rope_inv_freq(head_dim, theta, variant, torch.float32, None, max_pos)
    freqs = pos.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * att, emb.sin() * att
    X = leaf64(x)
    y = X * cos.double()[:, None, :] + rotate_half(X) * sin.double()[:, None, :]
    y.backward(dy.double())
    inv_l, att_l = rope_inv_freq(head_dim, theta, variant, torch.float64, seq_len, max_pos)
    c.put("pos", pos, "i32")
    c.put("x", x, "f32")
    c.put("dy", dy, "f32")
    c.put("y", y, "f64")
    c.put("dx", X.grad, "f64")
    c.put("inv_freq_seq_len", inv_l, "f64")
    c.put("att", torch.tensor([att_l], dtype=torch.float64), "f64")
    c.close()


# ---------------------------------------------------------------- SwiGLU (HF Qwen3MLP: act_fn(gate) * up, act = silu)
def swiglu_case(root, name, rows, cols):
    c = Case(root, name, rows=rows, cols=cols)
    g, u, dh = f32((rows, cols), 3.0), f32((rows, cols)), f32((rows, cols))
    g[0, :8] = torch.tensor([-100.0, -90.0, -30.0, -12.0, 12.0, 30.0, 90.0, 100.0])
    G, U = leaf64(g), leaf64(u)
    h = F.silu(G) * U
    h.backward(dh.double())
    for n, t in [("gate", g), ("up", u), ("dh", dh)]:
        c.put(n, t, "f32")
    c.put("h", h, "f64")
    c.put("dgate", G.grad, "f64")
    c.put("dup", U.grad, "f64")
    c.close()


# ---------------------------------------------------------------- attention (explicit softmax, block-diagonal causal mask)
def attention_case(root, name, seqlens, Hq, Hkv, D, lead=0, window=0):
    cu = [lead]
    for L in seqlens:
        cu.append(cu[-1] + L)
    T = cu[-1]
    scale = 1.0 / math.sqrt(D)
    c = Case(root, name, Hq=Hq, Hkv=Hkv, D=D, T=T, n_seqs=len(seqlens), scale=scale, window=window)
    q, k, v, do = f32((T, Hq, D)), f32((T, Hkv, D)), f32((T, Hkv, D)), f32((T, Hq, D))
    Q, K, V = leaf64(q), leaf64(k), leaf64(v)
    seg = torch.full((T,), -1, dtype=torch.int64)
    for i in range(len(seqlens)):
        seg[cu[i]:cu[i + 1]] = i
    idx = torch.arange(T)
    allowed = (seg[:, None] == seg[None, :]) & (idx[None, :] <= idx[:, None]) & (seg[:, None] >= 0)
    if window:  # transformers masking_utils sliding_window_overlay: kv_idx > q_idx - sliding_window
        allowed &= idx[None, :] > idx[:, None] - window
    rep = Hq // Hkv  # HF repeat_kv: query head h uses kv head h // rep
    Kr = K.repeat_interleave(rep, dim=1)
    Vr = V.repeat_interleave(rep, dim=1)
    s = torch.einsum("thd,shd->hts", Q, Kr) * scale
    s = s.masked_fill(~allowed[None], float("-inf"))
    rows = seg >= 0
    s_rows = s[:, rows, :]
    lse = torch.logsumexp(s_rows, dim=-1)  # [Hq, T']
    p = torch.softmax(s_rows, dim=-1)
    o_rows = torch.einsum("hts,shd->thd", p, Vr)
    out = torch.zeros(T, Hq, D, dtype=torch.float64)
    out[rows] = o_rows
    lse_full = torch.zeros(T, Hq, dtype=torch.float64)
    lse_full[rows] = lse.t()
    out.backward(do.double())
    c.put("cu_seqlens", torch.tensor(cu, dtype=torch.int32), "i32")
    for n, t in [("q", q), ("k", k), ("v", v), ("dout", do)]:
        c.put(n, t, "f32")
    c.put("out", out, "f64")
    c.put("lse", lse_full, "f64")
    c.put("dq", Q.grad, "f64")
    c.put("dk", K.grad, "f64")
    c.put("dv", V.grad, "f64")
    c.close()


# ---------------------------------------------------------------- cross entropy (F.cross_entropy, ignore_index=-100)
def ce_case(root, name, T, V, labels):
    c = Case(root, name, T=T, V=V)
    x = f32((T, V), 3.0)
    x[1] += 60.0  # a large-logit row (stability)
    lab = torch.tensor(labels, dtype=torch.int64)
    X = leaf64(x)
    n_valid = int((lab != -100).sum())
    loss_sum = F.cross_entropy(X, lab, ignore_index=-100, reduction="sum")
    # gradient of the mean over valid tokens: row_scale = 1/n_valid
    (loss_sum / n_valid).backward()
    lse = torch.logsumexp(X.detach(), dim=-1)
    c.put("logits", x, "f32")
    c.put("labels", lab.int(), "i32")
    c.put("loss_sum", loss_sum.reshape(1), "f64")
    c.put("lse", lse, "f64")
    c.put("dlogits", X.grad, "f64")
    c.close()


# ---------------------------------------------------------------- embedding (torch.nn.functional.embedding)
def embedding_case(root, name, V, H, ids):
    c = Case(root, name, V=V, H=H, T=len(ids))
    table, dout = f32((V, H)), f32((len(ids), H))
    ids_t = torch.tensor(ids, dtype=torch.int64)
    W = leaf64(table)
    out = F.embedding(ids_t, W)
    out.backward(dout.double())
    c.put("table", table, "f32")
    c.put("ids", ids_t.int(), "i32")
    c.put("dout", dout, "f32")
    c.put("out", out, "f64")
    c.put("dtable", W.grad, "f64")
    c.close()


# ---------------------------------------------------------------- AdamW (torch.optim.AdamW, single tensor, 1.13)
def adamw_case(root, name, n, steps, lr, betas, eps, wd, clip=None):
    """With clip: torch.nn.utils.clip_grad_norm_(max_norm=clip) before each step; gs<i> is the coefficient it
    applied (min(1, clip / (norm + 1e-6)), 1 without clip), which the kernel takes as grad_scale."""
    c = Case(root, name, n=n, steps=steps, lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, weight_decay=wd)
    p0 = f32((n,))
    grads = [f32((n,), 0.5 * (i + 1)) for i in range(steps)]
    grads[0][:4] = torch.tensor([0.0, 1e-6, -1e3, 3.0])
    P = torch.nn.Parameter(p0.double().clone())
    opt = torch.optim.AdamW([P], lr=lr, betas=betas, eps=eps, weight_decay=wd, foreach=False)
    c.put("p0", p0, "f32")
    for i, g in enumerate(grads):
        c.put("g%d" % i, g, "f32")
        P.grad = g.double().clone()
        coef = 1.0
        if clip is not None:
            norm = float(torch.nn.utils.clip_grad_norm_([P], clip))
            coef = min(1.0, clip / (norm + 1e-6))
            assert coef < 1.0, "the case should clip"
        c.put("gs%d" % i, torch.tensor([coef]), "f32")
        opt.step()
        c.put("p%d" % (i + 1), P.detach(), "f64")
    st = opt.state[P]
    c.put("m", st["exp_avg"], "f64")
    c.put("v", st["exp_avg_sq"], "f64")
    c.close()


# ---------------------------------------------------------------- cases of the kernel conformance table
# (tests/unit/kernels/kernel_conformance.cpp: every op x every registered implementation)

def add_rmsnorm_case(root, name, rows, dim, eps):
    """h = x + r; y = HF Qwen3RMSNorm(h); the residual stream h also receives dres from later layers."""
    c = Case(root, name, rows=rows, dim=dim, eps=eps)
    x, r, w = f32((rows, dim), 1.5, 0.2), f32((rows, dim)), f32((dim,), 0.1, 1.0)
    dy, dres = f32((rows, dim)), f32((rows, dim))
    X, R, W = leaf64(x), leaf64(r), leaf64(w)
    h = X + R
    rstd = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    y = W * (h * rstd)
    (y * dy.double()).sum().add_((h * dres.double()).sum()).backward()
    for n, t in [("x", x), ("r", r), ("w", w), ("dy", dy), ("dres", dres)]:
        c.put(n, t, "f32")
    c.put("h", h, "f64")
    c.put("y", y, "f64")
    c.put("rstd", rstd.squeeze(-1), "f64")
    c.put("dh", X.grad, "f64")
    c.put("dw", W.grad, "f64")
    c.close()


def qk_norm_rope_case(root, name, positions, heads, head_dim, theta, max_pos, eps):
    """HF Qwen3Attention: apply_rotary_pos_emb(q_norm(q.view(..., heads, head_dim)), ...)."""
    tokens = len(positions)
    c = Case(root, name, tokens=tokens, heads=heads, head_dim=head_dim, theta=theta, max_pos=max_pos, eps=eps)
    pos = torch.tensor(positions, dtype=torch.int32)
    x, w, dy = f32((tokens, heads, head_dim), 2.0), f32((head_dim,), 0.1, 1.0), f32((tokens, heads, head_dim))
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = pos.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos64, sin64 = emb.cos().double()[:, None, :], emb.sin().double()[:, None, :]
    X, W = leaf64(x), leaf64(w)
    rstd = torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + eps)
    n = W * (X * rstd)
    y = n * cos64 + rotate_half(n) * sin64
    y.backward(dy.double())
    c.put("pos", pos, "i32")
    for nm, t in [("x", x), ("w", w), ("dy", dy)]:
        c.put(nm, t, "f32")
    c.put("y", y, "f64")
    c.put("rstd", rstd.reshape(-1), "f64")
    c.put("dx", X.grad, "f64")
    c.put("dw", W.grad, "f64")
    c.close()


def linear_case(root, name, M, N, K):
    """torch.nn.functional.linear(x, w) with w [out, in]."""
    c = Case(root, name, M=M, N=N, K=K)
    x, w, dy = f32((M, K)), f32((N, K), 0.3), f32((M, N))
    X, W = leaf64(x), leaf64(w)
    y = F.linear(X, W)
    y.backward(dy.double())
    for n, t in [("x", x), ("w", w), ("dy", dy)]:
        c.put(n, t, "f32")
    c.put("y", y, "f64")
    c.put("dx", X.grad, "f64")
    c.put("dw", W.grad, "f64")
    c.close()


def grouped_linear_case(root, name, group_rows, N, K):
    """Rows of group g use expert weight w[g] (Megatron GroupedMLP / torch._grouped_mm semantics)."""
    G = len(group_rows)
    offs = [0]
    for m in group_rows:
        offs.append(offs[-1] + m)
    M = offs[-1]
    c = Case(root, name, M=M, N=N, K=K, G=G)
    x, w, dy = f32((M, K)), f32((G, N, K), 0.3), f32((M, N))
    X, W = leaf64(x), leaf64(w)
    y = torch.cat([F.linear(X[offs[g]:offs[g + 1]], W[g]) for g in range(G)], dim=0)
    y.backward(dy.double())
    c.put("counts", torch.tensor(group_rows, dtype=torch.int32), "i32")
    for n, t in [("x", x), ("w", w), ("dy", dy)]:
        c.put(n, t, "f32")
    c.put("y", y, "f64")
    c.put("dx", X.grad, "f64")
    c.put("dw", W.grad, "f64")
    c.close()


def gate_up_swiglu_case(root, name, T, I, H):
    """HF Qwen3MLP: act_fn(gate_proj(x)) * up_proj(x) with gate_up = cat(gate_proj.weight, up_proj.weight)."""
    c = Case(root, name, T=T, I=I, H=H)
    x, wg, wu, da = f32((T, H)), f32((I, H), 0.5), f32((I, H), 0.5), f32((T, I))
    X, WG, WU = leaf64(x), leaf64(wg), leaf64(wu)
    g, u = F.linear(X, WG), F.linear(X, WU)
    a = F.silu(g) * u
    a.backward(da.double())
    c.put("x", x, "f32")
    c.put("wgu", torch.cat([wg, wu], dim=0), "f32")
    c.put("da", da, "f32")
    c.put("gu", torch.cat([g, u], dim=1), "f64")
    c.put("a", a, "f64")
    c.put("dx", X.grad, "f64")
    c.put("dwgu", torch.cat([WG.grad, WU.grad], dim=0), "f64")
    c.close()


def linear_ce_case(root, name, T, V, H, labels):
    """F.cross_entropy(F.linear(x, w), labels, ignore_index=-100, reduction='sum'); grad of sum / n_valid."""
    c = Case(root, name, T=T, V=V, H=H)
    x, w = f32((T, H)), f32((V, H), 0.7)
    lab = torch.tensor(labels, dtype=torch.int64)
    X, W = leaf64(x), leaf64(w)
    logits = F.linear(X, W)
    loss_sum = F.cross_entropy(logits, lab, ignore_index=-100, reduction="sum")
    n_valid = int((lab != -100).sum())
    (loss_sum / n_valid).backward()
    c.put("x", x, "f32")
    c.put("w", w, "f32")
    c.put("labels", lab.int(), "i32")
    c.put("loss_sum", loss_sum.reshape(1), "f64")
    c.put("lse", torch.logsumexp(logits.detach(), dim=-1), "f64")
    c.put("dx", X.grad, "f64")
    c.put("dw", W.grad, "f64")
    c.close()


def elementwise_case(root, name, n, s):
    """sum(x^2) (torch.nn.utils.clip_grad_norm_'s norm before the root), x * s, a + b."""
    c = Case(root, name, n=n, s=s)
    x, b = f32((n,), 3.0), f32((n,))
    c.put("x", x, "f32")
    c.put("b", b, "f32")
    c.put("sumsq", x.double().pow(2).sum().reshape(1), "f64")
    c.put("scaled", x.double() * float(torch.tensor(s, dtype=torch.float32)), "f64")
    c.put("sum", x.double() + b.double(), "f64")
    c.close()


def bias_rows_case(root, name, rows, cols):
    """F.linear's bias: y + b broadcast over rows; its gradient db0 + dy.sum(0) (accumulated onto db0)."""
    c = Case(root, name, rows=rows, cols=cols)
    y, b, dy, db0 = f32((rows, cols)), f32((cols,)), f32((rows, cols)), f32((cols,))
    c.put("y", y, "f32")
    c.put("b", b, "f32")
    c.put("dy", dy, "f32")
    c.put("db0", db0, "f32")
    c.put("y_plus_b", y.double() + b.double(), "f64")
    c.put("db", db0.double() + dy.double().sum(0), "f64")
    c.close()


M64 = (1 << 64) - 1


def splitmix64(x):
    """splitmix64's output function of x + golden gamma (Steele, Lea, Flood, OOPSLA 2014; Vigna's
    splitmix64.c), on Python ints mod 2^64: written from the paper, not from twinkle's core/hash.h."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def lora_case(root, name, T, n_in, n_out, r, p, scaling, seed, module_key, feature0):
    """PEFT's LoRA term on the dropped-out input (peft/tuners/lora/layer.py Linear.forward: y + lora_B(lora_A(
    dropout(x))) * scaling) and its gradients by float64 autograd; the dropout mask of the layout-independent
    rule (twinkle/parallel/lora_dropout.h): token key (row << 32 | position), kept iff
    splitmix64(splitmix64(splitmix64(seed ^ module) ^ splitmix64(key)) + feature * golden) >> 40 >= round(p 2^24)."""
    c = Case(root, name, T=T, n_in=n_in, n_out=n_out, r=r, scaling=scaling, keep_scale=1.0 / (1.0 - p),
             seed=seed, module_key=module_key, feature0=feature0, threshold=round(p * (1 << 24)))
    rows = [t // 5 for t in range(T)]
    pos = [(t * 7) % 11 for t in range(T)]
    thr = round(p * (1 << 24))
    base = splitmix64(seed ^ module_key)
    mask = torch.zeros(T, n_in, dtype=torch.int32)
    for t in range(T):
        h = splitmix64(base ^ splitmix64((rows[t] << 32) | pos[t]))
        for i in range(n_in):
            mask[t, i] = 1 if (splitmix64((h + (feature0 + i) * 0x9E3779B97F4A7C15) & M64) >> 40) >= thr else 0
    x, A, B, dy = f32((T, n_in)), f32((r, n_in), 0.3), f32((n_out, r), 0.3), f32((T, n_out))
    y0, dA0, dB0, dx0 = f32((T, n_out)), f32((r, n_in)), f32((n_out, r)), f32((T, n_in))
    for k, v in (("rows", torch.tensor(rows)), ("pos", torch.tensor(pos)), ("mask", mask)):
        c.put(k, v, "i32")
    for k, v in (("x", x), ("A", A), ("B", B), ("dy", dy), ("y0", y0), ("dA0", dA0), ("dB0", dB0), ("dx0", dx0)):
        c.put(k, v, "f32")
    keep = 1.0 / (1.0 - p)
    xd = x.double() * mask.double() * keep
    c.put("xd", xd, "f64")
    xd32 = xd.float()  # the op's forward / backward read the dropped-out input as f32
    xv = xd32.double().requires_grad_(True)
    Av, Bv = A.double().requires_grad_(True), B.double().requires_grad_(True)
    h = xv @ Av.T
    y = y0.double() + scaling * (h @ Bv.T)
    (y * dy.double()).sum().backward()
    c.put("h", h.detach(), "f64")
    c.put("y", y.detach(), "f64")
    c.put("dh", scaling * dy.double() @ B.double(), "f64")
    c.put("dA", dA0.double() + Av.grad, "f64")
    c.put("dB", dB0.double() + Bv.grad, "f64")
    c.put("g", xv.grad, "f64")                                    # d(dropped-out input)
    c.put("dx_acc", dx0.double() + xv.grad, "f64")                # backward with accumulate_dx
    c.put("dx_drop", dx0.double() + xv.grad * mask.double() * keep, "f64")  # the dropout's backward
    c.close()


# ---------------------------------------------------------------- MoE (ops moe_router, moe_permute, moe_router_loss)
def _moe_ref():
    """tests/reference/qwen3_moe_ref.py (transformers' Qwen3MoeSparseMoeBlock routing, topk_lower's tie order,
    Megatron's losses), imported where used."""
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import qwen3_moe_ref
    return qwen3_moe_ref


def moe_router_case(root, name, T, E, k, norm, ties):
    """qwen3_moe_ref.route (softmax over all E experts, top-k with ties to the lower expert index,
    renormalised when norm) and by float64 autograd the gradient of sum(w * dw) + sum(p * dprobs) +
    sum(logits * dextra) (the combine, the aux loss on the probabilities, the z-loss added as is), and of
    the first two terms alone. With ties: rows of exactly equal logits (hence probabilities) inside the
    top-k and at its boundary."""
    mr = _moe_ref()
    c = Case(root, name, T=T, E=E, k=k, norm=int(norm))
    logits = f32((T, E), 1.5)
    if ties:
        assert E >= 7 and k == 3
        logits[0, :] = 0.25                      # all equal: experts 0, 1, 2
        logits[1:4, :] = -1.0
        logits[1, [1, 4, 5]] = 2.0               # a three-way tie filling the top-k: 1, 4, 5
        logits[2, 6], logits[2, 1] = 5.0, 4.0
        logits[2, [4, 2]] = 3.0                  # a tie for the last place: 6, 1, 2 (4 left out)
        logits[3, 0] = 2.0
        logits[3, [6, 3, 5]] = 1.0               # a three-way tie across the boundary: 0, 3, 5
    dw, dprobs, dextra = f32((T, k)), f32((T, E), 0.3), f32((T, E), 0.2)
    L = leaf64(logits)
    p, w, sel = mr.route(L, k, norm)
    lw = (w * dw.double()).sum()
    lp = (p * dprobs.double()).sum()
    g_w, = torch.autograd.grad(lw, L, retain_graph=True)
    g_p, = torch.autograd.grad(lp, L, retain_graph=True)
    (lw + lp + (L * dextra.double()).sum()).backward()
    for n, t in [("logits", logits), ("dw", dw), ("dprobs", dprobs), ("dextra", dextra)]:
        c.put(n, t, "f32")
    c.put("probs", p, "f64")
    c.put("w", w, "f64")
    c.put("sel", sel.int(), "i32")
    c.put("dlogits", L.grad, "f64")
    c.put("dlogits_w", g_w, "f64")
    c.put("dlogits_p", g_p, "f64")
    c.close()


def moe_permute_case(root, name, T, k, E, H, empty_expert):
    """Megatron-core's permute / unpermute (megatron/core/transformer/moe/moe_utils.py): the routing map
    [T, E] of k distinct experts per token (none to empty_expert), rows ordered by expert with tokens
    ascending inside one (masked_select of the token indices by routing_map.T); permute = index_select of
    the token rows, unpermute = index_add of the rows times their combine weight back to the tokens
    (transformers' sum_j w[t, j] * expert_out). Gradients by float64 autograd; the plan (counts,
    row_of_slot, slot_of_row = t*k + j of each row) is exact."""
    c = Case(root, name, T=T, k=k, E=E, H=H)
    allowed = [e for e in range(E) if e != empty_expert]
    sel = torch.stack([torch.tensor(allowed)[torch.randperm(len(allowed))[:k]] for _ in range(T)])
    routing_map = torch.zeros(T, E, dtype=torch.bool)
    routing_map[torch.arange(T)[:, None], sel] = True
    counts = routing_map.sum(0)
    token_of_row = torch.arange(T).unsqueeze(0).expand(E, -1).masked_select(routing_map.T.contiguous())
    expert_of_row = torch.repeat_interleave(torch.arange(E), counts)
    j_of_row = torch.tensor([int((sel[t] == e).nonzero())
                             for t, e in zip(token_of_row.tolist(), expert_of_row.tolist())])
    slot_of_row = token_of_row * k + j_of_row
    row_of_slot = torch.empty(T * k, dtype=torch.int64)
    row_of_slot[slot_of_row] = torch.arange(T * k)
    R = T * k
    x, dperm, dx0 = f32((T, H)), f32((R, H)), f32((T, H))
    y, w, dunperm = f32((R, H)), f32((T, k), 0.5, 0.2), f32((T, H))
    X = leaf64(x)
    perm = X.index_select(0, token_of_row)
    perm.backward(dperm.double())
    Y, W = leaf64(y), leaf64(w)
    w_of_row = W[token_of_row, j_of_row]
    unperm = torch.zeros(T, H, dtype=torch.float64).index_add(0, token_of_row, Y * w_of_row[:, None])
    unperm.backward(dunperm.double())
    c.put("sel", sel.int(), "i32")
    c.put("counts", counts.int(), "i32")
    c.put("row_of_slot", row_of_slot.int(), "i32")
    c.put("slot_of_row", slot_of_row.int(), "i32")
    for n, t in [("x", x), ("dperm", dperm), ("dx0", dx0), ("y", y), ("w", w), ("dunperm", dunperm)]:
        c.put(n, t, "f32")
    c.put("perm", perm, "f64")
    c.put("dx", X.grad, "f64")
    c.put("dx_acc", dx0.double() + X.grad, "f64")
    c.put("unperm", unperm, "f64")
    c.put("dy", Y.grad, "f64")
    c.put("dw", W.grad, "f64")
    c.close()


def moe_router_loss_case(root, name, T, E, k, masked, coeff):
    """The router losses' pieces over the real tokens (mask 0 = padding; tokens `masked`): the routing
    statistics added onto non-zero starting values (counts exact, prob_sum = sum_t probs in float64),
    the gradient on the probabilities of coeff_scale * sum_e counts[e] * prob_sum[e] (the form of
    transformers' load_balancing_loss_func and Megatron's switch_load_balancing_loss_func, counts without
    gradient) by autograd, and qwen3_moe_ref.z_loss (Megatron's z_loss_func) with its sum of lse^2 and
    its autograd gradient (scale = coeff / real tokens)."""
    mr = _moe_ref()
    c = Case(root, name, T=T, E=E, k=k, coeff=coeff)
    logits = f32((T, E), 2.0, 1.0)
    logits[3] += 40.0  # large logits (the lse's stability)
    probs = torch.softmax(logits.double(), dim=-1).float()
    _, sel = mr.topk_lower(probs, k)
    mask = torch.ones(T, dtype=torch.int32)
    mask[masked] = 0
    m = mask.double()
    prob_sum0 = torch.randn(E, dtype=torch.float64)
    counts0 = torch.randint(0, 50, (E,), dtype=torch.int32)
    onehot = torch.nn.functional.one_hot(sel.long(), E).to(torch.int64)  # [T, k, E]
    n = int(mask.sum())
    # aux backward
    cs = coeff * E / (k * n * n)
    dprobs0 = f32((T, E), 0.1)
    counts_aux = (onehot * mask[:, None, None]).sum((0, 1))
    P = leaf64(probs)
    (cs * ((P * m[:, None]).sum(0) * counts_aux.double()).sum()).backward()
    # z-loss
    L = leaf64(logits)
    lse = torch.logsumexp(L, dim=-1)
    mr.z_loss(L, coeff, mask).backward()
    dlogits0 = f32((T, E), 0.01)
    c.put("logits", logits, "f32")
    c.put("probs", probs, "f32")
    c.put("sel", sel.int(), "i32")
    c.put("mask", mask, "i32")
    c.put("prob_sum0", prob_sum0, "f64")
    c.put("counts0", counts0, "i32")
    c.put("prob_sum", prob_sum0 + (probs.double() * m[:, None]).sum(0), "f64")
    c.put("counts", (counts0 + (onehot * mask[:, None, None]).sum((0, 1))).int(), "i32")
    c.put("prob_sum_all", prob_sum0 + probs.double().sum(0), "f64")
    c.put("counts_all", (counts0 + onehot.sum((0, 1))).int(), "i32")
    c.put("n", torch.tensor([n]), "i32")
    c.put("coeff_scale", torch.tensor([cs], dtype=torch.float64), "f64")
    c.put("counts_aux", counts_aux.int(), "i32")
    c.put("dprobs0", dprobs0, "f32")
    c.put("dprobs", dprobs0.double() + P.grad, "f64")
    c.put("lse", lse, "f64")
    c.put("z_sum", (lse.square() * m).sum().reshape(1), "f64")
    c.put("z_sum_all", lse.square().sum().reshape(1), "f64")
    c.put("z_scale", torch.tensor([coeff / n], dtype=torch.float64), "f64")
    c.put("dlogits0", dlogits0, "f32")
    c.put("dlogits", dlogits0.double() + L.grad, "f64")
    c.close()


# ---------------------------------------------------------------- attention_block (ring attention's pieces)
def attention_block_case(root, name, Hq, Hkv, D, window):
    """One query block against two key blocks A and B with explicit segment ids and global positions (the
    ring's pieces, twinkle/kernels/cpu/attention_block.h): the explicit masked softmax over A and B together
    in float64 (query i sees key j iff the segments agree, k_pos <= q_pos and, with a window, q_pos - k_pos
    < window; HF repeat_kv), its log-sum-exp, delta = rowsum(dO * O) and autograd's dq / dk / dv; and the
    forward over block A alone (rows that see no key of A: out 0, lse -inf, flagged in a_empty)."""
    g = torch.Generator().manual_seed(4242)
    # global axis: segment 0 = positions 0..15, segment 1 = 16..35; the tokens of each block in a shuffled order
    seg_of = lambda p: 0 if p < 16 else 1
    shuffle = lambda v: [v[i] for i in torch.randperm(len(v), generator=g).tolist()]
    # queries 0, 1 and 16 come before every key of block A in their segment (no visible key there)
    q_pos = shuffle([0, 1, 5, 9, 12, 15, 16, 18, 23, 27, 30, 34, 35])
    a_pos = shuffle([3, 4, 6, 8, 10, 17, 19, 21, 22])
    b_pos = shuffle([p for p in range(36) if p not in a_pos])
    Tq, Ta, Tb = len(q_pos), len(a_pos), len(b_pos)
    scale = 1.0 / math.sqrt(D)
    c = Case(root, name, Hq=Hq, Hkv=Hkv, D=D, Tq=Tq, Ta=Ta, Tb=Tb, scale=scale, window=window)
    q, do = f32((Tq, Hq, D)), f32((Tq, Hq, D))
    ka, va, kb, vb = f32((Ta, Hkv, D)), f32((Ta, Hkv, D)), f32((Tb, Hkv, D)), f32((Tb, Hkv, D))
    Q, KA, VA, KB, VB = leaf64(q), leaf64(ka), leaf64(va), leaf64(kb), leaf64(vb)
    qp, kp = torch.tensor(q_pos), torch.tensor(a_pos + b_pos)
    qs, ks = torch.tensor([seg_of(p) for p in q_pos]), torch.tensor([seg_of(p) for p in a_pos + b_pos])
    allowed = (qs[:, None] == ks[None, :]) & (kp[None, :] <= qp[:, None])
    if window:
        allowed &= (qp[:, None] - kp[None, :]) < window
    assert bool(allowed.any(dim=1).all()), "every query must see a key of A or B"
    rep = Hq // Hkv
    K = torch.cat([KA, KB]).repeat_interleave(rep, dim=1)
    V = torch.cat([VA, VB]).repeat_interleave(rep, dim=1)
    sc = torch.einsum("thd,shd->hts", Q, K) * scale
    sc = sc.masked_fill(~allowed[None], float("-inf"))
    lse = torch.logsumexp(sc, dim=-1).t()  # [Tq, Hq]
    out = torch.einsum("hts,shd->thd", torch.softmax(sc, dim=-1), V)
    out.backward(do.double())
    delta = (do.double() * out.detach()).sum(-1)
    # block A alone
    alw_a = allowed[:, :Ta]
    sa = sc.detach()[:, :, :Ta]
    a_empty = ~alw_a.any(dim=1)
    sa_rows = sa[:, ~a_empty, :]
    out_a = torch.zeros(Tq, Hq, D, dtype=torch.float64)
    lse_a = torch.zeros(Tq, Hq, dtype=torch.float64)
    out_a[~a_empty] = torch.einsum("hts,shd->thd", torch.softmax(sa_rows, dim=-1), V.detach()[:Ta])
    lse_a[~a_empty] = torch.logsumexp(sa_rows, dim=-1).t()
    assert bool(a_empty.any()) and not bool(a_empty.all()), "block A must leave some queries without a key"
    i32 = lambda v: torch.tensor(v, dtype=torch.int32)
    c.put("q_seg", qs.int(), "i32")
    c.put("q_pos", i32(q_pos), "i32")
    c.put("a_seg", ks[:Ta].int(), "i32")
    c.put("a_pos", i32(a_pos), "i32")
    c.put("b_seg", ks[Ta:].int(), "i32")
    c.put("b_pos", i32(b_pos), "i32")
    c.put("a_empty", a_empty.int(), "i32")
    for n, t in [("q", q), ("dout", do), ("ka", ka), ("va", va), ("kb", kb), ("vb", vb)]:
        c.put(n, t, "f32")
    c.put("out", out, "f64")
    c.put("lse", lse, "f64")
    c.put("delta", delta, "f64")
    c.put("out_a", out_a, "f64")
    c.put("lse_a", lse_a, "f64")
    c.put("dq", Q.grad, "f64")
    for n, t in [("dka", KA.grad), ("dva", VA.grad), ("dkb", KB.grad), ("dvb", VB.grad)]:
        c.put(n, t, "f64")
    c.close()


def conformance_cases(out):
    add_rmsnorm_case(out, "add_rmsnorm_45", 7, 45, 1e-6)
    qk_norm_rope_case(out, "qk_norm_rope_d18", [0, 7, 3, 63, 1, 40], 3, 18, 1e6, 64, 1e-6)
    qk_norm_rope_case(out, "qk_norm_rope_d64", [5, 0, 127, 9], 5, 64, 1e4, 128, 1e-5)
    linear_case(out, "linear_9x23x17", 9, 23, 17)
    grouped_linear_case(out, "grouped_linear_g4", [4, 0, 7, 2], 5, 11)
    gate_up_swiglu_case(out, "gate_up_swiglu_7x11x13", 7, 11, 13)
    linear_ce_case(out, "linear_ce_v37", 11, 37, 9, [3, -100, 36, 0, 5, 5, -100, 20, 1, 33, 7])
    elementwise_case(out, "elementwise_1001", 1001, 0.37)
    bias_rows_case(out, "bias_rows_37x70", 37, 70)
    lora_case(out, "lora_13x37x29_r4", 13, 37, 29, 4, 0.3, 2.0, 123456789, 0x1234ABCD5678EF, 5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)

    rmsnorm_case(out, "rmsnorm_96", 37, 96, 1e-6)
    rmsnorm_case(out, "rmsnorm_qknorm_128", 4 * 9, 128, 1e-6)
    rmsnorm_case(out, "rmsnorm_odd_50", 5, 50, 1e-5)

    rope_case(out, "rope_d32", [0, 5, 1, 17, 1000, 4095, 5, 0], 3, 32, 1e6, 4096)
    rope_case(out, "rope_d128", [0, 5, 2, 31, 777, 32767, 12345], 2, 128, 1e6, 32768)
    rope_case(out, "rope_d64_theta1e4", [0, 3, 9, 100], 4, 64, 10000.0, 128)

    swiglu_case(out, "swiglu", 9, 113)

    attention_case(out, "attn_gqa_d32", [1, 70, 130, 64, 5], 4, 2, 32)
    attention_case(out, "attn_gqa_d64", [200, 1, 77, 129], 4, 2, 64)
    attention_case(out, "attn_mha_d40_lead", [33, 100], 2, 2, 40, lead=3)
    attention_case(out, "attn_gqa4_d128", [150], 4, 1, 128)

    labels = [3, -100, 17, 49, 0, 25, 24, -100, 26, 8, 49, 30, 1]
    ce_case(out, "ce_v50", 13, 50, labels)

    embedding_case(out, "embedding", 20, 70, [3, 19, 0, 3, 10, 9, 11, 3, 19, 0, 5, 12, 10, 10, 7])

    adamw_case(out, "adamw", 1000, 5, 1e-2, (0.9, 0.95), 1e-8, 0.1)
    adamw_case(out, "adamw_default", 257, 5, 1e-3, (0.9, 0.999), 1e-8, 0.1)

    conformance_cases(out)
    # added cases (after the original ones, so their random inputs are unchanged)
    yarn = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024, "attention_factor": None,
            "mscale": None, "mscale_all_dim": None, "beta_fast": 32, "beta_slow": 1, "truncate": True}
    adamw_case(out, "adamw_clipped", 300, 4, 1e-3, (0.9, 0.95), 1e-8, 0.1, clip=0.5)
    rope_variant_case(out, "rope_yarn_d64", [0, 5, 100, 1023, 2000, 4095], 2, 64, 10000.0, 4096, yarn)
    rope_variant_case(out, "rope_yarn_mscale_notrunc_d32", [0, 7, 300, 511], 3, 32, 1e6, 512,
                      dict(yarn, original_max_position_embeddings=128, factor=3.0, mscale=0.707, mscale_all_dim=1.0,
                           beta_fast=16, beta_slow=2, truncate=False))
    rope_variant_case(out, "rope_yarn_attn_factor_d32", [0, 9, 200], 2, 32, 1e6, 256,
                      dict(yarn, original_max_position_embeddings=64, attention_factor=0.8))
    rope_variant_case(out, "rope_linear_d32", [0, 3, 99, 255], 2, 32, 10000.0, 256, {"type": "linear", "factor": 2.5})
    rope_variant_case(out, "rope_dynamic_d32", [0, 3, 99, 255], 2, 32, 10000.0, 256,
                      {"type": "dynamic", "factor": 3.0}, seq_len=700)
    attention_case(out, "attn_win3_gqa_d32", [1, 70, 130, 5], 4, 2, 32, window=3)
    attention_case(out, "attn_win70_gqa_d64", [200, 129, 64, 1], 4, 2, 64, window=70)
    attention_case(out, "attn_win64_mha_d32_lead", [300, 65], 2, 2, 32, lead=2, window=64)
    attention_case(out, "attn_win1_d16", [65, 10], 2, 1, 16, window=1)
    # head dim above 128 (the CUDA kernel's 32-row tiles) with a window across tiles
    attention_case(out, "attn_gqa_d160_win40", [90, 1, 70], 4, 2, 160, window=40)
    # the MoE ops (odd shapes; exact ties; an expert without rows; padding tokens)
    moe_router_case(out, "moe_router_13x7_k3_norm", 13, 7, 3, True, True)
    moe_router_case(out, "moe_router_13x7_k3_raw", 13, 7, 3, False, True)
    moe_router_case(out, "moe_router_21x16_k4_norm", 21, 16, 4, True, False)
    moe_permute_case(out, "moe_permute_13x3_e7_h10", 13, 3, 7, 10, 4)
    moe_permute_case(out, "moe_permute_17x1_e5_h3", 17, 1, 5, 3, -1)
    moe_router_loss_case(out, "moe_router_loss_13x7_k3", 13, 7, 3, [2, 7, 12], 1e-2)
    attention_block_case(out, "attn_block_gqa_d12", 4, 2, 12, 0)
    attention_block_case(out, "attn_block_mha_d8_win5", 3, 3, 8, 5)
    # the Gated DeltaNet ops (Qwen3.5's linear attention): transformers' own functions in float64
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gdn_kernels_ref
    gdn_kernels_ref.cases(Case, f32, leaf64, out)

    with open(os.path.join(out, "DONE"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
