#!/usr/bin/env python3
"""`twinkle train --resume` keeps the --metrics-file lines of the steps up to its checkpoint.

A run of 8 steps (A) saves checkpoint-step-4 (--save-interval 4 --save-optimizer) and writes every
step to M; a half-written line is appended to M, as a killed run leaves it. A second process
resumes checkpoint-step-4 with the same --metrics-file M: afterwards M must hold steps 1..8 once
each, lines 1..4 byte-identical to A's, lines 5..8 with A's losses, grad norms and lrs (a resume
on the same layout is bit-identical), and no fragment. A new run (no --resume) still rewrites the
file. The expected file is what run A wrote, read back as text and JSON here.

usage: check_metrics_resume.py --build BUILD_DIR   (.venv/bin/python, scripts/setup)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import one_thread_env, prefork_cmd, run  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    tw = os.path.join(args.build, "bin", "twinkle")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(prefork_cmd([sys.executable, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp,
                                    "--variant", "a", "--init"]), check=True, stdout=subprocess.DEVNULL)
        rows = os.path.join(tmp, "rows.jsonl")
        with open(rows, "w") as f:
            for i in range(12):
                f.write(json.dumps({"input_ids": [1 + (7 * j + i) % 990 for j in range(10 + i)]}) + "\n")
        out = os.path.join(tmp, "out")
        metrics = os.path.join(tmp, "metrics.jsonl")
        common = [tw, "train", "--model", os.path.join(tmp, "tiny_a"), "--dataset", rows, "--batch-size", "4",
                  "--max-steps", "8", "--lr", "1e-3", "--output-dir", out, "--metrics-file", metrics, "--no-save"]
        run(common + ["--save-interval", "4", "--save-optimizer"], env=one_thread_env())
        with open(metrics) as f:
            first = f.read().splitlines()
        if [json.loads(l)["step"] for l in first] != list(range(1, 9)):
            print("FAILED: the first run did not log steps 1..8")
            return 1
        with open(metrics, "a") as f:
            f.write('{"step": 9, "loss": 1.')  # a line cut off by a killed run
        text = run(common + ["--resume", os.path.join(out, "checkpoint-step-4")], env=one_thread_env())
        with open(metrics) as f:
            after = f.read().splitlines()
        steps = []
        for l in after:
            try:
                steps.append(json.loads(l)["step"])
            except (ValueError, KeyError):
                failures.append(f"a line that is not a step's JSON object remained: {l!r}")
        if steps != list(range(1, 9)):
            failures.append(f"after the resume the file holds steps {steps}, expected 1..8 once each")
        if after[:4] != first[:4]:
            failures.append("the lines of steps 1..4 changed (or were dropped) by the resume")
        for a, b in zip(first[4:], after[4:]):
            ja, jb = json.loads(a), json.loads(b)
            for k in ("step", "loss", "grad_norm", "lr"):
                if ja[k] != jb[k]:
                    failures.append(f"step {ja['step']}: {k} {jb[k]!r} after the resume, {ja[k]!r} uninterrupted")
        if "metrics: kept the 4 lines of steps 1..4" not in text:
            failures.append("the resumed run did not log the lines it kept")
        # a new run (no --resume) rewrites the file
        run([("2" if a == "8" else a) for a in common], env=one_thread_env())  # --max-steps 2
        with open(metrics) as f:
            fresh = [json.loads(l)["step"] for l in f.read().splitlines()]
        if fresh != [1, 2]:
            failures.append(f"a new run left steps {fresh} in the file, expected [1, 2]")
    for f in failures:
        print("FAILED:", f)
    if failures:
        return 1
    print("metrics resume check OK: steps 1..8 once each, 1..4 kept byte for byte")
    return 0


if __name__ == "__main__":
    sys.exit(main())
