#!/usr/bin/env python3
"""Activation recompute on a device changes memory, never results: `twinkle train --device DEVICE`
with --recompute-granularity none, selective and full on the same tiny model (attention biases on,
untied) and batch must log the same loss and grad norm at every step, bit for bit, and save
byte-identical model.safetensors (the CPU's rule, tests/recompute.cmake, on the device).

usage: check_recompute_device.py --build BUILD [--twinkle BINARY] [--device cuda] [--steps 3]
"""
import argparse
import filecmp
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import one_thread_env, random_rows, read_metrics, report, run, write_rows  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--twinkle", default="")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    twinkle = a.twinkle or os.path.join(a.build, "bin", "twinkle")
    failures = []
    with tempfile.TemporaryDirectory(prefix="twinkle-recompute-dev-") as tmp:
        model = run([sys.executable, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp, "--variant", "b",
                     "--init"]).strip().splitlines()[-1]
        vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
        ids, labels = random_rows(9, vocab, 5, lengths=(6, 30))
        rows = os.path.join(tmp, "rows.jsonl")
        write_rows(rows, ids, labels)
        got = {}
        for rc in ("none", "selective", "full"):
            out = os.path.join(tmp, "out_" + rc)
            run([twinkle, "train", "--model", model, "--dataset", rows, "--batch-size", "3", "--max-steps",
                 str(a.steps), "--device", a.device, "--recompute-granularity", rc, "--output-dir", out,
                 "--metrics-file", os.path.join(tmp, rc + ".jsonl")], env=one_thread_env())
            got[rc] = [(m["loss"], m["grad_norm"]) for m in read_metrics(os.path.join(tmp, rc + ".jsonl"))]
            print(rc, got[rc])
        if len(got["none"]) != a.steps:
            failures.append(f"none logged {len(got['none'])} steps, expected {a.steps}")
        for rc in ("selective", "full"):
            if got[rc] != got["none"]:
                failures.append(f"{rc}: loss / grad norm per step {got[rc]} != none {got['none']}")
            x = os.path.join(tmp, "out_none", "model.safetensors")
            y = os.path.join(tmp, "out_" + rc, "model.safetensors")
            if not (os.path.exists(x) and os.path.exists(y)) or not filecmp.cmp(x, y, shallow=False):
                failures.append(f"{rc}: model.safetensors differs from none's (or is missing)")
    return report(failures, f"recompute on {a.device} OK: selective and full equal none bit for bit")


if __name__ == "__main__":
    sys.exit(main())
