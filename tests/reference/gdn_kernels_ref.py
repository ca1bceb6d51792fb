"""PyTorch float64 references of the Gated DeltaNet ops (twinkle/kernels/ops.h CausalConv1dOp,
GatedDeltaRuleOp, GatedRmsNormOp) for the kernel conformance table; called by kernels_ref.py.

The oracle is transformers' own code (transformers/models/qwen3_5/modeling_qwen3_5.py):
causal_conv1d_fn, torch_chunk_gated_delta_rule (checked against torch_recurrent_gated_delta_rule),
Qwen3_5RMSNormGated and the decay / beta expressions of Qwen3_5GatedDeltaNet.forward; gradients by
autograd. Those functions cast their inputs to float32; `float64_module()` runs them in float64 by
giving the module a `torch` whose float32 is float64 (nothing else changes). transformers' torch path
has no packed-sequence support (it ignores cu_seqlens), so a packed row's reference is the functions
run on each segment alone (the state and the convolution's zero padding restart per segment, as FLA's
varlen kernels do) and concatenated.
"""
import contextlib
import math
import types

import torch
import torch.nn.functional as F

import transformers.models.qwen3_5.modeling_qwen3_5 as hf


@contextlib.contextmanager
def float64_module():
    class Torch64(types.ModuleType):
        def __getattr__(self, name):
            return torch.float64 if name == "float32" else getattr(torch, name)

    saved = hf.torch
    hf.torch = Torch64("torch")
    try:
        yield
    finally:
        hf.torch = saved


def _segs(seqlens):
    cu = [0]
    for n in seqlens:
        cu.append(cu[-1] + n)
    return cu


def conv1d_case(Case, f32, leaf64, root, name, seqlens, C, K, silu, with_bias):
    cu = _segs(seqlens)
    T = cu[-1]
    c = Case(root, name, T=T, C=C, K=K, n_seqs=len(seqlens), silu=int(silu), has_bias=int(with_bias))
    x, w, dy = f32((T, C)), f32((C, K), 0.5), f32((T, C))
    bias = f32((C,), 0.3) if with_bias else None
    X, Wt = leaf64(x), leaf64(w)
    Bs = leaf64(bias) if with_bias else None
    ys = []
    for s in range(len(seqlens)):
        seg = X[cu[s]:cu[s + 1]].t().unsqueeze(0)  # [1, C, L], the layer's layout
        y = hf.causal_conv1d_fn(seg, Wt, Bs, activation="silu" if silu else None)
        ys.append(y[0].t())
    y = torch.cat(ys, 0)
    y.backward(dy.double())
    c.put("cu_seqlens", torch.tensor(cu, dtype=torch.int32), "i32")
    for n, t in [("x", x), ("w", w), ("dy", dy)]:
        c.put(n, t, "f32")
    if with_bias:
        c.put("bias", bias, "f32")
        c.put("dbias", Bs.grad, "f64")
    c.put("y", y, "f64")
    c.put("dx", X.grad, "f64")
    c.put("dw", Wt.grad, "f64")
    c.close()


def gates_f32(T, H, a_scale=1.0):
    """The layer's g and beta from random projections and parameters initialised as
    Qwen3_5GatedDeltaNet.__init__ (A = U(0.01, 16), dt_bias 1), in float32 as the kernels get them."""
    a, b = torch.randn(T, H) * a_scale, torch.randn(T, H)
    A_log = torch.log(torch.empty(H).uniform_(0.01, 16))
    dt_bias = torch.ones(H) + 0.1 * torch.randn(H)
    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias)
    return g.float(), b.sigmoid().float()


def gdr_case(Case, f32, leaf64, root, name, seqlens, Hk, Hv, Dk, Dv, l2norm, with_h0, with_dht, decay_scale=1.0):
    cu = _segs(seqlens)
    T, N = cu[-1], len(seqlens)
    scale = Dk ** -0.5
    c = Case(root, name, T=T, n_seqs=N, Hk=Hk, Hv=Hv, Dk=Dk, Dv=Dv, scale=scale, l2norm=int(l2norm),
             has_h0=int(with_h0), has_dht=int(with_dht))
    q, k, v = f32((T, Hk, Dk)), f32((T, Hk, Dk)), f32((T, Hv, Dv))
    if not l2norm:  # unnormalised keys: keep |k| ~ 1 so that the delta rule stays contractive
        k = (k / math.sqrt(Dk)).float()
    g, beta = gates_f32(T, Hv)
    g = (g * decay_scale).float()
    h0 = f32((N, Hv, Dk, Dv), 0.5)
    dout, dht = f32((T, Hv, Dv)), f32((N, Hv, Dk, Dv))
    Q, K, V, G, Bt = leaf64(q), leaf64(k), leaf64(v), leaf64(g), leaf64(beta)
    H0 = leaf64(h0)
    outs, finals, worst = [], [], 0.0
    with float64_module():
        for s in range(N):
            sl = slice(cu[s], cu[s + 1])
            args = [x[sl].unsqueeze(0) for x in (Q, K, V, G, Bt)]
            # value head h reads key head h // (Hv / Hk) (repeat_interleave, as transformers' Qwen3_5GatedDeltaNet);
            # done here because transformers before 5.2x leaves the repeat to the caller
            args[0], args[1] = (a.repeat_interleave(Hv // Hk, dim=2) for a in args[:2])
            init = H0[s:s + 1] if with_h0 else None
            o, st = hf.torch_chunk_gated_delta_rule(*args, chunk_size=64, initial_state=init,
                                                    output_final_state=True, use_qk_l2norm_in_kernel=l2norm)
            with torch.no_grad():  # the chunked and the recurrent form of transformers agree in float64
                o2, st2 = hf.torch_recurrent_gated_delta_rule(*[a.detach() for a in args],
                                                              initial_state=None if init is None else init.detach(),
                                                              output_final_state=True, use_qk_l2norm_in_kernel=l2norm)
                worst = max(worst, (o - o2).abs().max().item() / max(o2.abs().max().item(), 1e-30),
                            (st - st2).abs().max().item() / max(st2.abs().max().item(), 1e-30))
            outs.append(o[0])
            finals.append(st[0])
    assert worst < 1e-10, f"{name}: transformers' chunked and recurrent forms differ by {worst}"
    out, ht = torch.cat(outs, 0), torch.stack(finals, 0)
    loss = (out * dout.double()).sum()
    if with_dht:
        loss = loss + (ht * dht.double()).sum()
    loss.backward()
    c.put("cu_seqlens", torch.tensor(cu, dtype=torch.int32), "i32")
    for n, t in [("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("h0", h0), ("dout", dout), ("dht", dht)]:
        c.put(n, t, "f32")
    c.put("out", out, "f64")
    c.put("ht", ht, "f64")
    for n, t in [("dq", Q.grad), ("dk", K.grad), ("dv", V.grad), ("dg", G.grad), ("dbeta", Bt.grad)]:
        c.put(n, t, "f64")
    c.put("dh0", H0.grad if with_h0 else torch.zeros(N, Hv, Dk, Dv), "f64")
    c.close()


def gdn_gates_case(Case, f32, leaf64, root, name, T, H):
    c = Case(root, name, T=T, H=H)
    a, b = f32((T, H), 3.0), f32((T, H), 2.0)
    a[0, 0], a[1, 0] = 25.0, -30.0  # softplus's threshold (x > 20: x) and its far tail
    A_log = torch.log(torch.empty(H).uniform_(0.01, 16)).float()
    dt_bias = (torch.ones(H) + 0.1 * torch.randn(H)).float()
    dg, dbeta = f32((T, H)), f32((T, H))
    A, B, AL, DT = leaf64(a), leaf64(b), leaf64(A_log), leaf64(dt_bias)
    # Qwen3_5GatedDeltaNet.forward: beta = b.sigmoid(); g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
    beta = B.sigmoid()
    g = -AL.exp() * F.softplus(A + DT)
    ((g * dg.double()).sum() + (beta * dbeta.double()).sum()).backward()
    for n, t in [("a", a), ("b", b), ("A_log", A_log), ("dt_bias", dt_bias), ("dg", dg), ("dbeta", dbeta)]:
        c.put(n, t, "f32")
    c.put("g", g, "f64")
    c.put("beta", beta, "f64")
    for n, t in [("da", A.grad), ("db", B.grad), ("dA_log", AL.grad), ("ddt_bias", DT.grad)]:
        c.put(n, t, "f64")
    c.close()


def gated_rmsnorm_case(Case, f32, leaf64, root, name, rows, dim, eps):
    c = Case(root, name, rows=rows, dim=dim, eps=eps)
    x, z, w, dy = f32((rows, dim), 2.0, 0.3), f32((rows, dim), 1.5), f32((dim,), 0.1, 1.0), f32((rows, dim))
    X, Z = leaf64(x), leaf64(z)
    norm = hf.Qwen3_5RMSNormGated(dim, eps=eps).double()
    with torch.no_grad():
        norm.weight.copy_(w.double())
    with float64_module():
        y = norm(X, Z)
    y.backward(dy.double())
    rstd = torch.rsqrt(X.detach().pow(2).mean(-1) + eps)
    for n, t in [("x", x), ("z", z), ("w", w), ("dy", dy)]:
        c.put(n, t, "f32")
    c.put("y", y, "f64")
    c.put("rstd", rstd, "f64")
    c.put("dx", X.grad, "f64")
    c.put("dz", Z.grad, "f64")
    c.put("dw", norm.weight.grad, "f64")
    c.close()


def cases(Case, f32, leaf64, out):
    # causal conv1d: packed segments of 5, 1, 70 and 3 tokens (the 1-token one and those shorter than K),
    # Qwen3.5's K = 4 with SiLU and no bias; and a general K = 3 with a bias and no activation
    conv1d_case(Case, f32, leaf64, out, "conv1d_packed_c37_k4", [5, 1, 70, 3], 37, 4, True, False)
    conv1d_case(Case, f32, leaf64, out, "conv1d_bias_linear_c16_k3", [9, 2, 30], 16, 3, False, True)
    # gated delta rule: packed rows with tail chunks of 6, 1, 2 tokens and a full one, Hv = 2 Hk, Dk != Dv,
    # l2norm (Qwen3.5), initial states and a final-state gradient
    gdr_case(Case, f32, leaf64, out, "gdr_packed_hv2hk_l2", [70, 1, 130, 64], 2, 4, 16, 24, True, True, True)
    # no l2norm, Hv = Hk, no initial state, no final-state gradient (the null paths), weaker decay
    gdr_case(Case, f32, leaf64, out, "gdr_mha_nol2_noh0", [65, 33, 128], 3, 3, 32, 32, False, False, False,
             decay_scale=0.05)
    # Qwen3.5's head dim 128, a 2-chunk sequence with a tail, weak decay (the state carries across chunks)
    gdr_case(Case, f32, leaf64, out, "gdr_d128_hv2hk", [150], 1, 2, 128, 128, True, True, True, decay_scale=0.02)
    gdn_gates_case(Case, f32, leaf64, out, "gdn_gates_29x6", 29, 6)
    gated_rmsnorm_case(Case, f32, leaf64, out, "gated_rmsnorm_d24", 37, 24, 1e-6)
    gated_rmsnorm_case(Case, f32, leaf64, out, "gated_rmsnorm_d128", 12, 128, 1e-6)
