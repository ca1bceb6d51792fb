#!/usr/bin/env python3
"""The gated delta rule (Qwen3.5's linear attention) on the CPU, in one run: twinkle's chunked kernel and
its token recurrence (build/bench/gdn_bench) next to transformers' torch_chunk_gated_delta_rule
(models/qwen3_5/modeling_qwen3_5.py, float32, autograd for the backward) on the same shapes, inputs'
distribution and threads. Prints one JSON line per measurement and a table of ratios
(bench/README.md, section "Gated delta rule").

  .venv/bin/python bench/gdn_bench.py [--build build] [--threads 1] [--tokens 2048] [--seqs 1]
                                      [--hk 2] [--hv 4] [--dk 128] [--dv 128] [--reps 3]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time


def peer(a):
    import torch
    import transformers.models.qwen3_5.modeling_qwen3_5 as hf
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    T, S = a.tokens, a.seqs
    q = torch.randn(1, T, a.hk, a.dk)
    k = torch.randn(1, T, a.hk, a.dk)
    v = torch.randn(1, T, a.hv, a.dv)
    A = torch.empty(T, a.hv).uniform_(0.01, 16)
    g = (-0.05 * A * torch.nn.functional.softplus(torch.randn(T, a.hv) + 1.0))[None]
    beta = torch.randn(1, T, a.hv).sigmoid()
    dout = torch.randn(1, T, a.hv, a.dv)
    cu = [T * s // S for s in range(S + 1)]

    def run(backward):
        xs = [t.clone().requires_grad_(backward) for t in (q, k, v, g, beta)]
        outs = []
        for s in range(S):  # transformers' torch path has no packing: one call per sequence
            sl = slice(cu[s], cu[s + 1])
            o, _ = hf.torch_chunk_gated_delta_rule(*[x[:, sl] for x in xs], chunk_size=64,
                                                   use_qk_l2norm_in_kernel=True)
            outs.append(o)
        out = torch.cat(outs, 1)
        if backward:
            out.backward(dout)

    res = []
    for name, bwd in (("fwd", False), ("fwd+bwd", True)):
        ctx = torch.no_grad() if not bwd else torch.enable_grad()
        with ctx:
            run(bwd)  # warm-up
            best = 1e30
            for _ in range(a.reps):
                t0 = time.perf_counter()
                run(bwd)
                best = min(best, time.perf_counter() - t0)
        res.append({"engine": "torch", "impl": "torch_chunk_gated_delta_rule", "pass": name, "threads": a.threads,
                    "seconds": round(best, 6)})
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--seqs", type=int, default=1)
    ap.add_argument("--hk", type=int, default=2)
    ap.add_argument("--hv", type=int, default=4)
    ap.add_argument("--dk", type=int, default=128)
    ap.add_argument("--dv", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
    exe = os.path.join(a.build, "bench", "gdn_bench")
    cmd = [exe, "--threads", str(a.threads), "--tokens", str(a.tokens), "--seqs", str(a.seqs), "--hk", str(a.hk),
           "--hv", str(a.hv), "--dk", str(a.dk), "--dv", str(a.dv), "--reps", str(a.reps)]
    rows = [json.loads(l) for l in subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()]
    rows += peer(a)
    for r in rows:
        print(json.dumps(r))
    t = {(r["impl"], r["pass"]): r["seconds"] for r in rows}
    print(f"\nT={a.tokens} in {a.seqs} sequence(s), Hk={a.hk} Hv={a.hv} Dk={a.dk} Dv={a.dv}, {a.threads} thread(s)")
    print(f"{'pass':8} {'twinkle chunked':>16} {'twinkle recurrent':>18} {'torch chunked':>14} "
          f"{'recurrent/chunked':>18} {'torch/twinkle':>14}")
    for p in ("fwd", "fwd+bwd"):
        f, r, pt = t[("fused", p)], t[("reference", p)], t[("torch_chunk_gated_delta_rule", p)]
        print(f"{p:8} {f * 1e3:14.1f}ms {r * 1e3:16.1f}ms {pt * 1e3:12.1f}ms {r / f:18.1f} {pt / f:14.2f}")


if __name__ == "__main__":
    sys.exit(main())
