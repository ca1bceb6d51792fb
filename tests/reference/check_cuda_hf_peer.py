#!/usr/bin/env python3
"""The real peer of twinkle's CUDA model: transformers' Qwen3ForCausalLM on the GPU loads
the checkpoint twinkle saved after training on the GPU and computes the loss of the batch twinkle
scored; the two losses must agree (fp32, TF32 off; tolerance 2e-5 relative).

Inputs (written by tests/cuda/test_cuda_model.cpp with TWINKLE_PEER_DIR=DIR): DIR/config.json,
DIR/model.safetensors, DIR/batch.json {batch, seq, input_ids, labels, position_ids, attention_mask,
twinkle_loss, label_tokens}. Run on the GPU machine (python3 with torch, transformers):
    python3 check_cuda_hf_peer.py DIR
Prints "hf peer OK: ..." and exits 0, or "hf peer MISMATCH: ..." and exits 1.
"""
import json
import sys

import torch
import transformers
from transformers import Qwen3ForCausalLM


def main():
    d = sys.argv[1]
    b = json.load(open(f"{d}/batch.json"))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        model = Qwen3ForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    except TypeError:  # transformers 4 spells it torch_dtype
        model = Qwen3ForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    model = model.to(dev).eval()
    B, S = b["batch"], b["seq"]
    ids = torch.tensor(b["input_ids"], device=dev).view(B, S)
    labels = torch.tensor(b["labels"], device=dev).view(B, S)
    pos = torch.tensor(b["position_ids"], device=dev).view(B, S)
    mask = torch.tensor(b["attention_mask"], device=dev).view(B, S) if b["attention_mask"] else torch.ones_like(ids)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, labels=labels)
        # the same by hand: shift by one inside each row, mean over labelled tokens
        logits = out.logits.double()[:, :-1].reshape(-1, out.logits.shape[-1])
        tgt = labels[:, 1:].reshape(-1)
        keep = tgt != -100
        manual = torch.nn.functional.cross_entropy(logits[keep], tgt[keep], reduction="mean").item()
    hf = out.loss.item()
    tw = b["twinkle_loss"]
    n = int(keep.sum().item())
    rel = abs(hf - tw) / max(abs(hf), 1e-12)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, device {dev}"
          f" ({torch.cuda.get_device_name(0) if dev == 'cuda' else 'cpu'})")
    print(f"labelled tokens: twinkle {b['label_tokens']}, transformers {n}")
    print(f"loss: transformers Qwen3ForCausalLM {hf:.8f} (by hand, float64 CE {manual:.8f}); "
          f"twinkle cuda {tw:.8f}; relative difference {rel:.3g}")
    ok = rel <= 2e-5 and n == b["label_tokens"]
    print(("hf peer OK: " if ok else "hf peer MISMATCH: ") + f"relative difference {rel:.3g} (tolerance 2e-5)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
