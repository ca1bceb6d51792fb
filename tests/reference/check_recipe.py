#!/usr/bin/python3
"""Acceptance checks of the dense recipe (examples/tp_recipe.cpp) and, with --recipe moe_recipe /
moe_cp_recipe, of the Qwen3-MoE recipes (examples/moe_recipe.cpp, dp=2 tp=2 pp=2 ep=2;
examples/moe_cp_recipe.cpp, tp=2 pp=2 cp=2 ep=2 with ring attention):

1. The 8-process recipe and the same recipe in one process on the same data, seed and global
   batch print the same loss and grad norm at every step (1e-5 relative); for MoE also the
   expert part of the grad norm, the aux loss and the expert load.
2. The checkpoint the 8-process run saved (Hugging Face format; for MoE every expert gathered
   from its ep rank) loads in the independent PyTorch reference (tests/reference/qwen3_ref.py,
   qwen3_moe_ref.py) and gives the same loss on a held-out batch as twinkle's own evaluation of
   it (1e-5 relative).
Run with /usr/bin/python3; needs the Qwen3 tokenizer files placed by scripts/setup.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        print(r.stdout)
        raise SystemExit(f"command failed with exit code {r.returncode}")
    return r.stdout


def metrics(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--recipe", choices=["tp_recipe", "moe_recipe", "moe_cp_recipe"], default="tp_recipe")
    args = ap.parse_args()
    moe = args.recipe != "tp_recipe"
    recipe = os.path.join(args.build, "examples", args.recipe)
    launcher = os.path.join(args.build, "bin", "twinkle-run")
    twinkle = os.path.join(args.build, "bin", "twinkle")
    tmp = tempfile.mkdtemp(prefix="twinkle-recipe-")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    failures = []
    try:
        common = ["--max-steps", str(args.steps), "--data-rows", "64"]
        if moe:  # the aux loss is a per-micro-batch value: the same micro-batches on both layouts
            common += ["--micro-batch-size", "1"]
        single = ["--dp", "1", "--tp", "1", "--pp", "1"] + (["--cp", "1", "--ep", "1"] if moe else [])
        run([launcher, "--nproc_per_node=8", recipe, "--output-dir", os.path.join(tmp, "r8")] + common, env=env)
        run([recipe] + single + ["--output-dir", os.path.join(tmp, "r1")] + common, env=env)
        m8 = metrics(os.path.join(tmp, "r8", "metrics.jsonl"))
        m1 = metrics(os.path.join(tmp, "r1", "metrics.jsonl"))
        if len(m8) != args.steps or len(m1) != args.steps:
            failures.append(f"expected {args.steps} metrics lines, got {len(m8)} (8 ranks) and {len(m1)} (1 rank)")
        for a, b in zip(m8, m1):
            print(f"step {a['step']}: loss 8 ranks {a['loss']:.8f} 1 rank {b['loss']:.8f} | "
                  f"grad_norm {a['grad_norm']:.8f} {b['grad_norm']:.8f} | lr {a['lr']:.6e} {b['lr']:.6e}")
            for k in ("loss", "grad_norm", "lr") + (("expert_grad_norm", "aux_loss", "expert_load_max",
                                                    "expert_load_min") if moe else ()):
                if rel(a[k], b[k]) > 1e-5 and not (a[k] == 0 and b[k] == 0):
                    failures.append(f"step {a['step']}: {k} {a[k]} (8 ranks) vs {b[k]} (1 rank)")
        ck = os.path.join(tmp, "r8")
        for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
            if not os.path.exists(os.path.join(ck, f)):
                failures.append(f"checkpoint lacks {f}")
        # held-out batch: random ids (not the training text), labels on the second half
        with open(os.path.join(ck, "config.json")) as f:
            vocab = json.load(f)["vocab_size"]
        rng = random.Random(99)
        ids, labels = [], []
        for _ in range(4):
            L = rng.randint(8, 40)
            row = [rng.randrange(vocab) for _ in range(L)]
            ids.append(row)
            labels.append([-100] * (L // 2) + row[L // 2:])
        rows = os.path.join(tmp, "heldout.jsonl")
        with open(rows, "w") as f:
            for a, b in zip(ids, labels):
                f.write(json.dumps({"input_ids": a, "labels": b}) + "\n")
        batch = os.path.join(tmp, "heldout.json")
        with open(batch, "w") as f:
            json.dump({"input_ids": ids, "labels": labels}, f)
        tw = json.loads(run([twinkle, "eval", "--model", ck, "--dataset", rows, "--batch-size", "4"], env=env)
                        .strip().splitlines()[-1])
        ref_py = "qwen3_moe_ref.py" if moe else "qwen3_ref.py"
        ref = json.loads(run(["/usr/bin/python3", os.path.join(HERE, ref_py), "loss", "--model", ck,
                              "--batch", batch]).strip().splitlines()[-1])
        print(f"held-out loss: twinkle {tw['loss']:.8f} torch {ref['loss']:.8f}")
        if rel(tw["loss"], ref["loss"]) > 1e-5:
            failures.append(f"held-out loss {tw['loss']} (twinkle) vs {ref['loss']} (PyTorch reference)")
        # (the MoE recipe's first steps are warm-up at lr 0 and 5e-5: make demo RECIPE=moe shows its fall)
        if not moe and m8 and m8[-1]["loss"] >= m8[0]["loss"]:
            failures.append("the loss did not fall over the run")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
