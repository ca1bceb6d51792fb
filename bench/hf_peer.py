#!/usr/bin/env python3
"""The current PyTorch peer of twinkle's training-step benchmark: transformers' own modeling.

The way a transformers user trains on a CPU: Qwen3ForCausalLM / Qwen3MoeForCausalLM built by
transformers from the benchmark config (AutoModelForCausalLM.from_config, its own init; sdpa
attention, transformers' default), the loss transformers computes (labels = input ids, its
ForCausalLMLoss), loss.backward(), torch.nn.utils.clip_grad_norm_ (max norm 1.0; --clip 0
disables) and torch.optim.AdamW (lr 1e-4, betas 0.9 / 0.95, eps 1e-8, weight decay 0.1 on the
parameters with dim >= 2) - on random token ids, the same configs, batch and sequence as
bench/torch_peer.py and build/bench/train_bench (configs a, b, m; see torch_peer.py's docstring
and its FLOP formula, which is used here unchanged so GFLOP/s compare).

Modes:
  --compile            model.forward through torch.compile (inductor, CPU C++/OpenMP codegen);
                       the warm-up steps pay the compilation; a failure is reported, not hidden
  --autocast-bf16      forward + loss under torch.autocast("cpu", dtype=torch.bfloat16): PyTorch's
                       bf16 mixed precision (fp32 parameters, gradients and AdamW state; oneDNN
                       bf16 GEMMs on AMX / AVX512-BF16 where the CPU has them)

  --device cuda        the model, batch and AdamW on the GPU (autocast on "cuda" with --autocast-bf16,
                       bf16 GEMMs on the tensor cores, TF32 off as twinkle's fp32 GEMMs); each timed step
                       ends with torch.cuda.synchronize(); adds peak_device_bytes
                       (torch.cuda.max_memory_allocated) and the device name

--threads N: torch.set_num_threads(N) and OMP_NUM_THREADS=N set before torch loads (PyPI's torch
runs its GEMMs in its bundled oneDNN / MKL, which follow them).

Prints one JSON line with torch_peer.py's fields (step_s, tokens_per_s, gflops, peak_rss_bytes,
cpu_s_per_step, loadavg_1min_at_end, loss, ...) plus "peer": "transformers", "compile",
"transformers" / "torch" versions and torch's CPU capability (torch.backends.cpu.get_cpu_capability())
and the oneDNN ISA it reports (ONEDNN_VERBOSE is not used: torch.backends.mkldnn flags).
"""
import argparse
import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="a")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="timed steps")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps first (with --compile: the compilation)")
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--autocast-bf16", action="store_true")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    a = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    sys.path.insert(0, HERE)
    import torch_peer  # the configs and the FLOP formula
    if a.config not in torch_peer.CONFIGS:
        raise SystemExit(f"hf_peer: --config {a.config!r}: one of {sorted(torch_peer.CONFIGS)}")
    torch.set_num_threads(a.threads)
    spec = dict(torch_peer.CONFIGS[a.config])
    B = a.batch or spec.pop("batch")
    S = a.seq or spec.pop("seq")
    spec.pop("batch", None)
    spec.pop("seq", None)
    moe = "num_experts" in spec
    cfg = dict(model_type="qwen3_moe" if moe else "qwen3", max_position_embeddings=max(S, 512),
               rope_theta=1000000.0, rms_norm_eps=1e-6, initializer_range=0.02, attention_bias=False, **spec)
    if moe:
        cfg.update(decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=0.001, output_router_logits=False)
    mt = cfg.pop("model_type")
    config = AutoConfig.for_model(mt, **cfg)
    torch.manual_seed(a.seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    cuda = a.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        model = model.to("cuda")
    model.train()
    named = list(model.named_parameters())
    decay = [p for _, p in named if p.dim() >= 2]
    no_decay = [p for _, p in named if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    params = [p for _, p in named]
    g = torch.Generator().manual_seed(a.seed + 1)
    ids = torch.randint(0, config.vocab_size, (B, S), generator=g, dtype=torch.int64).to(a.device)
    fwd = torch.compile(model) if a.compile else model

    def step():
        opt.zero_grad(set_to_none=True)
        if a.autocast_bf16:
            with torch.autocast(a.device, dtype=torch.bfloat16):
                loss = fwd(input_ids=ids, labels=ids).loss
        else:
            loss = fwd(input_ids=ids, labels=ids).loss
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.clip)
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        return float(loss)

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t_warm = time.perf_counter()
    for _ in range(a.warmup):
        step()
    warm_s = time.perf_counter() - t_warm
    times, losses = [], []
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(a.steps):
        t0 = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t0)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    step_s = sum(times) / len(times)
    fl, n = torch_peer.flops_per_step(dict(cfg, model_type=mt), B, S)
    cap = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
    dev = {"device": a.device}
    if cuda:
        dev.update(device_name=torch.cuda.get_device_name(), peak_device_bytes=torch.cuda.max_memory_allocated())
    print(json.dumps({
        **dev, "peer": "transformers", "config": a.config, "threads": a.threads, "batch": B, "seq": S,
        "compile": a.compile, "autocast_bf16": a.autocast_bf16, "clip": a.clip,
        "params": sum(p.numel() for p in params), "matmul_params": n, "warmup": a.warmup, "warmup_s": round(warm_s, 2),
        "steps": a.steps, "step_s": round(step_s, 4), "step_times_s": [round(t, 4) for t in times],
        "tokens_per_s": round(B * S / step_s, 1), "gflops": round(fl / step_s / 1e9, 1), "flops_per_step": fl,
        "cpu_s_per_step": round((r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / a.steps, 4),
        "loadavg_1min_at_end": round(os.getloadavg()[0], 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "loss": [round(x, 5) for x in losses], "attn_implementation": model.config._attn_implementation,
        "torch": torch.__version__, "transformers": transformers.__version__, "torch_cpu_capability": cap,
        "mkldnn_bf16": bool(getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)()),
    }))


if __name__ == "__main__":
    main()
