#!/usr/bin/env python3
"""bf16 mixed precision (twinkle train --bf16) against fp32 and against PyTorch's own bf16 autocast.

Modes:
  --against torch   30 steps (default) of one model, init and batch, five runs: twinkle --fp32,
                    twinkle --bf16, PyTorch float32, PyTorch bf16 autocast (tests/reference/qwen3_ref.py
                    step --precision autocast-bf16) and PyTorch with bf16 parameters and no float32
                    master weights (--precision pure-bf16). With dev(x, y) = max over steps of
                    |loss_x - loss_y| / loss_y, it requires
                      dev(twinkle bf16, twinkle fp32) <= --tol                        (stated tolerance)
                      dev(twinkle bf16, twinkle fp32) <= dev(torch autocast, torch fp32)
                      dev(twinkle fp32, torch fp32)   <= 1e-4                        (same model and batches)
                    and, so that the test can fail, dev(torch pure-bf16, torch fp32) > --tol: losing
                    the float32 master weights (AdamW updates below a bf16 ulp vanish) is caught by the
                    tolerance. A wrong rounding of the GEMM inputs is caught by tests/unit/kernels/
                    test_gemm_bf16.cpp (exact against round-to-nearest-even).
  --against single  twinkle --bf16 on a parallel layout (--np, --layout) vs twinkle --bf16 in one process:
                    step 1 (same weights) loss within 1e-5 and grad norm within 2e-4 relative, every
                    step's loss within --layout-tol (2e-3: the layout changes fp32 summation orders,
                    which flip single bf16 roundings, and the runs drift apart by that noise). So that the
                    layout cannot pass by ignoring --bf16, it also runs --fp32 on the layout: over the steps,
                    its grad norms must differ from the layout's bf16 ones by at least a third of what
                    separates the one-process bf16 and fp32 runs (the same device against itself; a check of
                    the step-1 grad norm against the one-process runs alone failed on an H200, where cuBLAS's
                    summation order moves a LoRA run's grad norm as far as bf16 does).
  --device D        the twinkle runs of --against torch on device D (cuda; `--against single` puts
                    `--device cuda` in --layout instead: the device run against the one-process CPU run,
                    where the CPU and CUDA bf16 sets round at the same points). --twinkle BIN: the binary
                    (the CUDA emulation's twin, BUILD/tests/twinkle_cuda_emu).
Run with the project environment's python (.venv, scripts/setup).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from check_train import make_batch, read_metrics, run, write_rows  # noqa: E402
import harness  # noqa: E402

PY = os.environ.get("TWINKLE_REF_PYTHON") or sys.executable


def dev(xs, ys):
    return max(abs(x - y) / abs(y) for x, y in zip(xs, ys))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--twinkle", default="", help="the twinkle binary (default BUILD/bin/twinkle)")
    ap.add_argument("--device", default="", help="--against torch: the device of both twinkle runs")
    ap.add_argument("--against", choices=["torch", "single"], default="torch")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch", default="rows:8:24:48")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--tol", type=float, default=5e-3,
                    help="max relative loss deviation of twinkle bf16 from twinkle fp32 over the steps")
    ap.add_argument("--np", type=int, default=1)
    ap.add_argument("--layout", default="")
    ap.add_argument("--layout-tol", type=float, default=2e-3)
    ap.add_argument("--extra", default="", help="twinkle train flags of every twinkle run (e.g. a LoRA adapter: "
                                                "'--lora-r 4 --lora-alpha 8')")
    args = ap.parse_args()

    twinkle = args.twinkle or os.path.join(args.build, "bin", "twinkle")
    launcher = os.path.join(args.build, "bin", "twinkle-run")
    tmp = tempfile.mkdtemp(prefix="twinkle-bf16-")
    try:
        run([PY, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp, "--variant", "a"])
        model = os.path.join(tmp, "tiny_a")
        cfg_path = os.path.join(model, "config.json")
        with open(cfg_path) as f:
            cfg = json.load(f)
        # wider than the default tiny model, so that the bf16 rounding of the GEMM inputs matters
        cfg.update({"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": args.layers,
                    "max_window_layers": args.layers})
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)
        run([PY, os.path.join(HERE, "qwen3_ref.py"), "init", "--config", cfg_path, "--seed", "0", "--out", model,
             "--norm-std", "0.1"])
        ids, labels = make_batch(args.batch, cfg["vocab_size"], 1234)
        rows = os.path.join(tmp, "rows.jsonl")
        write_rows(rows, ids, labels)
        opt = ["--lr", str(args.lr), "--weight-decay", "0.1", "--clip-grad", "1.0", "--adam-beta1", "0.9",
               "--adam-beta2", "0.95", "--adam-eps", "1e-8"]
        common = ["--model", model, "--dataset", rows, "--batch-size", str(len(ids)), "--max-steps",
                  str(args.steps), "--no-save"] + opt + args.extra.split()

        def tw(tag, np_, extra):
            metrics = os.path.join(tmp, f"metrics_{tag}.jsonl")
            cmd = [twinkle, "train"] + common + ["--output-dir", os.path.join(tmp, "out_" + tag), "--metrics-file",
                                                 metrics] + extra
            if np_ > 1:
                cmd = [launcher, f"--nproc_per_node={np_}"] + cmd
            run(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"))
            m = read_metrics(metrics)
            return [r["loss"] for r in m], [r["grad_norm"] for r in m]

        failures = []
        if args.against == "single":
            l1, g1 = tw("single", 1, ["--bf16"])
            ll, gl = tw("layout", args.np, ["--bf16"] + args.layout.split())
            lf, gf = tw("single_fp32", 1, ["--fp32"])
            _, glf = tw("layout_fp32", args.np, ["--fp32"] + args.layout.split())
            for i in range(args.steps):
                print(f"step {i+1}: loss layout {ll[i]:.7f} single {l1[i]:.7f} | grad_norm {gl[i]:.6f} {g1[i]:.6f}")
            d_l = dev(ll, l1)
            d1_l, d1_g = abs(ll[0] - l1[0]) / l1[0], abs(gl[0] - g1[0]) / g1[0]
            # what bf16 changes, on one process and on the layout: max over steps of the relative grad-norm gap
            eff_single, eff_layout = dev(g1, gf), dev(gl, glf)
            print(f"bf16 {args.layout!r} vs one process: step 1 loss {d1_l:.2e} (tol 1e-5), grad norm {d1_g:.2e} "
                  f"(tol 2e-4); max rel loss dev over {args.steps} steps {d_l:.2e} (tol {args.layout_tol:g}); "
                  f"bf16 vs fp32 grad norms: one process {eff_single:.2e}, layout {eff_layout:.2e}")
            # Step 1 runs on the same weights: only the fp32 summation order differs, and where it moves a
            # GEMM input across a bf16 rounding boundary, one element by one bf16 ulp. Later steps drift
            # apart by that bf16 noise, bounded by --layout-tol.
            if d1_l > 1e-5 or d1_g > 2e-4:
                failures.append(f"step 1: loss dev {d1_l:.3e} (> 1e-5?) / grad-norm dev {d1_g:.3e} (> 2e-4?)")
            if d_l > args.layout_tol:
                failures.append(f"layout {args.layout!r}: max loss dev {d_l:.3e} > {args.layout_tol}")
            # the layout ran bf16: its bf16 and fp32 runs differ about as much as the one-process ones
            if eff_layout < eff_single / 3:
                failures.append(f"the layout's bf16 and fp32 grad norms differ by {eff_layout:.3e}, less than a third "
                                f"of the one-process gap {eff_single:.3e}: --bf16 was not applied on the layout")
        else:
            on = ["--device", args.device] if args.device else []
            lf, _ = tw("fp32", 1, ["--fp32"] + on)
            lb, _ = tw("bf16", 1, ["--bf16"] + on)
            batch_json = os.path.join(tmp, "batch.json")
            with open(batch_json, "w") as f:
                json.dump({"input_ids": ids, "labels": labels}, f)
            ref = {}
            for prec in ("none", "autocast-bf16", "pure-bf16"):
                out = os.path.join(tmp, "ref_" + prec)
                run([PY, os.path.join(HERE, "qwen3_ref.py"), "step", "--model", model, "--batch", batch_json,
                     "--steps", str(args.steps), "--lr", str(args.lr), "--weight-decay", "0.1", "--beta1", "0.9",
                     "--beta2", "0.95", "--eps", "1e-8", "--clip-grad", "1.0", "--out", out, "--precision", prec,
                     "--threads", "1"])
                with open(os.path.join(out, "metrics.json")) as f:
                    ref[prec] = json.load(f)["loss"]
            for i in range(args.steps):
                print(f"step {i+1:2d}: twinkle fp32 {lf[i]:.6f} bf16 {lb[i]:.6f} | torch fp32 {ref['none'][i]:.6f} "
                      f"autocast {ref['autocast-bf16'][i]:.6f} pure-bf16 {ref['pure-bf16'][i]:.6f}")
            d_tw, d_ac, d_pure = dev(lb, lf), dev(ref["autocast-bf16"], ref["none"]), dev(ref["pure-bf16"], ref["none"])
            d_same = dev(lf, ref["none"])
            print(f"max rel loss deviation over {args.steps} steps: twinkle bf16 vs fp32 {d_tw:.3e} (tol {args.tol:g}); "
                  f"torch autocast vs fp32 {d_ac:.3e}; torch pure-bf16 vs fp32 {d_pure:.3e}; twinkle fp32 vs torch fp32 "
                  f"{d_same:.3e}")
            if d_tw > args.tol:
                failures.append(f"twinkle bf16 deviates {d_tw:.3e} from fp32 > tol {args.tol}")
            if d_tw > d_ac:
                failures.append(f"twinkle bf16 ({d_tw:.3e}) is further from fp32 than PyTorch autocast ({d_ac:.3e})")
            if d_same > 1e-4:
                failures.append(f"twinkle fp32 vs torch fp32 {d_same:.3e} > 1e-4: not the same model / batches")
            if d_pure <= args.tol:
                failures.append(f"bf16 without master weights deviates only {d_pure:.3e} <= tol {args.tol}: "
                                "the test could not catch it")
            if d_tw == 0.0:
                failures.append("twinkle --bf16 equals --fp32 bit for bit: bf16 was not applied")
        return harness.report(failures)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
