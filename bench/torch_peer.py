#!/usr/bin/env python3
"""PyTorch-eager peer of twinkle's training-step benchmark (CPU, float32).

Runs the independent Qwen3 reference model (tests/reference/qwen3_ref.py) for whole training
steps - forward, loss (HF causal-LM mean over all shifted targets), backward, grad clipping
(torch.nn.utils.clip_grad_norm_, max norm 1.0; --clip 0 disables), torch.optim.AdamW
(lr 1e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on params with dim >= 2) - on random
token ids (labels = input ids).

--threads N sets torch.set_num_threads(N) AND OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=N (set
before torch loads: Debian's torch runs its matmuls in OpenBLAS-pthreads, whose pool ignores
torch.set_num_threads and otherwise uses every core).  --blas-threads K overrides the OpenBLAS
pool (0: OPENBLAS_NUM_THREADS and OMP_NUM_THREADS unset, so OpenBLAS uses every core - what a
bare torch.set_num_threads(1) gives).

Prints one JSON line:
  config, threads, batch, seq, params (all parameters), matmul_params (N below),
  step_s (mean wall time of the timed steps), step_times_s, tokens_per_s (batch*seq/step_s),
  gflops (flops_per_step / step_s / 1e9), flops_per_step, minor_faults_per_step,
  cpu_s_per_step (user+sys CPU seconds of the process per timed step: with 1 thread, a wall
  time well above it means the machine was busy with something else), loadavg_1min_at_end,
  peak_rss_bytes (resource.getrusage(RUSAGE_SELF).ru_maxrss * 1024).

FLOP formula (the usual MFU convention, PaLM appendix B / Megatron):
  flops_per_step = 6 * N * T  +  12 * L * B * S^2 * H * D
  T = B * S tokens; N = matmul weights = L * (hidden * (H + 2*H_kv) * D   [q, k, v]
                                            + H * D * hidden                [o]
                                            + 3 * hidden * intermediate)    [gate, up, down]
                                        + vocab * hidden                    [lm_head; tied or not]
  (the embedding lookup, norms, biases are not counted); the attention term counts QK^T and
  PV of every layer for the full S x S square (the causal half is not subtracted), forward
  (4 * B * S^2 * H * D per layer) plus backward (twice that).

Configs (--config):
  a: hidden 256, 4 layers, 8 q / 4 kv heads, head_dim 32, intermediate 768, vocab 151936,
     tied, seq 512, batch 4
  b: hidden 1024, 8 layers, 16 q / 8 kv heads, head_dim 64, intermediate 2816, vocab 32000,
     tied (--untied for an lm_head of its own), seq 512, batch 2
  m: Qwen3-MoE (tests/reference/qwen3_moe_ref.py, transformers' loop over experts): config a's
     attention, every layer sparse with 32 experts top-4 (renormalised), moe_intermediate 96,
     vocab 32000, tied, seq 512, batch 4; the FLOPs count the router and the top-k experts
Best environment on the dev machine (bench/README.md, "Training step: twinkle vs PyTorch eager"):
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE MALLOC_MMAP_MAX_=0 \
      MALLOC_TRIM_THRESHOLD_=68719476736 OMP_WAIT_POLICY=passive \
      .venv/bin/python bench/torch_peer.py --config a --threads 2
"""
import argparse
import json
import os
import resource
import sys
import time

torch = None      # imported in main(), after OPENBLAS_NUM_THREADS / OMP_NUM_THREADS are set
qwen3_ref = None
_REF_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference")

CONFIGS = {
    "a": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
              head_dim=32, intermediate_size=768, vocab_size=151936, tie_word_embeddings=True,
              seq=512, batch=4),
    "b": dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8,
              head_dim=64, intermediate_size=2816, vocab_size=32000, tie_word_embeddings=True,
              seq=512, batch=2),
    # Qwen3-MoE (tests/reference/qwen3_moe_ref.py: transformers' Qwen3MoeSparseMoeBlock, a Python
    # loop over the experts): config a's attention, 32 experts top-4, moe_intermediate 96
    "m": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
              head_dim=32, intermediate_size=768, vocab_size=32000, tie_word_embeddings=True,
              num_experts=32, num_experts_per_tok=4, moe_intermediate_size=96, norm_topk_prob=True,
              seq=512, batch=4),
    # Qwen3-0.6B (bench/qwen3-0.6b/config.json) at 8 x 2048: the GPU step bench (scripts/device-check)
    "q06": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                head_dim=128, intermediate_size=3072, vocab_size=151936, tie_word_embeddings=True,
                seq=2048, batch=8),
    # Qwen3-30B-A3B's routing and FLOP mix at hidden 256 (bench/train_bench.cpp config m30)
    "m30": dict(hidden_size=256, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=2,
                head_dim=32, intermediate_size=768, vocab_size=4096, tie_word_embeddings=True,
                num_experts=128, num_experts_per_tok=8, moe_intermediate_size=96, norm_topk_prob=True,
                seq=512, batch=4),
}


def flops_per_step(c, B, S):
    L, h, H, Hk, D, I, V = (c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"],
                            c["num_key_value_heads"], c["head_dim"], c["intermediate_size"], c["vocab_size"])
    mlp = 3 * h * I
    if c.get("num_experts"):  # router + the top-k experts a token meets
        mlp = h * c["num_experts"] + 3 * h * c["moe_intermediate_size"] * c["num_experts_per_tok"]
    n = L * (h * (H + 2 * Hk) * D + H * D * h + mlp) + V * h
    return 6 * n * B * S + 12 * L * B * S * S * H * D, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="a")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--blas-threads", type=int, default=-1,
                    help="OPENBLAS_NUM_THREADS (default: = --threads; 0: unset, OpenBLAS uses every core)")
    ap.add_argument("--batch", type=int, default=0, help="override the config's batch")
    ap.add_argument("--seq", type=int, default=0, help="override the config's sequence length")
    ap.add_argument("--untied", action="store_true", help="separate lm_head")
    ap.add_argument("--clip", type=float, default=1.0, help="max grad norm (0: no clipping)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--autocast-bf16", action="store_true",
                    help="forward + loss under torch.autocast('cpu', bfloat16) (PyTorch's bf16 mixed precision)")
    a = ap.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.threads < 1:
        raise SystemExit("torch_peer: --steps >= 1, --warmup >= 0, --threads >= 1")
    if a.blas_threads < 0:
        a.blas_threads = a.threads

    # Debian's torch does its matmuls in OpenBLAS (pthreads build), whose thread pool ignores
    # torch.set_num_threads and would use every core: pin both pools to --threads before the
    # libraries load.
    # (OpenBLAS falls back to OMP_NUM_THREADS when OPENBLAS_NUM_THREADS is unset.)
    if a.blas_threads > 0:
        os.environ["OPENBLAS_NUM_THREADS"] = str(a.blas_threads)
        os.environ["OMP_NUM_THREADS"] = str(a.threads)
    else:
        for k in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"):
            os.environ.pop(k, None)
    global torch, qwen3_ref
    import torch as _torch
    torch = _torch
    sys.path.insert(0, _REF_DIR)
    import qwen3_ref as _ref
    qwen3_ref = _ref
    torch.set_num_threads(a.threads)
    spec = dict(CONFIGS[a.config])
    B = a.batch or spec.pop("batch")
    S = a.seq or spec.pop("seq")
    spec.pop("batch", None)
    spec.pop("seq", None)
    if a.untied:
        spec["tie_word_embeddings"] = False
    moe = "num_experts" in spec
    cfg = dict(model_type="qwen3_moe" if moe else "qwen3", max_position_embeddings=max(S, 512),
               rope_theta=1000000.0, rms_norm_eps=1e-6, initializer_range=0.02, attention_bias=False, **spec)
    if moe:
        cfg.update(decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=0.001,
                   output_router_logits=False)

    torch.manual_seed(a.seed)
    if moe:
        import qwen3_moe_ref
        model = qwen3_moe_ref.Qwen3MoeRef(cfg, torch.float32)
    else:
        model = qwen3_ref.Qwen3Ref(cfg, torch.float32)
    model.init_weights(a.seed)
    opt = qwen3_ref.make_optimizer(model, lr=1e-4, weight_decay=0.1, beta1=0.9, beta2=0.95, eps=1e-8)
    params = list(model.parameters())
    g = torch.Generator().manual_seed(a.seed + 1)
    ids = torch.randint(0, cfg["vocab_size"], (B, S), generator=g, dtype=torch.int64)
    batch = {"input_ids": ids, "labels": ids.clone()}
    moe_mb = qwen3_ref.make_batch({"input_ids": ids.tolist(), "labels": ids.tolist()}, "bench") if moe else None

    def step():
        opt.zero_grad(set_to_none=True)
        if moe:  # forward, loss (aux coefficient 0, as twinkle's default), backward
            loss = qwen3_moe_ref.step_losses(model, [(moe_mb, qwen3_moe_ref.real_token_mask(moe_mb))], 0.0,
                                             "global", 0.0)["loss"]
        elif a.autocast_bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss, _ = qwen3_ref.train_step(model, [batch])
        else:
            loss, _ = qwen3_ref.train_step(model, [batch])
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.clip)
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    times, losses = [], []
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    f0 = r0.ru_minflt
    for _ in range(a.steps):
        t0 = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t0)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    faults = (r1.ru_minflt - f0) / a.steps
    cpu_s = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / a.steps
    load1 = os.getloadavg()[0]
    step_s = sum(times) / len(times)
    fl, n = flops_per_step(cfg, B, S)
    out = {
        "config": a.config, "threads": a.threads, "blas_threads": a.blas_threads, "batch": B, "seq": S,
        "tied": cfg["tie_word_embeddings"], "clip": a.clip, "autocast_bf16": a.autocast_bf16,
        "params": sum(p.numel() for p in params), "matmul_params": n,
        "warmup": a.warmup, "steps": a.steps,
        "step_s": round(step_s, 4), "step_times_s": [round(t, 4) for t in times],
        "tokens_per_s": round(B * S / step_s, 1),
        "gflops": round(fl / step_s / 1e9, 1), "flops_per_step": fl,
        "minor_faults_per_step": int(faults),
        "cpu_s_per_step": round(cpu_s, 4), "loadavg_1min_at_end": round(load1, 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "loss": [round(x, 5) for x in losses],
        "env": {k: os.environ.get(k) for k in ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "OMP_WAIT_POLICY",
                                                "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS",
                                                "OMP_NUM_THREADS")},
        "torch": torch.__version__,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
