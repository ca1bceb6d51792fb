#!/usr/bin/env python3
"""The recipes' --resume as the examples README shows it (`--resume output/tp_recipe`): a run of
4 steps saving every 2, then a new process resumed from checkpoint-step-2 into the same output
directory. OUTPUT_DIR/metrics.jsonl must stay the whole loss curve (steps 1-2 of the first run kept,
3-4 logged again with the same losses: the same layout resumes bit for bit), and the summary must
speak of the steps this run trained. Before the fix the resumed run truncated metrics.jsonl to its
own two steps and printed "4 steps, loss 0.0000 -> ..." with the tokens/s (tp_recipe) or step time
(moe_recipe) mean divided by steps it never ran; resumed at the last step it printed
"loss 0.0000 -> 0.0000" and a mean of 0.
Single process (dp = tp = pp = ep = 1), one thread. Run with .venv/bin/python (scripts/setup).
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402


def metrics(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    env = harness.one_thread_env()
    failures = []
    tmp = tempfile.mkdtemp(prefix="twinkle-recipe-resume-")
    try:
        for name, extra in (("tp_recipe", ["--batch-size", "4"]), ("moe_recipe", ["--ep", "1"])):
            exe = os.path.join(a.build, "examples", name)
            out = os.path.join(tmp, name)
            base = [exe, "--dp", "1", "--tp", "1", "--pp", "1", "--data-rows", "16", "--max-steps", "4",
                    "--output-dir", out] + extra
            harness.run(base + ["--save-interval", "2"], env=env, timeout=300)
            first = metrics(os.path.join(out, "metrics.jsonl"))
            log = harness.run(base + ["--resume", os.path.join(out, "checkpoint-step-2")], env=env, timeout=300)
            got = metrics(os.path.join(out, "metrics.jsonl"))
            steps = [m["step"] for m in got]
            if steps != [1, 2, 3, 4]:
                failures.append(f"{name}: metrics.jsonl after the resume holds steps {steps}, expected [1, 2, 3, 4]")
            elif any(g["loss"] != f["loss"] or g["grad_norm"] != f["grad_norm"] for g, f in zip(got, first)):
                failures.append(f"{name}: losses after the resume {[m['loss'] for m in got]} differ from the "
                                f"uninterrupted run's {[m['loss'] for m in first]}")
            summary = [l for l in log.splitlines() if "summary:" in l]
            want = (f"summary: steps 3..4 of 4 (resumed at step 2), loss {first[2]['loss']:.4f} -> "
                    f"{first[3]['loss']:.4f}, ")
            if not summary or want not in summary[-1]:
                failures.append(f"{name}: summary {summary[-1:]!r}, expected it to contain {want!r}")
            elif name == "tp_recipe":
                mean = float(re.search(r"mean (\d+) tokens/s", summary[-1]).group(1))
                ref = (got[2]["tokens_per_s"] + got[3]["tokens_per_s"]) / 2
                if abs(mean - ref) > 1.0:
                    failures.append(f"{name}: summary mean {mean} tokens/s, the resumed steps' mean is {ref:.1f}")
            print(f"{name}: steps {steps}, {summary[-1:]}")
            # resumed at the last step: nothing left to train, so no loss or speed in the summary
            log = harness.run(base + ["--resume", os.path.join(out, "checkpoint-step-4")], env=env, timeout=300)
            summary = [l for l in log.splitlines() if "summary:" in l]
            if not summary or "no step (resumed at step 4" not in summary[-1] or "loss" in summary[-1] \
                    or "mean" in summary[-1]:
                failures.append(f"{name}: summary after resuming at the last step {summary[-1:]!r}: expected "
                                "'no step (resumed at step 4, the last one)' and no loss or mean")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.report(failures, "recipe resume OK")


if __name__ == "__main__":
    sys.exit(main())
