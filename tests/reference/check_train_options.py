#!/usr/bin/env python3
"""Option and row validation (and smaller training faults) through `twinkle train`, `twinkle eval`
and the recipe: every option rule and each out-of-range bound is an error naming the option and the
allowed range (the same validate() the C++ API calls); --max-steps 0 or absent = one epoch,
negative = error; --help shows every default; --batch-size larger than the dataset warns;
--skip-bad-rows drops a malformed pre-tokenized row with a warning naming file:line and counts it
(without the flag: the error); a step / eval without a labelled token logs "no labelled tokens"
(null in JSON) with a warning, never loss 0.0; labels holding the pad (151643) and stop (151645)
ids count and train like any other (eval vs PyTorch on the real Qwen3 vocabulary).
Run with .venv/bin/python (scripts/setup).
"""
import argparse
import functools
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
run_any = functools.partial(harness.run_any, env=harness.one_thread_env())  # every child on one thread


def run(cmd, timeout=120):
    """(exit code, output) of cmd: the checks here expect failures as well as successes."""
    r = run_any(cmd, timeout=timeout)
    return r.returncode, r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    a = ap.parse_args()
    twinkle = os.path.join(a.build, "bin", "twinkle")
    recipe = os.path.join(a.build, "examples", "tp_recipe")
    tmp = tempfile.mkdtemp(prefix="twinkle-options-")
    failures = []

    def fail(msg):
        failures.append(msg)
        print("FAIL " + msg)

    try:
        subprocess.run(harness.prefork_cmd([sys.executable, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp,
                                            "--variant", "a", "--init", "--seed", "1"]),
                       check=True, stdout=subprocess.DEVNULL)
        model = os.path.join(tmp, "tiny_a")
        rng = random.Random(17)

        def rows_file(name, n, masked=()):
            p = os.path.join(tmp, name)
            with open(p, "w") as f:
                for i in range(n):
                    ids = [rng.randrange(1000) for _ in range(rng.randint(5, 12))]
                    lab = [-100] * len(ids) if i in masked else [-100] + ids[1:]
                    f.write(json.dumps({"input_ids": ids, "labels": lab}) + "\n")
            return p

        rows8 = rows_file("rows8.jsonl", 8)
        def train(flags, one_step=True):
            cmd = [twinkle, "train", "--model", model, "--dataset", rows8, "--no-save"] + flags
            if "--batch-size" not in flags:
                cmd += ["--batch-size", "4"]
            if "--max-steps" not in flags and one_step:
                cmd += ["--max-steps", "1"]
            return run(cmd)

        def metrics_of(extra, tag, one_step=True):
            m = os.path.join(tmp, f"m_{tag}.jsonl")
            rc, out = train(["--metrics-file", m] + extra, one_step)
            lines = []
            if os.path.exists(m):
                with open(m) as f:
                    lines = [json.loads(l) for l in f if l.strip()]
            return rc, out, lines

        # 1. every bound: error naming the option and the allowed range
        bad = [
            (["--lr", "-1"], r"'lr' \(--lr\) must be a finite number >= 0.*got -1"),
            (["--lr", "nan"], r"'lr' \(--lr\) must be .*got nan"),
            (["--lr", "inf"], r"'lr' \(--lr\) must be .*got inf"),
            (["--adam-beta1", "1.5"], r"'adam_beta1' \(--adam-beta1\) must be in \[0, 1\).*got 1.5"),
            (["--adam-beta1", "-0.1"], r"'adam_beta1' .*\[0, 1\)"),
            (["--adam-beta2", "1"], r"'adam_beta2' \(--adam-beta2\) must be in \[0, 1\)"),
            (["--adam-eps", "0"], r"'adam_eps' \(--adam-eps\) must be a finite number > 0"),
            (["--adam-eps", "-1e-8"], r"'adam_eps' .*> 0"),
            (["--adam-eps", "inf"], r"'adam_eps' .*got inf"),
            (["--weight-decay", "-0.01"], r"'weight_decay' \(--weight-decay\) must be a finite number >= 0"),
            (["--clip-grad", "nan"], r"'clip_grad' \(--clip-grad\) must be a finite number"),
            (["--clip-grad", "inf"], r"'clip_grad' .*got inf"),
            (["--min-lr", "1e-3"], r"'min_lr' \(--min-lr\) must be <= lr \(0.0001"),
            (["--lr-warmup-steps", "5", "--lr-decay-steps", "5"], r"'lr_warmup_steps' .*smaller than lr_decay_steps \(5\)"),
            (["--lr-warmup-steps", "-1"], r"'lr_warmup_steps' .*>= 0"),
            # --lr-decay-steps 0 = the run's steps (Megatron: lr_decay_iters defaults to train_iters and the
            # scheduler asserts warm-up < decay); a longer warm-up stretched the decay and never reached --lr
            (["--max-steps", "2", "--lr-warmup-steps", "2"], r"'lr_warmup_steps' .*smaller than the run's 2 steps.*got 2"),
            (["--lr-warmup-steps", "5", "--lr-decay-style", "cosine"],
             r"'lr_warmup_steps' .*smaller than the run's 1 steps.*got 5"),
            (["--lr-decay-steps", "-3"], r"'lr_decay_steps' .*>= 0"),
            (["--lr-decay-style", "exponential"], r"'lr_decay_style' .*cosine, linear, constant"),
            (["--micro-batch-size", "-1"], r"'micro_batch_size' \(--micro-batch-size\) must be >= 0"),
            (["--max-length", "-5"], r"'max_length' \(--max-length\) must be >= 1, got -5"),
            (["--max-length", "0"], r"'max_length' .*got 0"),
            (["--truncation", "middle"], r"'truncation' .*raise, left, right, delete, split"),
            (["--max-steps", "-1"], r"'max_steps' \(--max-steps\) must be >= 0 \(0 = one epoch\), got -1"),
            (["--batch-size", "0"], r"'batch_size' \(--batch-size\) must be >= 1, got 0"),
            (["--on-nonfinite", "ignore"], r"'on_nonfinite' .*\"error\" or \"skip\""),
            (["--bf16", "--fp32"], r"--bf16 excludes --fp32"),
        ]
        for flags, pattern in bad:
            rc, out = train(flags)
            if rc == 0 or not re.search(pattern, out):
                fail(f"{' '.join(flags)}: rc {rc}, expected an error matching {pattern!r}; got: {out[-400:]}")
        print(f"{len(bad)} bad option values refused")

        # 2. accepted edge values: micro-batch-size 0 (= default), lr 0, beta 0
        for flags in (["--micro-batch-size", "0"], ["--lr", "0"], ["--adam-beta1", "0"], ["--clip-grad", "0"]):
            rc, out = train(flags)
            if rc != 0:
                fail(f"{' '.join(flags)} should be accepted: {out[-400:]}")

        # 3. --max-steps: 0 or absent = one epoch (8 rows / 3 per batch = 3 steps)
        for extra, tag in ((["--max-steps", "0"], "zero"), ([], "absent")):
            rc, out, m = metrics_of(["--batch-size", "3"] + extra, "steps_" + tag, one_step=False)
            if rc != 0 or len(m) != 3:
                fail(f"--max-steps {tag}: rc {rc}, {len(m)} steps, expected one epoch = 3 steps")
        rc, out = run([recipe, "--max-steps", "-1"])
        if rc == 0 or "'max_steps' (--max-steps) must be >= 0" not in out:
            fail(f"tp_recipe --max-steps -1: rc {rc}: {out[-300:]}")

        # 4. --help shows every default
        for cmd, name in (([twinkle, "train", "--help"], "twinkle train"), ([recipe, "--help"], "tp_recipe")):
            rc, out = run(cmd)
            # an option entry: "  --name TYPE=default   description" (the description may wrap onto
            # the next, more indented line); an empty default must be spelled out ("default: ...")
            missing = []
            lines = out.splitlines()
            for k, line in enumerate(lines):
                m = re.match(r"\s+(--[a-z0-9-]+)\s+(INT|UINT|FLOAT|TEXT|BOOLEAN)(\S*)", line)
                if not m or "REQUIRED" in line:
                    continue
                desc = line + (lines[k + 1] if k + 1 < len(lines) and re.match(r"\s{20,}\S", lines[k + 1]) else "")
                if not m.group(3).startswith("=") and "default:" not in desc:
                    missing.append(m.group(1))
            if rc != 0 or missing or not re.search(r"--max-steps INT=0\s", out):
                fail(f"{name} --help: options without a shown default: {missing} (rc {rc})")

        # 5. a batch larger than the dataset warns and says what it does
        rc, out, m = metrics_of(["--batch-size", "1000000", "--max-steps", "1"], "huge")
        if rc != 0 or "batch_size 1000000 is larger than the dataset (8 rows)" not in out or len(m) != 1:
            fail(f"--batch-size 1000000: rc {rc}, {out[-400:]}")

        # 6. --skip-bad-rows on pre-tokenized rows
        badrows = os.path.join(tmp, "bad.jsonl")
        with open(rows8) as f:
            good = f.read().splitlines()
        with open(badrows, "w") as f:
            f.write("\n".join(good[:2] + ['{"input_ids": [1, 2, "x"], "labels": [1, 2, 3]}'] + good[2:]) + "\n")
        cmd = [twinkle, "train", "--model", model, "--dataset", badrows, "--batch-size", "4", "--max-steps", "1",
               "--no-save"]  # 9 lines, 8 good rows
        rc, out = run(cmd)
        if rc == 0 or f"{badrows}:3: field 'input_ids' must contain only integers" not in out:
            fail(f"bad row without --skip-bad-rows: rc {rc}: {out[-400:]}")
        rc, out = run(cmd + ["--skip-bad-rows"])
        if rc != 0 or f"{badrows}:3" not in out or "8 rows (1 bad rows skipped)" not in out or \
                "1 bad rows skipped" not in out.split("summary:")[-1]:
            fail(f"bad row with --skip-bad-rows: rc {rc}: {out[-600:]}")

        # 7. no labelled token in a step / an eval
        masked = rows_file("masked.jsonl", 8, masked=range(4))
        m_path = os.path.join(tmp, "m_masked.jsonl")
        rc, out = run([twinkle, "train", "--model", model, "--dataset", masked, "--batch-size", "4", "--no-save",
                       "--metrics-file", m_path])
        with open(m_path) as f:
            m = [json.loads(l) for l in f if l.strip()]
        if rc != 0 or len(m) != 2 or m[0]["loss"] is not None or m[0]["label_tokens"] != 0 or m[1]["loss"] is None:
            fail(f"step without labelled tokens: rc {rc}, metrics {m}")
        if "no labelled tokens" not in out or "loss 0.0000" in out or "loss 0.000000" in out:
            fail(f"step without labelled tokens: log should say 'no labelled tokens', got {out[-600:]}")
        all_masked = rows_file("all_masked.jsonl", 4, masked=range(4))
        rc, out = run([twinkle, "eval", "--model", model, "--dataset", all_masked, "--batch-size", "2"])
        js = [l for l in out.splitlines() if l.startswith("{")]
        if rc != 0 or not js or json.loads(js[-1])["loss"] is not None or "no labelled tokens" not in out:
            fail(f"eval without labelled tokens: rc {rc}: {out[-400:]}")
        rc, out = run([twinkle, "plot", m_path, "-o", os.path.join(tmp, "masked.png")])
        if rc != 0:
            fail(f"plot of a metrics file with a null loss: {out[-300:]}")

        # 8. Stop / pad ids are ordinary labels. The real Qwen3 vocabulary (models/qwen3-tiny's
        #    config and tokenizer: pad <|endoftext|> 151643, eos <|im_end|> 151645); 3 rows whose labels
        #    hold both, padded with 151643 by twinkle: label count and loss equal PyTorch's.
        real = os.path.join(tmp, "real_vocab")
        os.makedirs(real)
        src = os.path.join(HERE, "..", "..", "models", "qwen3-tiny")
        for fn in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(src, fn), real)
        subprocess.run(harness.prefork_cmd([sys.executable, os.path.join(HERE, "qwen3_ref.py"), "init", "--config",
                                            os.path.join(real, "config.json"), "--seed", "3", "--out", real]),
                       check=True, stdout=subprocess.DEVNULL)
        stop_rows = []
        for L in (7, 9, 5):
            ids = [rng.randrange(1000, 150000) for _ in range(L)]
            ids[2], ids[-1] = 151643, 151645
            stop_rows.append({"input_ids": ids, "labels": [-100, -100] + ids[2:]})
        rp = os.path.join(tmp, "stop_rows.jsonl")
        with open(rp, "w") as f:
            for r in stop_rows:
                f.write(json.dumps(r) + "\n")
        bp = os.path.join(tmp, "stop_batch.json")
        with open(bp, "w") as f:
            json.dump({"input_ids": [r["input_ids"] for r in stop_rows], "labels": [r["labels"] for r in stop_rows]}, f)
        rc, out = run([sys.executable, os.path.join(HERE, "qwen3_ref.py"), "loss", "--model", real, "--batch", bp])
        want = json.loads(out.strip().splitlines()[-1])
        rc, out = run([twinkle, "eval", "--model", real, "--dataset", rp, "--batch-size", "3"])
        js = [l for l in out.splitlines() if l.startswith("{")]
        got = json.loads(js[-1]) if js else {}
        print(f"stop / pad ids as labels: twinkle {got} torch {want}")
        if rc != 0 or got.get("label_tokens") != want["tokens"] or want["tokens"] != 15 or \
                abs(got["loss"] - want["loss"]) > 1e-5 * want["loss"]:
            fail(f"stop / pad ids as labels: twinkle {got} vs torch {want}")

        # 9. --ignore-empty-think reaches the template from `twinkle train`: 2 self-cognition rows (one
        #    assistant turn each, no reasoning: the template inserts <think>\n\n</think>\n\n = 4 tokens
        #    per row) train 8 labelled tokens fewer (the labels themselves are checked against jinja2 +
        #    HF tokenizers in template_reference_qwen3).
        sc = os.path.join(HERE, "..", "..", "data", "self_cognition.jsonl")
        counts = []
        for extra in ([], ["--ignore-empty-think"]):
            mp = os.path.join(tmp, "m_iet.jsonl")
            rc, out = run([twinkle, "train", "--model", real, "--dataset", sc, "--self-cognition", "twinkle,ModelScope",
                           "--data-slice", "2", "--batch-size", "2", "--max-steps", "1", "--lr", "0", "--no-save",
                           "--metrics-file", mp] + extra)
            with open(mp) as f:
                counts.append(json.loads(f.readline())["label_tokens"] if rc == 0 else None)
        print(f"--ignore-empty-think: label tokens {counts[0]} without, {counts[1]} with the flag")
        if counts[0] is None or counts[1] is None or counts[0] - counts[1] != 8:
            fail(f"--ignore-empty-think: label tokens {counts}, expected 8 fewer with the flag")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"FAILED ({len(failures)})")
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
