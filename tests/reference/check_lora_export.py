#!/usr/bin/env python3
"""`twinkle export --merge` and `--adapter` on generate / eval against the PyTorch reference.

A tiny random Qwen3 with the real vocabulary (tokenizer files from models/qwen3-tiny) gets a LoRA
adapter trained by `twinkle train --lora-r 4 --lora-init false` (B random too, so the adapter
changes the model from the start). Then:
  export    `twinkle export --model BASE --adapter A --merge -o M` writes a plain HF directory;
  loss      on a held-out batch, four numbers agree to 1e-5 relative: PyTorch float64 with the
            adapter unmerged (tests/reference/lora_ref.py, PEFT's formulas and key names),
            PyTorch float64 on M (tests/reference/qwen3_ref.py, no LoRA code at all), twinkle
            eval on BASE --adapter A, twinkle eval on M; and the base model's loss differs from
            them by > 1e-3 relative (else the check could not fail);
  generate  `twinkle generate --model BASE --adapter A --ids` and `--model M` produce the greedy
            continuation PyTorch computes with the adapter attached, which differs from the
            base model's continuation.
  refusal   `twinkle export` without --merge fails naming --merge.
With --moe the base is a tiny Qwen3-MoE (tests/reference/qwen3_moe_ref.py: 3 layers, layer 1 dense,
6 experts top-2) and the adapter is trained all-linear on ep 2 (two processes, each holding three
experts' LoRA pairs), so the saved PEFT directory gathers one pair per expert and projection
(base_model.model.model.layers.N.mlp.experts.E.{gate,up,down}_proj.lora_A/B.weight) from both ep
ranks and its adapter_config.json names the targets explicitly (PEFT's "all-linear" would also
wrap the router mlp.gate, which twinkle's all-linear leaves out): the reference reads it with the
same strict key rules; the merged directory is checked by qwen3_moe_ref.py (generation is not).
Run with .venv/bin/python (scripts/setup).
"""
import argparse
import functools
import json
import os
import shutil
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import lora_ref  # noqa: E402
import make_tiny_model  # noqa: E402
import harness  # noqa: E402
from harness import random_rows, rel, write_rows  # noqa: E402
run = functools.partial(harness.run, env=harness.one_thread_env())  # every child on one thread
import qwen3_ref  # noqa: E402


def write(tmp, name, ids, labels):
    """The rows as a jsonl dataset and as a {"input_ids", "labels"} batch file."""
    jl, bj = os.path.join(tmp, name + ".jsonl"), os.path.join(tmp, name + ".json")
    write_rows(jl, ids, labels)
    with open(bj, "w") as f:
        json.dump({"input_ids": ids, "labels": labels}, f)
    return jl, bj


def last_json(text):
    return json.loads(text.strip().splitlines()[-1])


def greedy(model, prompt, n):
    seq, out = list(prompt), []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(torch.tensor([seq]))[0, -1].argmax())
            out.append(nxt)
            seq.append(nxt)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--moe", action="store_true", help="a Qwen3-MoE base, adapter trained on ep 2 (see above)")
    a = ap.parse_args()
    twinkle = os.path.join(a.build, "bin", "twinkle")
    tmp = tempfile.mkdtemp(prefix="twinkle-lora-export-")
    failures = []
    try:
        base = os.path.join(tmp, "base")
        os.makedirs(base)
        if a.moe:
            import check_train_moe
            cfg = dict(check_train_moe.moe_config(True, [1], 3), vocab_size=151936, eos_token_id=None,
                       bos_token_id=151643, initializer_range=0.5)
        else:
            cfg = dict(make_tiny_model.config("b"), vocab_size=151936, eos_token_id=None, bos_token_id=151643,
                       initializer_range=0.5)
        with open(os.path.join(base, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        run([sys.executable, os.path.join(HERE, "qwen3_moe_ref.py" if a.moe else "qwen3_ref.py"), "init",
             "--config", os.path.join(base, "config.json"), "--seed", "5", "--out", base])
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(a.tokenizer_dir, fn), base)
        train_jl, _ = write(tmp, "train", *random_rows(4, cfg["vocab_size"], 1, (8, 20), 1))
        held_jl, held_json = write(tmp, "held", *random_rows(3, cfg["vocab_size"], 2, (8, 20), 1))
        adapter = os.path.join(tmp, "adapter")
        launch = [os.path.join(a.build, "bin", "twinkle-run"), "--nproc_per_node=2", twinkle] if a.moe else [twinkle]
        run(launch + ["train", "--model", base, "--dataset", train_jl, "--batch-size", "4", "--max-steps", "2",
                      "--lr", "1e-3", "--lora-r", "4", "--lora-alpha", "8", "--lora-init", "false", "--output-dir",
                      adapter] + (["--ep", "2"] if a.moe else []))
        if not os.path.exists(os.path.join(adapter, "adapter_config.json")):
            raise SystemExit(f"twinkle train --lora-r wrote no adapter_config.json in {adapter}")
        if a.moe:
            with open(os.path.join(adapter, "adapter_config.json")) as f:
                tm = json.load(f)["target_modules"]
            keys = set(lora_ref.st.load(os.path.join(adapter, "adapter_model.safetensors")))
            want = {f"base_model.model.model.layers.{l}.mlp.experts.{e}.{p}.lora_{x}.weight"
                    for l in (0, 2) for e in range(cfg["num_experts"]) for p in ("gate_proj", "up_proj", "down_proj")
                    for x in "AB"}
            print(f"adapter_config.json target_modules {tm}; {len(keys)} tensors, {len(want & keys)} expert ones")
            if tm == "all-linear" or "gate" in tm:
                failures.append(f"MoE adapter_config.json target_modules {tm!r}: PEFT would also wrap the router")
            if want - keys:
                failures.append(f"adapter lacks expert keys, e.g. {sorted(want - keys)[:3]}")
        merged = os.path.join(tmp, "merged")
        out = run([twinkle, "export", "--model", base, "--adapter", adapter, "-o", merged], expect_fail=True)
        if "--merge" not in out:
            failures.append(f"export without --merge: the error does not name --merge: {out.strip()[-300:]}")
        run([twinkle, "export", "--model", base, "--adapter", adapter, "--merge", "-o", merged])
        if os.path.exists(os.path.join(merged, "adapter_config.json")):
            failures.append("export --merge wrote an adapter_config.json (a PEFT directory, not a merged checkpoint)")

        # Held-out loss: reference with the adapter (unmerged) is the truth.
        ref_adapter = last_json(run([sys.executable, os.path.join(HERE, "lora_ref.py"), "loss", "--model", base,
                                     "--adapter", adapter, "--batch", held_json, "--dtype", "float64"]))["loss"]
        ref_merged = last_json(run([sys.executable, os.path.join(HERE, "qwen3_moe_ref.py" if a.moe else "qwen3_ref.py"),
                                    "loss", "--model", merged, "--batch", held_json, "--dtype", "float64"]))
        ref_merged = ref_merged["lm_loss" if a.moe else "loss"]
        tw = {}
        for tag, extra in (("base", ["--model", base]), ("adapter", ["--model", base, "--adapter", adapter]),
                           ("merged", ["--model", merged])):
            tw[tag] = last_json(run([twinkle, "eval", "--dataset", held_jl, "--batch-size", "3"] + extra))["loss"]
        print(f"held-out loss: torch-f64 base+adapter {ref_adapter:.8f} | torch-f64 merged dir {ref_merged:.8f} | "
              f"twinkle base+adapter {tw['adapter']:.8f} | twinkle merged dir {tw['merged']:.8f} | "
              f"twinkle base {tw['base']:.8f}")
        for what, v in (("torch merged dir", ref_merged), ("twinkle base+adapter", tw["adapter"]),
                        ("twinkle merged dir", tw["merged"])):
            if rel(v, ref_adapter) > 1e-5:
                failures.append(f"held-out loss: {what} {v} vs torch base+adapter {ref_adapter}")
        if rel(tw["base"], ref_adapter) < 1e-3:
            failures.append(f"the adapter barely changes the loss ({tw['base']} vs {ref_adapter}): the test could not fail")

        if a.moe:  # generation is checked on the dense model
            return finish(tmp, failures)
        # Greedy generation.
        N = 8
        gens = {}
        for tag, extra in (("adapter", ["--model", base, "--adapter", adapter]), ("merged", ["--model", merged])):
            gens[tag] = last_json(run([twinkle, "generate", "--prompt", "hello", "--max-new-tokens", str(N), "--ids"]
                                      + extra))
        prompt = gens["adapter"]["prompt_ids"]
        m = qwen3_ref.load_model(base, torch.float64)
        want_base = greedy(m, prompt, N)
        lora_ref.attach(m, adapter, torch.float64)
        want = greedy(m, prompt, N)
        print(f"reference continuation with the adapter {want}, without {want_base}")
        for tag, g in gens.items():
            print(f"twinkle generate ({tag}): {g['generated_ids']}")
            if g["generated_ids"] != want:
                failures.append(f"generate ({tag}): {g['generated_ids']} != reference with the adapter {want}")
        if want == want_base:
            failures.append("the adapter does not change the greedy continuation: the generate check could not fail")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return finish(tmp, failures)


def finish(tmp, failures):
    shutil.rmtree(tmp, ignore_errors=True)
    return harness.report(failures)


if __name__ == "__main__":
    sys.exit(main())
