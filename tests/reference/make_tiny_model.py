#!/usr/bin/env python3
"""Writes the tiny Qwen3 config.json files used by twinkle's tests (and, with --init, a random
checkpoint made by qwen3_ref.py init).

  (a) "tiny_a": tied embeddings, head_dim 32 != hidden/heads (64/4 = 16), hidden 64, 4 heads,
      2 kv heads (GQA groups of 2), vocab 1001 (not a multiple of 8), 2 layers,
      intermediate 96, max_position_embeddings 512, rope_theta 1e6, rms_norm_eps 1e-6,
      attention_bias false.
  (b) "tiny_b": the same but untied (lm_head.weight present), attention_bias true (q/k/v/o
      biases), vocab 517.

Fields follow HF's Qwen3 config.json (e.g. Qwen/Qwen3-0.6B): model_type, architectures,
torch_dtype, sliding-window fields, rope_scaling null, bos/eos ids inside the tiny vocab.
No pad_token_id: with one, HF's nn.Embedding(padding_idx) would freeze that embedding row.

usage: make_tiny_model.py --out DIR [--variant a|b|all] [--init --seed S]
       -> DIR/tiny_a/config.json (+ model.safetensors), DIR/tiny_b/...
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import prefork_cmd  # noqa: E402

_BASE = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "hidden_act": "silu",
    "max_position_embeddings": 512,
    "rope_theta": 1000000.0,
    "rope_scaling": None,
    "rms_norm_eps": 1e-06,
    "initializer_range": 0.02,
    "attention_dropout": 0.0,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 2,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
    "use_cache": True,
    "transformers_version": "4.51.0",
}

VARIANTS = {
    "a": {"vocab_size": 1001, "tie_word_embeddings": True, "attention_bias": False},
    "b": {"vocab_size": 517, "tie_word_embeddings": False, "attention_bias": True},
}


def config(variant):
    """The config dict of variant 'a' or 'b'."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown tiny variant {variant!r} (a or b)")
    d = dict(_BASE)
    d.update(VARIANTS[variant])
    return dict(sorted(d.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--variant", choices=["a", "b", "all"], default="all")
    ap.add_argument("--init", action="store_true", help="also write model.safetensors (qwen3_ref init)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    for v in (["a", "b"] if a.variant == "all" else [a.variant]):
        d = os.path.join(a.out, f"tiny_{v}")
        os.makedirs(d, exist_ok=True)
        cp = os.path.join(d, "config.json")
        with open(cp, "w") as f:
            json.dump(config(v), f, indent=2)
            f.write("\n")
        if a.init:
            subprocess.run(prefork_cmd([sys.executable, os.path.join(here, "qwen3_ref.py"), "init", "--config", cp,
                                        "--seed", str(a.seed), "--out", d]), check=True, stdout=subprocess.DEVNULL)
        print(d)


if __name__ == "__main__":
    main()
