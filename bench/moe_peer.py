#!/usr/bin/env python3
"""PyTorch-eager peer of bench/moe_block_bench.cpp: one Qwen3-MoE sparse block, forward +
backward, as transformers computes it (tests/reference/qwen3_moe_ref.py SparseMoeBlock: gate,
softmax over all experts, top-k, renormalise, a Python loop over the experts with index_add_),
float32 on CPU, the same shapes, random inputs and the same upstream gradient.

--threads N: torch.set_num_threads(N) and OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = N (set before
torch loads, as bench/torch_peer.py does). Prints one JSON line like moe_block_bench.
  .venv/bin/python bench/moe_peer.py --config a30b --threads 1 [--steps 3 --warmup 1]
"""
import argparse
import json
import os
import sys
import time

CONFIGS = {"a30b": dict(H=512, I=192, E=128, K=8), "tiny": dict(H=128, I=64, E=8, K=2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", choices=sorted(CONFIGS), default="a30b")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
    import qwen3_moe_ref as mr
    torch.set_num_threads(a.threads)
    c = CONFIGS[a.config]
    T = 2048
    cfg = mr.moe_config({"model_type": "qwen3_moe", "vocab_size": 8, "hidden_size": c["H"], "intermediate_size": 8,
                         "num_hidden_layers": 1, "num_attention_heads": 1, "head_dim": 2, "num_experts": c["E"],
                         "num_experts_per_tok": c["K"], "moe_intermediate_size": c["I"], "norm_topk_prob": True})
    torch.manual_seed(1)
    blk = mr.SparseMoeBlock(cfg)
    with torch.no_grad():
        for p in blk.parameters():
            p.normal_(0.0, 0.02)
    x = torch.randn(T, c["H"], requires_grad=True)
    dout = torch.randn(T, c["H"])

    def step():
        for p in blk.parameters():
            p.grad = None
        x.grad = None
        out, _ = blk(x)
        out.backward(dout)

    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    step_s = sum(times) / len(times)
    R = T * c["K"]
    flops = 3.0 * (3 * 2.0 * R * c["H"] * c["I"] + 2.0 * T * c["H"] * c["E"])
    print(json.dumps({"engine": "pytorch", "config": a.config, "threads": a.threads, "tokens": T,
                      "step_s": round(step_s, 6), "tokens_per_s": round(T / step_s, 1),
                      "gflops": round(flops / step_s / 1e9, 1), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
