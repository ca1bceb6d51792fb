#!/usr/bin/env python3
"""Checkpoint dtypes: a bf16 HF checkpoint trains in fp32 and in bf16 mixed precision and is
saved back, in the dtype asked for.

  1. init a bf16 checkpoint (qwen3_ref.py init --dtype BF16, config torch_dtype bfloat16);
  2. twinkle train --fp32 from it, saved twice: default (the dtype it was loaded in: bfloat16) and
     --save-dtype float32. config.json's torch_dtype and every tensor's dtype must be the one asked for,
     and the bf16 save must equal the fp32 save rounded to nearest even (safetensors_py's own rounding),
     bit for bit; the step-1 loss equals PyTorch's float64 loss on the bf16 checkpoint (1e-5);
  3. round trip: the fp32 save trains with --bf16 and is saved with --save-dtype bfloat16; that bf16
     checkpoint loads into --fp32 training, whose step-1 loss equals PyTorch's on it (1e-5), and a
     --save-dtype float16 save names float16. A save that ignores the option, writes fp32 under a bf16
     torch_dtype, truncates instead of rounding, or loads bf16 wrongly fails.
Run with .venv/bin/python (scripts/setup).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_py  # noqa: E402
from check_train import load_ckpt, make_batch, read_metrics, run, write_rows  # noqa: E402
import harness  # noqa: E402

PY = sys.executable


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    twinkle = os.path.join(a.build, "bin", "twinkle")
    tmp = tempfile.mkdtemp(prefix="twinkle-save-dtype-")
    failures = []
    try:
        run([PY, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp, "--variant", "a"])
        model = os.path.join(tmp, "tiny_a")
        cfg_path = os.path.join(model, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["torch_dtype"] = "bfloat16"
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)
        run([PY, os.path.join(HERE, "qwen3_ref.py"), "init", "--config", cfg_path, "--seed", "3", "--out", model,
             "--dtype", "BF16", "--norm-std", "0.1"])
        ids, labels = make_batch("rows:4", cfg["vocab_size"], 77)
        rows = os.path.join(tmp, "rows.jsonl")
        write_rows(rows, ids, labels)
        batch_json = os.path.join(tmp, "batch.json")
        with open(batch_json, "w") as f:
            json.dump({"input_ids": ids, "labels": labels}, f)

        def train(src, tag, extra):
            out, metrics = os.path.join(tmp, tag), os.path.join(tmp, tag + ".jsonl")
            run([twinkle, "train", "--model", src, "--dataset", rows, "--batch-size", "4", "--max-steps", "2",
                 "--lr", "1e-3", "--output-dir", out, "--metrics-file", metrics] + extra,
                env=dict(os.environ, OMP_NUM_THREADS="1"))
            return out, read_metrics(metrics)

        def ref_loss(d):
            return json.loads(run([PY, os.path.join(HERE, "qwen3_ref.py"), "loss", "--model", d, "--batch", batch_json,
                                   "--dtype", "float64"]).strip().splitlines()[-1])["loss"]

        def expect(d, torch_name, tdtype):
            with open(os.path.join(d, "config.json")) as f:
                got = json.load(f).get("torch_dtype")
            w = load_ckpt(d)
            bad = sorted(n for n, t in w.items() if t.dtype != tdtype)
            print(f"{os.path.basename(d)}: torch_dtype {got}, {len(w)} tensors, {len(bad)} not {tdtype}")
            if got != torch_name:
                failures.append(f"{d}: config.json torch_dtype {got}, expected {torch_name}")
            if bad:
                failures.append(f"{d}: tensors not {tdtype}: {bad[:4]}")
            return w

        def check_loss(d, metrics, what):
            lr, lt = ref_loss(d), metrics[0]["loss"]
            print(f"{what}: step-1 loss twinkle {lt:.8f}, PyTorch float64 on the checkpoint {lr:.8f}")
            if abs(lt - lr) > 1e-5 * abs(lr):
                failures.append(f"{what}: step-1 loss {lt} vs PyTorch {lr} on the checkpoint it loaded")

        # 2. bf16 checkpoint -> fp32 training -> saved as loaded (bf16) and as float32
        out_b, m_b = train(model, "fp32_from_bf16_default", ["--fp32"])
        out_f, m_f = train(model, "fp32_from_bf16_f32", ["--fp32", "--save-dtype", "float32"])
        check_loss(model, m_b, "bf16 checkpoint in fp32 training")
        wb = expect(out_b, "bfloat16", torch.bfloat16)
        wf = expect(out_f, "float32", torch.float32)
        if [r["loss"] for r in m_b] != [r["loss"] for r in m_f]:
            failures.append("the save dtype changed the training itself")
        mism = 0
        for n, t in wf.items():
            want = safetensors_py.f32_to_bf16_bits(t.numpy())
            got = wb[n].view(torch.int16).numpy().view(np.uint16) if n in wb else None
            if got is None or not np.array_equal(got.reshape(want.shape), want):
                mism += 1
        print(f"bf16 save vs round-to-nearest-even of the fp32 save: {mism} of {len(wf)} tensors differ")
        if mism:
            failures.append(f"{mism} tensors of the bf16 save are not the fp32 weights rounded to nearest even")

        # 3. fp32 checkpoint -> bf16 mixed-precision training -> bf16 save -> fp32 training
        out_c, m_c = train(out_f, "bf16_from_f32", ["--bf16", "--save-dtype", "bfloat16"])
        expect(out_c, "bfloat16", torch.bfloat16)
        out_d, m_d = train(out_c, "fp32_from_bf16_roundtrip", ["--fp32", "--save-dtype", "float16"])
        check_loss(out_c, m_d, "round-trip bf16 checkpoint in fp32 training")
        expect(out_d, "float16", torch.float16)
        return harness.report(failures)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
