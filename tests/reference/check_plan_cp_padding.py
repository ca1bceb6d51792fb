#!/usr/bin/env python3
"""`twinkle plan` under context parallelism with a row length training pads: planned, not refused.

Training right-pads every row to a multiple of 2·cp (2·cp·tp under sequence parallelism, which a
Qwen3-MoE model with tp > 1 always uses) before the load-balanced split — Megatron-core's rule for
the THD split (get_batch_on_this_cp_rank / TE's thd split need each sequence divisible by 2·cp,
and by tp more with SP). The planner refused such lengths ("--seq-length must divide by 2·cp")
although `twinkle train --cp 2` trains them. Here, for each case: the plan exits 0, reports
padded_seq_length = ceil(L / m)·m with m from that rule (computed here), and every memory item of
every stage equals the plan of the padded length (the rows are held padded). Finally a 2-rank
`twinkle train --cp 2` on rows of 129 tokens (not a multiple of 4) runs, i.e. the layout the plan
refused is one training accepts.

usage: check_plan_cp_padding.py --build BUILD_DIR   (.venv/bin/python, scripts/setup)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from harness import one_thread_env, prefork_cmd, run_any  # noqa: E402

ITEMS = ("params", "grads", "optimizer", "activations", "workspace", "runtime", "peak", "layers", "slots")


def plan(tw, model, length, flags):
    r = run_any([tw, "plan", "--model", model, "--micro-batch-size", "2", "--global-batch-size", "4",
                 "--seq-length", str(length), "--json"] + flags.split(), env=one_thread_env())
    if r.returncode != 0:
        return None, r.stdout[-500:]
    return json.loads(r.stdout.strip().splitlines()[-1]), ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    tw = os.path.join(args.build, "bin", "twinkle")
    dense = os.path.join(ROOT, "models", "qwen3-tiny")
    moe = os.path.join(ROOT, "models", "qwen3-moe-tiny")
    # (model, flags, length, multiple by Megatron's rule)
    cases = [(dense, "--cp 2 --dp 2", 129, 4), (dense, "--cp 2 --dp 2", 4097, 4),
             (dense, "--tp 2 --cp 2 --sequence-parallel", 129, 8), (dense, "--tp 2 --cp 2", 129, 4),
             (dense, "--cp 4", 130, 8), (moe, "--tp 2 --cp 2 --ep 2", 130, 8), (dense, "--dp 2", 129, 1)]
    failures = []
    for model, flags, length, mult in cases:
        want = -(-length // mult) * mult
        got, err = plan(tw, model, length, flags)
        what = f"{os.path.basename(model)} {flags} --seq-length {length}"
        if got is None:
            failures.append(f"{what}: the plan failed: {err}")
            continue
        if got.get("padded_seq_length") != want:
            failures.append(f"{what}: padded_seq_length {got.get('padded_seq_length')}, expected {want}")
        ref, err = plan(tw, model, want, flags)
        if ref is None:
            failures.append(f"{what}: the plan of the padded length {want} failed: {err}")
            continue
        for a, b in zip(got["stages"], ref["stages"]):
            for k in ITEMS:
                if a[k] != b[k]:
                    failures.append(f"{what}: stage {a['stage']} {k} {a[k]} != {b[k]} planned for {want} tokens")
    # training accepts the layout the plan refused
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(prefork_cmd([sys.executable, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp,
                                    "--variant", "a"]),
                       check=True, stdout=subprocess.DEVNULL)
        rows = os.path.join(tmp, "rows.jsonl")
        with open(rows, "w") as f:
            for i in range(4):
                f.write(json.dumps({"input_ids": [1 + (5 * j + i) % 990 for j in range(129)]}) + "\n")
        r = run_any([os.path.join(args.build, "bin", "twinkle-run"), "--nproc_per_node=2", tw, "train", "--model",
                     os.path.join(tmp, "tiny_a"), "--dataset", rows, "--batch-size", "4", "--max-steps", "1",
                     "--cp", "2", "--no-save"], env=one_thread_env())
        if r.returncode != 0:
            failures.append(f"twinkle train --cp 2 on 129-token rows failed: {r.stdout[-600:]}")
    for f in failures:
        print("FAILED:", f)
    if failures:
        return 1
    print(f"plan cp padding check OK: {len(cases)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
