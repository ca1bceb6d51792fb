#!/usr/bin/env python3
"""`twinkle train --dataset A B#6`: a mixture of a jsonl and a parquet dataset through the command line.

A: 10 pre-tokenized rows (jsonl), B: 4 pre-tokenized rows written by pyarrow (parquet, 2 row groups);
`--dataset A B#6` is A's 10 rows and B#6 = B once plus 2 sampled rows (ms-swift's rule,
twinkle/data/mixture.h), shuffled with --seed, 16 rows: batches of 4, 6 steps cross an epoch with
--shuffle. Checks:
  1. the run logs "dataset: 16 rows" (B#6 honoured), and B#5 gives 15 rows and another loss curve;
  2. resume: steps 4-6 of a run resumed from checkpoint-step-3 equal the uninterrupted run's bit for
     bit (loss, grad norm, lr): the mixture is rebuilt identically and its data position restored;
  3. --data-slice, a bad --dataset-mix and a --self-cognition no dataset can take are refused by name;
  4. layout: the same command on dp 2 (twinkle-run, 2 ranks) gives every step's loss and grad norm
     within 1e-6 relative of one process (the same global batches on every dp size).
The order itself is checked against hand-computed orders in tests/unit/data/test_mixture.cpp.
usage: check_dataset_mix.py --build BUILD   (the project environment's python: pyarrow)
"""
import argparse
import functools
import json
import os
import random
import shutil
import sys
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import harness  # noqa: E402

run_any = functools.partial(harness.run_any, env=harness.one_thread_env())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    twinkle = os.path.join(a.build, "bin", "twinkle")
    launcher = os.path.join(a.build, "bin", "twinkle-run")
    tmp = tempfile.mkdtemp(prefix="twinkle-mix-")
    failures = []
    try:
        rng = random.Random(35)

        def row():
            ids = [rng.randrange(1, 5000) for _ in range(rng.randint(6, 14))]
            return ids, [-100] + ids[1:]

        rows_a = os.path.join(tmp, "a.jsonl")
        with open(rows_a, "w") as f:
            for _ in range(10):
                ids, lab = row()
                f.write(json.dumps({"input_ids": ids, "labels": lab}) + "\n")
        rows_b = os.path.join(tmp, "b.parquet")
        b = [row() for _ in range(4)]
        pq.write_table(pa.table({"input_ids": pa.array([x for x, _ in b], pa.list_(pa.int64())),
                                 "labels": pa.array([y for _, y in b], pa.list_(pa.int64()))}),
                       rows_b, row_group_size=2, compression="zstd")

        def train(tag, spec_b, extra=(), np_=1):
            out = os.path.join(tmp, "out_" + tag)
            metrics = os.path.join(tmp, f"metrics_{tag}.jsonl")
            cmd = [twinkle, "train", "--model", os.path.join(ROOT, "models", "qwen3-tiny"), "--dataset", rows_a,
                   rows_b + spec_b, "--batch-size", "4", "--lr", "1e-3", "--shuffle", "--seed", "5",
                   "--max-steps", "6", "--output-dir", out, "--metrics-file", metrics] + list(extra)
            if np_ > 1:
                cmd = [launcher, f"--nproc_per_node={np_}"] + cmd
            r = run_any(cmd)
            if r.returncode != 0:
                print(r.stdout)
                raise SystemExit(f"FAIL: {tag}: twinkle train exited with {r.returncode}")
            return {m["step"]: m for m in harness.read_metrics(metrics)}, out, r.stdout

        save = ["--save-interval", "3", "--save-optimizer"]
        U, out_u, text = train("whole", "#6", save)
        if "dataset: 16 rows" not in text:
            failures.append("A + B#6 did not log 'dataset: 16 rows'")
        five, _, text5 = train("b5", "#5", ["--no-save"])
        if "dataset: 15 rows" not in text5:
            failures.append("A + B#5 did not log 'dataset: 15 rows'")
        if all(five[s]["loss"] == U[s]["loss"] for s in range(1, 7)):
            failures.append("A + B#5 trained the same losses as A + B#6")

        R, _, textr = train("resumed", "#6", ["--resume", os.path.join(out_u, "checkpoint-step-3"), "--no-save"])
        if sorted(R) != [4, 5, 6]:
            failures.append(f"the resumed run logged steps {sorted(R)}, expected 4..6")
        for s in sorted(R):
            for k in ("loss", "grad_norm", "lr"):
                print(f"resumed step {s} {k}: {R[s][k]!r} vs {U[s][k]!r}")
                if R[s][k] != U[s][k]:
                    failures.append(f"resumed step {s}: {k} {R[s][k]!r} != uninterrupted {U[s][k]!r}")

        # refusals before any training, naming the option
        model = os.path.join(ROOT, "models", "qwen3-tiny")
        for extra, want in ((["--data-slice", "0:4"], "--data-slice selects rows of one dataset"),
                            (["--dataset-mix", "zip"], "--dataset-mix 'zip': expected concat, shuffle or interleave"),
                            (["--self-cognition", "N,A"], "--self-cognition: none of the datasets has query/response")):
            r = run_any([twinkle, "train", "--model", model, "--dataset", rows_a, rows_b + "#6", "--max-steps", "1",
                         "--output-dir", os.path.join(tmp, "refused")] + extra)
            if r.returncode == 0 or want not in r.stdout:
                failures.append(f"{' '.join(extra)}: expected a refusal with '{want}', got rc {r.returncode}: "
                                f"{r.stdout.strip().splitlines()[-1:]}")

        D, _, _ = train("dp2", "#6", ["--dp", "2", "--no-save"], np_=2)
        for s in range(1, 7):
            for k in ("loss", "grad_norm"):
                rel = abs(D[s][k] - U[s][k]) / max(abs(U[s][k]), 1e-30)
                print(f"dp2 step {s} {k}: {D[s][k]!r} vs {U[s][k]!r} (rel {rel:.2e})")
                if rel > 1e-6:
                    failures.append(f"dp2 step {s}: {k} {D[s][k]!r} vs one process {U[s][k]!r} (rel {rel:.2e} > 1e-6)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL " + f)
    if failures:
        sys.exit(1)
    print("dataset mixture: counts, resume and dp2 OK")


if __name__ == "__main__":
    main()
