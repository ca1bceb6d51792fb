#!/usr/bin/env python3
"""Evaluation during training (`twinkle train --val-dataset / --split-dataset-ratio --eval-interval
--eval-iters`, twinkle/train/evaluate.h) against transformers in float64:

  1. one process, --eval-interval 2 --eval-iters 3 --batch-size 4, 4 steps, HF checkpoints at steps 2 and
     4: each eval record's loss equals the token-weighted mean loss of transformers'
     AutoModelForCausalLM (float64, eager attention) loaded from that step's saved checkpoint over the
     same validation rows (rows first_row .. first_row + 11 mod 10: Megatron's validation iterator
     continues across evaluations and wraps), 1e-5 relative; eval_ppl = exp(eval_loss), label tokens
     exact. The validation batches differ in token counts (rows of 3..40 tokens) and mean losses (long rows
     of one repeated token, which the model learns, and short random ones), so the plain mean of the
     per-batch means is > 1e-3 off the token-weighted one (checked on the reference values): a weighting
     bug fails the 1e-5.
  2. the same on tp2 x pp2 x dp2 (8 ranks, twinkle-run): every eval record vs the reference of its own
     checkpoints (1e-5) and vs one process (1e-5).
  3. eval does not perturb training: the same runs without a validation set log the same step records
     (loss, grad norm, lr, tokens: JSON-equal) and write byte-identical checkpoints (every file of the
     output directory, interval checkpoints with the optimizer state included), on 1 and 8 ranks.
  4. TensorBoard: EventAccumulator reads 'lm loss validation' and 'lm loss validation ppl' at steps 2 and
     4, equal to metrics.jsonl as float32; resuming checkpoint-step-2 into copies of the same metrics file
     and event directory gives eval records at 2 and 4 once each (the resumed 4 equal to the
     uninterrupted run's bit for bit) and one TensorBoard curve (steps 2, 4 once each).
  5. --split-dataset-ratio 0.25 of the 32 training rows: the validation rows are datasets'
     Dataset.train_test_split(test_size=max(int(32 * 0.25), 1), shuffle=True,
     seed=np.random.RandomState(42).randint(0, 2**31 - 1)) test rows in that order (eval over their
     first 4 vs transformers on the final weights), the training rows its train rows in order (step 1's
     loss vs transformers on the initial weights over the first 4 of them).
  6. `twinkle plot` draws a metrics.jsonl with eval records.
Prints "eval check OK: ..." on success. Run with .venv/bin/python (scripts/setup).
"""
import argparse
import filecmp
import glob
import json
import math
import os
import random
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import one_thread_env, random_rows, read_metrics, rel, run, write_rows  # noqa: E402

TOL = 1e-5
B, K, INTERVAL, STEPS = 4, 3, 2, 4


class Reference:
    """transformers' Qwen3ForCausalLM in float64 (hf_oracle.load_model), token losses summed per row."""

    def __init__(self):
        import torch
        import hf_oracle
        self.torch, self.hf = torch, hf_oracle
        torch.set_num_threads(1)
        self.cache = {}

    def row_losses(self, model_dir, rows):
        """[(sum of -log p(label) in float64, labelled tokens)] of each row under the model in model_dir."""
        torch = self.torch
        if model_dir not in self.cache:
            m = self.hf.load_model(model_dir, torch.float64)
            m.eval()
            self.cache[model_dir] = m
        m = self.cache[model_dir]
        out = []
        with torch.no_grad():
            for r in rows:
                ids = torch.tensor([r["input_ids"]])
                labels = torch.tensor(r.get("labels", r["input_ids"]))
                logits = m(input_ids=ids).logits[0].double()
                tgt = labels[1:]
                keep = tgt != -100
                s = torch.nn.functional.cross_entropy(logits[:-1][keep], tgt[keep], reduction="sum")
                out.append((float(s), int(keep.sum())))
        return out

    def eval_loss(self, model_dir, val, first, iters, batch):
        """Token-weighted mean over `iters` batches of `batch` rows from row `first` (wrapping), and the plain
        mean of the per-batch means (what a weighting bug would report)."""
        n = len(val)
        per = self.row_losses(model_dir, [val[(first + i) % n] for i in range(iters * batch)])
        s = sum(x for x, _ in per)
        t = sum(c for _, c in per)
        means = [sum(x for x, _ in per[k * batch:(k + 1) * batch]) / sum(c for _, c in per[k * batch:(k + 1) * batch])
                 for k in range(iters)]
        return s / t, t, sum(means) / len(means)


def evals(metrics):
    return [r for r in metrics if "eval_loss" in r]


def steps(metrics):
    return [r for r in metrics if "loss" in r]


def tree_bytes_equal(a, b):
    """The relative paths of files that differ (or exist on one side only) between two directories."""
    fa = {os.path.relpath(p, a) for p in glob.glob(os.path.join(a, "**"), recursive=True) if os.path.isfile(p)}
    fb = {os.path.relpath(p, b) for p in glob.glob(os.path.join(b, "**"), recursive=True) if os.path.isfile(p)}
    bad = sorted(fa ^ fb)
    bad += [p for p in sorted(fa & fb) if not filecmp.cmp(os.path.join(a, p), os.path.join(b, p), shallow=False)]
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--np", type=int, default=8, help="ranks of the layout run (tp2 x pp2 x dp2)")
    a = ap.parse_args()
    twinkle = os.path.join(a.build, "bin", "twinkle")
    launcher = os.path.join(a.build, "bin", "twinkle-run")
    failures = []
    tmp = tempfile.mkdtemp(prefix="twinkle_eval_")
    env = one_thread_env()
    try:
        run([sys.executable, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp, "--variant", "a"])
        model = os.path.join(tmp, "tiny_a")
        run([sys.executable, os.path.join(HERE, "qwen3_ref.py"), "init", "--config", os.path.join(model, "config.json"),
             "--seed", "0", "--out", model])
        with open(os.path.join(model, "config.json")) as f:
            vocab = json.load(f)["vocab_size"]
        # half the rows one token repeated (the model learns to continue them within a few steps), half random;
        # validation: 4 long repeated rows then 6 short random ones, so the batches differ in both their token
        # counts and their mean losses (the weighting of Megatron's evaluate matters)
        def repeated(n, seed, lengths):
            rng = random.Random(seed)
            rows = [[rng.randrange(vocab)] * rng.randint(*lengths) for _ in range(n)]
            return rows, [list(r) for r in rows]
        r_ids, r_labels = random_rows(16, vocab, 11)
        p_ids, p_labels = repeated(16, 13, (8, 24))
        ids = [x for pair in zip(r_ids, p_ids) for x in pair]
        labels = [x for pair in zip(r_labels, p_labels) for x in pair]
        train = os.path.join(tmp, "train.jsonl")
        write_rows(train, ids, labels)
        a_ids, a_labels = repeated(4, 14, (30, 40))
        b_ids, b_labels = random_rows(6, vocab, 12, lengths=(3, 8))
        vids, vlabels = a_ids + b_ids, a_labels + b_labels
        valf = os.path.join(tmp, "val.jsonl")
        write_rows(valf, vids, vlabels)
        val = [{"input_ids": x, "labels": y} for x, y in zip(vids, vlabels)]
        ref = Reference()

        def train_run(tag, np_, eval_on, extra=()):
            out = os.path.join(tmp, tag)
            cmd = [twinkle, "train", "--model", model, "--dataset", train, "--batch-size", str(B), "--max-steps",
                   str(STEPS), "--lr", "2e-3", "--output-dir", out, "--metrics-file", os.path.join(out, "metrics.jsonl"),
                   "--save-interval", "2", "--save-optimizer", "--save-format", "gathered"] + list(extra)
            if eval_on:
                cmd += ["--val-dataset", valf, "--eval-interval", str(INTERVAL), "--eval-iters", str(K),
                        "--tensorboard-dir", os.path.join(out, "tb")]
            if np_ > 1:
                cmd = [launcher, f"--nproc_per_node={np_}"] + cmd + ["--tp", "2", "--pp", "2", "--dp", "2"]
            run(cmd, env=env, timeout=300)
            return out, read_metrics(os.path.join(out, "metrics.jsonl"))

        # ---- 1, 2: eval loss vs transformers float64 on the saved checkpoints ----
        results = {}
        power, worst = [], [0.0]
        for tag, np_ in (("single", 1), ("layout", a.np)):
            out, met = train_run(tag, np_, True)
            results[tag] = (out, met)
            ev = evals(met)
            if [r["step"] for r in ev] != [2, 4]:
                failures.append(f"{tag}: eval records at steps {[r['step'] for r in ev]}, expected [2, 4]")
                continue
            for r in ev:
                ck = os.path.join(out, f"checkpoint-step-{r['step']}")
                first = (r["step"] // INTERVAL - 1) * K * B
                want, tokens, plain = ref.eval_loss(ck, val, first, K, B)
                power.append(rel(plain, want))
                worst[0] = max(worst[0], rel(r["eval_loss"], want))
                if r["eval_first_row"] != first or r["eval_iters"] != K or r["eval_rows"] != K * B:
                    failures.append(f"{tag} step {r['step']}: first_row/iters/rows {r['eval_first_row']}/"
                                    f"{r['eval_iters']}/{r['eval_rows']}, expected {first}/{K}/{K * B}")
                if r["eval_label_tokens"] != tokens:
                    failures.append(f"{tag} step {r['step']}: eval_label_tokens {r['eval_label_tokens']} != {tokens}")
                if rel(r["eval_loss"], want) > TOL:
                    failures.append(f"{tag} step {r['step']}: eval_loss {r['eval_loss']!r} vs transformers float64 "
                                    f"{want!r} (rel {rel(r['eval_loss'], want):.2e} > {TOL}; the plain mean of the "
                                    f"batch means would be {plain!r})")
                if rel(r["eval_ppl"], math.exp(want)) > 2 * TOL:
                    failures.append(f"{tag} step {r['step']}: eval_ppl {r['eval_ppl']!r} vs exp {math.exp(want)!r}")
        if power and min(power) < 100 * TOL:
            failures.append(f"test power: the plain mean of per-batch means is only {min(power):.2e} from the "
                            f"token-weighted mean (need > {100 * TOL}): the rows do not exercise the weighting")
        if "layout" in results and "single" in results:
            for x, y in zip(evals(results["layout"][1]), evals(results["single"][1])):
                if rel(x["eval_loss"], y["eval_loss"]) > TOL:
                    failures.append(f"layout step {x['step']}: eval_loss {x['eval_loss']!r} vs one process "
                                    f"{y['eval_loss']!r}")

        # ---- 3: eval does not perturb training ----
        for tag, np_ in (("single", 1), ("layout", a.np)):
            if tag not in results:
                continue
            out_e, met_e = results[tag]
            out_n, met_n = train_run(tag + "_noeval", np_, False)
            keys = ("step", "loss", "grad_norm", "lr", "tokens", "label_tokens")
            if [[r[k] for k in keys] for r in steps(met_e)] != [[r[k] for k in keys] for r in steps(met_n)]:
                failures.append(f"{tag}: step records differ with eval on: {steps(met_e)} vs {steps(met_n)}")
            if evals(met_n):
                failures.append(f"{tag}: a run without a validation set wrote eval records")
            shutil.move(os.path.join(out_e, "tb"), os.path.join(tmp, tag + "_tb"))
            shutil.move(os.path.join(out_e, "metrics.jsonl"), os.path.join(tmp, tag + "_metrics.jsonl"))
            os.remove(os.path.join(out_n, "metrics.jsonl"))
            diff = tree_bytes_equal(out_e, out_n)
            if diff:
                failures.append(f"{tag}: checkpoint files differ with eval on: {diff[:6]}")
            shutil.move(os.path.join(tmp, tag + "_tb"), os.path.join(out_e, "tb"))
            shutil.move(os.path.join(tmp, tag + "_metrics.jsonl"), os.path.join(out_e, "metrics.jsonl"))

        # ---- 4: TensorBoard tags, resume ----
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        import numpy as np

        def tb_scalars(d):
            acc = EventAccumulator(d, size_guidance={"scalars": 0})
            acc.Reload()
            tags = acc.Tags()["scalars"]
            return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in tags}

        out1, met1 = results["single"]
        sc = tb_scalars(os.path.join(out1, "tb"))
        for tag, field in (("lm loss validation", "eval_loss"), ("lm loss validation ppl", "eval_ppl")):
            want = [(r["step"], float(np.float32(r[field]))) for r in evals(met1)]
            if sc.get(tag) != want:
                failures.append(f"tensorboard '{tag}': {sc.get(tag)} != metrics.jsonl {want}")
        res = os.path.join(tmp, "resumed")
        shutil.copytree(out1, res)
        cmd = [twinkle, "train", "--model", model, "--dataset", train, "--batch-size", str(B), "--max-steps", str(STEPS),
               "--lr", "2e-3", "--output-dir", res, "--metrics-file", os.path.join(res, "metrics.jsonl"),
               "--save-interval", "2", "--save-optimizer", "--save-format", "gathered", "--val-dataset", valf,
               "--eval-interval", str(INTERVAL), "--eval-iters", str(K), "--tensorboard-dir", os.path.join(res, "tb"),
               "--resume", os.path.join(res, "checkpoint-step-2")]
        run(cmd, env=env, timeout=300)
        met_r = read_metrics(os.path.join(res, "metrics.jsonl"))
        if evals(met_r) != evals(met1):
            ev_r, ev_1 = evals(met_r), evals(met1)
            strip = lambda rs: [{k: v for k, v in r.items() if k != "eval_time_s"} for r in rs]  # noqa: E731
            if strip(ev_r) != strip(ev_1):
                failures.append(f"resume: eval records {ev_r} != uninterrupted {ev_1}")
        sc_r = tb_scalars(os.path.join(res, "tb"))
        for tag in ("lm loss validation", "lm loss validation ppl"):
            got = [s for s, _ in sc_r.get(tag, [])]
            if got != [2, 4] or sc_r.get(tag) != sc.get(tag):
                failures.append(f"resume: tensorboard '{tag}' {sc_r.get(tag)} (want steps [2, 4] once, as {sc.get(tag)})")
        if len(glob.glob(os.path.join(res, "tb", "events.out.tfevents.*"))) != 2:
            failures.append("resume: expected two event files in the resumed directory")

        # ---- 5: --split-dataset-ratio vs datasets' train_test_split ----
        import datasets
        seed = int(np.random.RandomState(42).randint(0, np.iinfo(np.int32).max))
        n_val = max(int(32 * 0.25), 1)
        ds = datasets.Dataset.from_dict({"i": list(range(32))})
        sp = ds.train_test_split(test_size=n_val, shuffle=True, seed=seed)
        val_idx, train_idx = list(sp["test"]["i"]), list(sp["train"]["i"])
        out_s = os.path.join(tmp, "split")
        run([twinkle, "train", "--model", model, "--dataset", train, "--split-dataset-ratio", "0.25", "--eval-iters", "1",
             "--batch-size", str(B), "--max-steps", "2", "--lr", "2e-3", "--output-dir", out_s, "--metrics-file",
             os.path.join(out_s, "metrics.jsonl"), "--seed", "42"], env=env, timeout=300)
        met_s = read_metrics(os.path.join(out_s, "metrics.jsonl"))
        rows = [{"input_ids": ids[i], "labels": labels[i]} for i in range(32)]
        want, _, _ = ref.eval_loss(out_s, [rows[i] for i in val_idx], 0, 1, B)
        ev_s = evals(met_s)
        if len(ev_s) != 1 or ev_s[0]["step"] != 2 or rel(ev_s[0]["eval_loss"], want) > TOL:
            failures.append(f"split: eval records {ev_s} vs transformers on datasets' test rows {val_idx[:B]}: {want!r}")
        first4 = ref.row_losses(model, [rows[i] for i in train_idx[:B]])
        want1 = sum(x for x, _ in first4) / sum(c for _, c in first4)
        if rel(steps(met_s)[0]["loss"], want1) > TOL:
            failures.append(f"split: step 1 loss {steps(met_s)[0]['loss']!r} vs transformers on datasets' first train "
                            f"rows {train_idx[:B]}: {want1!r}")

        # ---- 6: twinkle plot with eval records ----
        png = os.path.join(tmp, "plot.png")
        o = run([twinkle, "plot", os.path.join(out1, "metrics.jsonl"), "-o", png])
        if not os.path.getsize(png) or "2 evaluations)" not in o:
            failures.append(f"twinkle plot: {o.strip()!r}")

        if failures:
            print("FAILED:\n  " + "\n  ".join(failures))
            return 1
        print(f"eval check OK: eval loss = transformers float64 on 1 and {a.np} ranks (worst rel {worst[0]:.1e}; "
              f"a plain-mean bug would be "
              f"{min(power):.1e} off), training and checkpoints unchanged by eval, TensorBoard tags and resume, "
              f"split = datasets' train_test_split")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
