#!/usr/bin/env python3
"""Bad parallel configurations fail before training, at once, with a clear message.

The Qwen3-MoE cases (the expert grid) also run `twinkle plan` with the same layout flags, which
must fail with the same message as training (plan --ep / --etp)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import prefork_cmd  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

CASES = [
    # (ranks, flags, expected message fragment)
    (4, ["--tp", "4"], "num_key_value_heads 2 is not divisible by tp 4"),
    (4, ["--pp", "4"], "pp 4 is larger than num_hidden_layers 2"),
    (2, ["--dp", "2", "--batch-size", "3"], "'batch_size' (--batch-size) must be divisible by dp_size 2"),
    (2, ["--tp", "2", "--pp", "2"], "world size 2 does not match the device mesh"),
    (1, ["--device", "tpu"], "device_type"),
    (1, ["--device", "npu"], "no NPU backend"),
    # context parallelism: Ulysses needs heads divisible by cp*tp; the world must fit
    (4, ["--cp", "4", "--cp-comm-type", "a2a"],
     "cp_comm_type a2a (Ulysses) needs num_attention_heads (4) and num_key_value_heads (2) divisible by cp*tp = 4*1 = 4"),
    (1, ["--cp-comm-type", "ring"], "cp_comm_type"),
    (2, ["--cp", "4"], "world size 2 does not match the device mesh"),
]

# Qwen3-MoE cases on the embedded models/qwen3-moe-tiny (8 experts, moe_intermediate_size 64).
MOE_CASES = [
    # expert tensor parallelism splits moe_intermediate_size over etp
    (3, ["--dp", "3", "--etp", "3", "--batch-size", "3"], "moe_intermediate_size = 64 is not divisible by etp = 3"),
    # LoRA with etp > 1 stays refused, as in Megatron-Bridge
    (2, ["--dp", "2", "--etp", "2", "--lora-r", "4", "--lora-targets", "q_proj,gate"],
     "LoRA with expert tensor parallelism (etp 2) is not supported"),
    # the expert grid (etp, ep, edp, pp) must tile the world: etp * ep * pp divides it
    (2, ["--dp", "2", "--ep", "2", "--etp", "2"],
     "MeshSizes.ep = 2 (x etp=2 x pp=1 = 4) does not divide the world size 2 (dp*tp*pp*cp)"),
]


def plan_flags(flags):
    """The train flags of a case as `twinkle plan` flags (the layout, the batch, LoRA's rank)."""
    out, i = [], 0
    while i < len(flags):
        f, v = flags[i], flags[i + 1]
        if f == "--batch-size":
            out += ["--global-batch-size", v]
        elif f != "--lora-targets":
            out += [f, v]
        i += 2
    return out + ["--micro-batch-size", "1", "--seq-length", "64"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    twinkle = os.path.join(args.build, "bin", "twinkle")
    launcher = os.path.join(args.build, "bin", "twinkle-run")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(prefork_cmd([sys.executable, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp,
                                    "--variant", "a"]),
                       check=True, stdout=subprocess.DEVNULL)
        model = os.path.join(tmp, "tiny_a")
        rows = os.path.join(tmp, "rows.jsonl")
        with open(rows, "w") as f:
            for i in range(4):
                f.write(json.dumps({"input_ids": [1, 2, 3, 4 + i]}) + "\n")
        moe = os.path.join(HERE, "..", "..", "models", "qwen3-moe-tiny")
        for np_, flags, want, mdl in [c + (model,) for c in CASES] + [c + (moe,) for c in MOE_CASES]:
            cmd = [twinkle, "train", "--model", mdl, "--dataset", rows, "--max-steps", "1", "--no-save"] + flags
            if "--batch-size" not in flags:
                cmd += ["--batch-size", "4"]
            if np_ > 1:
                cmd = [launcher, f"--nproc_per_node={np_}"] + cmd
            t0 = time.time()
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                               env=dict(os.environ, OMP_NUM_THREADS="1"))
            dt = time.time() - t0
            ok = r.returncode != 0 and want in r.stdout and dt < 60
            print(f"{'ok  ' if ok else 'FAIL'} ranks={np_} {' '.join(flags)}: exit {r.returncode} in {dt:.1f}s; "
                  f"wants '{want}'")
            if not ok:
                print(r.stdout[-2000:])
                failures.append(" ".join(flags))
            if mdl == moe:  # the planner refuses the same layout with the same message
                r = subprocess.run([twinkle, "plan", "--model", mdl] + plan_flags(flags), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, timeout=60)
                ok = r.returncode != 0 and want in r.stdout
                print(f"{'ok  ' if ok else 'FAIL'} twinkle plan {' '.join(plan_flags(flags))}: exit {r.returncode}; "
                      f"wants '{want}'")
                if not ok:
                    print(r.stdout[-2000:])
                    failures.append("plan " + " ".join(flags))
    if failures:
        print("FAILED:", failures)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
