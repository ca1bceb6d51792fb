#!/usr/bin/env python3
"""A non-finite loss or gradient norm never reaches the weights.

tiny model, 16 pre-tokenized rows, batch 4, `--lr 1e6 --clip-grad 1 --max-steps 4`: step 1 blows
the weights up (finite), step 2's loss / gradients are NaN or inf.
  1. one process, default (--on-nonfinite error): exits non-zero with an error naming step 2 and
     what was non-finite; the metrics file has step 1 only; a checkpoint already in --output-dir
     (an earlier save) is left byte for byte.
  2. one process, --on-nonfinite skip: exits 0; steps 2-4 are marked skipped with loss / grad_norm
     null; the summary counts 3 skipped; the saved checkpoint holds only finite values; `twinkle
     plot` draws the metrics file (nulls as gaps).
  3. the same on parallel layouts (dp2 and tp2 x pp2, 4 ranks): every rank agrees (error: the job
     ends non-zero within the timeout, no hang; skip: the same skipped steps and step-1 loss as one
     process).
Run with .venv/bin/python (scripts/setup).
"""
import argparse
import functools
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import safetensors_py  # noqa: E402
import harness  # noqa: E402
from harness import read_metrics  # noqa: E402
run = functools.partial(harness.run, env=harness.one_thread_env())  # every child on one thread
run_any = functools.partial(harness.run_any, env=harness.one_thread_env())  # every child on one thread


def digest(d):
    h = {}
    for fn in sorted(os.listdir(d)):
        with open(os.path.join(d, fn), "rb") as f:
            h[fn] = hashlib.sha256(f.read()).hexdigest()
    return h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    twinkle = os.path.join(a.build, "bin", "twinkle")
    launcher = os.path.join(a.build, "bin", "twinkle-run")
    tmp = tempfile.mkdtemp(prefix="twinkle-nonfinite-")
    failures = []
    try:
        run([sys.executable, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp, "--variant", "a"])
        model = os.path.join(tmp, "tiny_a")
        cfg_path = os.path.join(model, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        cfg["num_hidden_layers"] = 4
        cfg["max_window_layers"] = 4
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)
        run([sys.executable, os.path.join(HERE, "qwen3_ref.py"), "init", "--config", cfg_path, "--seed", "0",
             "--out", model])
        rng = random.Random(26)
        rows = os.path.join(tmp, "rows.jsonl")
        with open(rows, "w") as f:
            for _ in range(16):
                L = rng.randint(6, 16)
                ids = [rng.randrange(cfg["vocab_size"]) for _ in range(L)]
                f.write(json.dumps({"input_ids": ids, "labels": [-100] * 2 + ids[2:]}) + "\n")

        def train(tag, np_, flags, policy, out_dir=None):
            metrics = os.path.join(tmp, f"m_{tag}.jsonl")
            out = out_dir or os.path.join(tmp, "out_" + tag)
            cmd = [twinkle, "train", "--model", model, "--dataset", rows, "--batch-size", "4", "--max-steps", "4",
                   "--lr", "1e6", "--clip-grad", "1", "--metrics-file", metrics, "--output-dir", out] + flags
            if policy:
                cmd += ["--on-nonfinite", policy]
            if np_ > 1:
                cmd = [launcher, f"--nproc_per_node={np_}"] + cmd
            r = run_any(cmd)
            return r, read_metrics(metrics, missing_ok=True), out

        # 1. default: stop at step 2, earlier checkpoint untouched
        prev = os.path.join(tmp, "prev_ckpt")
        shutil.copytree(model, prev)
        before = digest(prev)
        r, m, _ = train("err1", 1, [], None, out_dir=prev)
        print(r.stdout[-1500:])
        if r.returncode == 0:
            failures.append("error policy, 1 process: exited 0")
        if "step 2" not in r.stdout or "non-finite" not in r.stdout:
            failures.append("error policy, 1 process: the error does not name step 2 and the non-finite value")
        if len(m) != 1 or m[0]["loss"] is None or not math.isfinite(m[0]["grad_norm"]):
            failures.append(f"error policy, 1 process: metrics should hold step 1 only, finite: {m}")
        if digest(prev) != before:
            failures.append("error policy: the checkpoint already in --output-dir was changed")

        # 2. skip: steps 2-4 skipped, finite checkpoint, plot works
        r, m1, out = train("skip1", 1, [], "skip")
        print(r.stdout[-1500:])
        if r.returncode != 0:
            failures.append(f"skip policy, 1 process: exit code {r.returncode}")
        else:
            skipped = [x["step"] for x in m1 if x.get("skipped")]
            if skipped != [2, 3, 4]:
                failures.append(f"skip policy: skipped steps {skipped}, expected [2, 3, 4]")
            for x in m1[1:]:
                if x["loss"] is not None and x["grad_norm"] is not None:
                    failures.append(f"skip policy: step {x['step']} logs finite loss and grad norm: {x}")
            if "3 skipped" not in r.stdout:
                failures.append("skip policy: the summary does not count 3 skipped steps")
            w = safetensors_py.load(os.path.join(out, "model.safetensors"))
            bad = [k for k, t in w.items() if not bool(t.double().isfinite().all())]
            if bad:
                failures.append(f"skip policy: saved checkpoint has non-finite tensors {bad[:5]}")
            png = os.path.join(tmp, "skip.png")
            rp = run_any([twinkle, "plot", os.path.join(tmp, "m_skip1.jsonl"), "-o", png])
            if rp.returncode != 0 or not os.path.getsize(png):
                failures.append(f"plot refused a metrics file with null losses: {rp.stdout[-500:]}")

        # 3. parallel layouts agree
        for tag, np_, flags in (("dp2", 2, ["--dp", "2"]), ("tp2_pp2", 4, ["--tp", "2", "--pp", "2"])):
            r, m, _ = train("err_" + tag, np_, flags, None)
            if r.returncode == 0 or "step 2" not in r.stdout or "non-finite" not in r.stdout:
                failures.append(f"error policy, {tag}: rc {r.returncode}, message: {r.stdout[-800:]}")
            r, m, _ = train("skip_" + tag, np_, flags, "skip")
            if r.returncode != 0:
                failures.append(f"skip policy, {tag}: exit code {r.returncode}: {r.stdout[-800:]}")
                continue
            if [x.get("skipped", False) for x in m] != [x.get("skipped", False) for x in m1]:
                failures.append(f"skip policy, {tag}: skipped steps differ from one process")
            if abs(m[0]["loss"] - m1[0]["loss"]) > 1e-5 * abs(m1[0]["loss"]):
                failures.append(f"skip policy, {tag}: step-1 loss {m[0]['loss']} vs one process {m1[0]['loss']}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
