#!/usr/bin/env python3
"""Checkpoint loading, step 0: `twinkle eval` on a checkpoint with non-trivial RMSNorm weights and
biases vs the PyTorch reference (tests/reference/qwen3_ref.py, float64) on the same files.

For the tiny variants a (tied embeddings) and b (untied lm_head), both with attention_bias on
and initializer_range 0.1, the reference draws a checkpoint whose RMSNorm weights are 1 + 0.1*N(0,1) (input_layernorm,
post_attention_layernorm, q_norm, k_norm, final norm: every one different) and whose q/k/v/o
biases are 0.05*N(0,1), and writes it SHARDED (model-0000i-of-0000n.safetensors + index) in F32
and in BF16. twinkle's per-token loss over a batch must equal the reference's within 1e-5
relative (both read the same stored values; BF16 is widened exactly on both sides).

The check proves it can fail: the reference's loss is recomputed with the tensors a broken loader
would produce - norm weights left at 1 and biases at 0 ("loader skips norms"), q_norm <-> k_norm
swapped, input_layernorm <-> post_attention_layernorm swapped, final norm skipped, biases
skipped - and each must move the loss by more than 20x the tolerance.

usage: check_load.py --build BUILD   (.venv/bin/python, scripts/setup)
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_tiny_model  # noqa: E402
import qwen3_ref  # noqa: E402
import safetensors_py  # noqa: E402

import torch  # noqa: E402
import harness  # noqa: E402

TOL = 1e-5


def ref_loss(cfg, tensors, batch):
    m = qwen3_ref.Qwen3Ref(cfg, torch.float64)
    m.load_tensors(tensors, source="check_load")
    with torch.no_grad():
        s, n = m.loss_sum(batch)
    return float(s) / n


def mutations(t):
    """{name: tensors as a loader with that defect would leave them}."""
    def swap(d, a, b):
        d = dict(d)
        for k in list(d):
            if k.endswith(a):
                other = k[: -len(a)] + b
                d[k], d[other] = t[other], t[k]
        return d

    out = {}
    out["loader skips norms and biases"] = {k: (torch.ones_like(v) if k.endswith("norm.weight") else
                                               torch.zeros_like(v) if k.endswith(".bias") else v) for k, v in t.items()}
    out["loader skips layer norms"] = {k: (torch.ones_like(v) if k.endswith("layernorm.weight") else v)
                                       for k, v in t.items()}
    out["loader skips q_norm/k_norm"] = {k: (torch.ones_like(v) if k.endswith(("q_norm.weight", "k_norm.weight"))
                                             else v) for k, v in t.items()}
    out["loader skips the final norm"] = {k: (torch.ones_like(v) if k == "model.norm.weight" else v)
                                          for k, v in t.items()}
    out["loader skips biases"] = {k: (torch.zeros_like(v) if k.endswith(".bias") else v) for k, v in t.items()}
    out["q_norm <-> k_norm swapped"] = swap(t, "self_attn.q_norm.weight", "self_attn.k_norm.weight")
    out["input_layernorm <-> post_attention_layernorm swapped"] = swap(t, "input_layernorm.weight",
                                                                      "post_attention_layernorm.weight")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args()
    twinkle = os.path.join(args.build, "bin", "twinkle")
    tmp = tempfile.mkdtemp(prefix="twinkle-load-")
    failures = []
    try:
        for variant in ("a", "b"):
            cfg = make_tiny_model.config(variant)
            cfg["attention_bias"] = True
            cfg["initializer_range"] = 0.1  # weights N(0, 0.1): attention far from uniform, so a
            # q_norm <-> k_norm swap (which only shows through RoPE's cross terms) moves the loss
            model = qwen3_ref.Qwen3Ref(cfg, torch.float32)
            model.init_weights(7, norm_std=0.1, bias_std=0.05)
            tensors = qwen3_ref.param_tensors(model)
            rng = random.Random(99)
            ids, labels = [], []
            for _ in range(6):
                L = rng.randint(8, 30)
                row = [rng.randrange(cfg["vocab_size"]) for _ in range(L)]
                p = rng.randint(0, L // 3)
                ids.append(row)
                labels.append([-100] * p + row[p:])
            rows = os.path.join(tmp, f"rows_{variant}.jsonl")
            with open(rows, "w") as f:
                for a, b in zip(ids, labels):
                    f.write(json.dumps({"input_ids": a, "labels": b}) + "\n")
            batch = qwen3_ref.make_batch({"input_ids": ids, "labels": labels})
            total = sum(v.numel() for v in tensors.values())
            for dtype in ("F32", "BF16"):
                d = os.path.join(tmp, f"tiny_{variant}_{dtype}")
                os.makedirs(d)
                with open(os.path.join(d, "config.json"), "w") as f:
                    json.dump(cfg, f, indent=2)
                esz = 4 if dtype == "F32" else 2
                files = safetensors_py.save_sharded(d, tensors, max_shard_bytes=total * esz // 4, dtype=dtype)
                if len(files) < 3 or not os.path.exists(os.path.join(d, "model.safetensors.index.json")):
                    failures.append(f"{d}: expected a sharded checkpoint, got {files}")
                stored = safetensors_py.load_dir(d)  # exactly what is on disk (BF16 rounded)
                want = ref_loss(cfg, stored, batch)
                out = subprocess.run([twinkle, "eval", "--model", d, "--dataset", rows, "--batch-size", "4"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=dict(os.environ, OMP_NUM_THREADS="1"))
                if out.returncode != 0:
                    failures.append(f"twinkle eval {d} exited {out.returncode}:\n{out.stdout[-2000:]}")
                    continue
                got = json.loads(out.stdout.strip().splitlines()[-1])["loss"]
                r = abs(got - want) / abs(want)
                tag = f"variant {variant} ({'tied' if cfg['tie_word_embeddings'] else 'untied'}, bias) {dtype} " \
                      f"{len(files)} shards"
                print(f"{tag}: loss twinkle {got:.9f} torch-f64 {want:.9f} rel {r:.2e}")
                if r > TOL:
                    failures.append(f"{tag}: twinkle loss {got} vs reference {want} (rel {r:.2e} > {TOL:g})")
                for what, mt in mutations(stored).items():
                    ml = ref_loss(cfg, mt, batch)
                    mr = abs(ml - want) / abs(want)
                    print(f"    if {what}: loss {ml:.9f} (rel change {mr:.2e})")
                    if mr <= 20 * TOL:
                        failures.append(f"{tag}: '{what}' moves the loss only {mr:.2e}: the test cannot see it")
        return harness.report(failures, ok="OK: twinkle loads sharded F32/BF16 checkpoints with non-trivial norms and biases like the reference")
    finally:
        if args.keep:
            print("scratch kept in", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
