#!/usr/bin/env python3
"""Checks twinkle's Qwen3-MoE training (one process) against tests/reference/qwen3_moe_ref.py.

A tiny Qwen3-MoE (3 layers, layer 1 in mlp_only_layers = a dense MLP among sparse ones,
6 experts top-2, untied) is initialised by the reference, then trained N AdamW steps by
`twinkle train` and by `qwen3_moe_ref.py step` (float64) on the same rows, split into the same
micro-batches (right-padded per micro-batch; the padding is excluded from the router
statistics). Compared, as tests/reference/check_train.py does for the dense model:
  * loss (lm + coef * aux) and grad norm of every step: 1e-5 relative;
  * lm_loss, aux_loss (logged even with coefficient 0), expert_load_max/min of every step: 1e-5
    relative (load shares: 1e-9 absolute; they are ratios of integer counts);
  * every step-0 gradient (router gate, every expert, the dense layer): max abs err <= 1e-4 *
    max|ref|;
  * parameters after the last step: check_train.compare_params.
With --np N --layout "FLAGS" it instead compares `twinkle train` on that layout (twinkle-run,
N ranks) with twinkle in one process on the same model, rows and micro-batches: loss, grad
norm, lm / aux / z loss and expert load of every step (1e-5 relative) and the final parameters
(LoRA: every adapter element within --layout-tol * steps * lr, check_train.compare_params_strict,
as the dense LoRA layouts; measured 2026-11-30, 3 steps at lr 1e-3, bound 3e-5: largest element
difference 5e-8 (dp2 pp2) to 2.05e-5 (cp2 ep2 with dropout on the experts), deterministic — twinkle's
CPU results do not depend on the thread count; the near-bound elements are those whose gradient is
near AdamW's eps, where a summation-order difference moves the update by a fraction of lr).
With --lora-r R (--lora-targets, default attention + router "gate") twinkle trains a LoRA
adapter instead: against tests/reference/lora_ref.py on qwen3_moe_ref.py from the same
initial adapter (--lora-init false: B random too; --lora-rslora: alpha / sqrt(r)) — loss, grad
norm, lm / aux / z loss of every step, the step-0 adapter gradients, the saved scaling and the
adapter after the last step (check_train.compare_adapter_f64, PyTorch float32 held to the same
bound); with --layout the layout's adapter vs one process's.
Run with the project environment's python (.venv, scripts/setup).
"""
import argparse
import json
import math
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_train as ct  # noqa: E402
import harness  # noqa: E402
from harness import read_metrics, rel, run, write_rows  # noqa: E402
import safetensors_py  # noqa: E402


def moe_config(norm_topk_prob, mlp_only_layers, layers, experts=6):
    return {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 32, "hidden_act": "silu", "max_position_embeddings": 512, "rope_theta": 1000000.0,
        "rope_scaling": None, "rms_norm_eps": 1e-06, "initializer_range": 0.02, "attention_bias": False,
        "attention_dropout": 0.0, "vocab_size": 517, "tie_word_embeddings": False, "bos_token_id": 1,
        "eos_token_id": 2, "num_experts": experts, "num_experts_per_tok": 2, "moe_intermediate_size": 48,
        "norm_topk_prob": norm_topk_prob, "decoder_sparse_step": 1, "mlp_only_layers": mlp_only_layers,
        "router_aux_loss_coef": 0.001, "output_router_logits": False, "torch_dtype": "float32",
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": layers}


def rig_router(path):
    """Every token routes to experts 0 and 1 (see --rig-router): a constant +1 in the embedding's
    column 0 (its entries are N(0, 0.02)) makes the normalised residual stream's column 0 ~8, which
    routers' rows 0 and 1 read with weights 1 and 0.5 (logits ~8 and ~4 against ~0.2 for the others)."""
    t = safetensors_py.load(path)
    t["model.embed_tokens.weight"][:, 0] += 1.0
    for k in t:
        if k.endswith(".mlp.gate.weight"):
            t[k][0, 0], t[k][1, 0] = 1.0, 0.5
    safetensors_py.save(path, t)


def rigged_load_failures(metrics, who):
    """With the rigged router every step's expert_load_min is 0 (experts 2.. get no row)."""
    bad = []
    for i, m in enumerate(metrics):
        if m.get("expert_load_min") != 0:
            bad.append(f"{who} step {i+1}: expert_load_min {m.get('expert_load_min')}, want 0 (experts 2.. get no row)")
    return bad


def lora_modules(adapter_dir):
    """The module names of a PEFT adapter directory's lora_A tensors."""
    t = safetensors_py.load(os.path.join(adapter_dir, "adapter_model.safetensors"))
    return sorted(k[len("base_model.model."):-len(".lora_A.weight")] for k in t if k.endswith(".lora_A.weight"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--twinkle", default="", help="the twinkle binary of every run (default BUILD/bin/twinkle; the CUDA "
                    "emulation's twin: BUILD/tests/twinkle_cuda_emu)")
    ap.add_argument("--norm-topk-prob", choices=["true", "false"], default="true")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--mlp-only-layers", default="1", help="comma list ('' = none)")
    ap.add_argument("--experts", type=int, default=6, help="num_experts (top-2)")
    ap.add_argument("--batch", default="rows:6")
    ap.add_argument("--mbs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=0, help="rows per global batch (0: all rows; --layout only)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--clip-grad", type=float, default=0.05)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--aux-coef", type=float, default=0.0)
    ap.add_argument("--aux-type", choices=["global", "per_layer"], default="global")
    ap.add_argument("--z-coef", type=float, default=0.0)
    ap.add_argument("--oracle", choices=["ref", "hf"], default="ref",
                    help="ref = tests/reference/qwen3_moe_ref.py, hf = tests/reference/hf_oracle.py (transformers' "
                         "Qwen3MoeForCausalLM with output_router_logits, torch's AdamW)")
    ap.add_argument("--param-tol", type=float, default=1e-5)
    ap.add_argument("--layout-tol", type=float, default=0.01,
                    help="LoRA layouts: bound on every adapter element's difference as a fraction of steps * lr")
    ap.add_argument("--np", type=int, default=1, help="ranks of the layout run (with --layout)")
    ap.add_argument("--bf16-rule", action="store_true",
                    help="--layout with --train-flags=--bf16: check_bf16.py's layout rule instead of the fp32 one "
                         "(step 1 loss within 1e-5 and grad norm within 2e-4, every loss within 2e-3; no "
                         "per-tensor parameter rule: the runs' fp32 sums flip single bf16 roundings, and AdamW "
                         "normalises those differences in near-zero gradients)")
    ap.add_argument("--layout", default="", help="twinkle train flags of a layout compared with one process")
    ap.add_argument("--packing", action="store_true",
                    help="--layout: both runs pack their rows (twinkle train --packing; the router statistics and "
                         "the aux loss are per micro-batch, so the one-process run packs too)")
    ap.add_argument("--packed-layout", action="store_true",
                    help="--layout: only the layout run packs; the one-process run keeps padded rows of the same "
                         "micro-batches, so a pad or a document boundary entering the router statistics, the token "
                         "counts or the attention shows as a difference")
    ap.add_argument("--rig-router", action="store_true",
                    help="every token picks experts 0 and 1 (the embedding's column 0 += 1, every router's rows 0 / 1 "
                         "read it with weights 1 / 0.5): the other experts, and whole ep ranks, get no row; their "
                         "gradients must be exactly 0 and expert_load_min 0")
    ap.add_argument("--train-flags", default="", help="twinkle train flags of both runs (e.g. --bf16)")
    ap.add_argument("--lora-r", type=int, default=0, help="train a LoRA adapter of this rank (0: full training)")
    ap.add_argument("--lora-alpha", type=float, default=8)
    ap.add_argument("--lora-targets", default="q_proj,k_proj,v_proj,o_proj,gate")
    ap.add_argument("--lora-rslora", action="store_true", help="use_rslora: scaling alpha / sqrt(r)")
    ap.add_argument("--lora-dropout", type=float, default=0.0,
                    help="lora_dropout (with --layout: the masks are keyed by token, so layouts must agree; vs "
                         "PyTorch: twinkle's masks are fed to the reference, one micro-batch per step)")
    args = ap.parse_args()
    if args.oracle == "hf" and (args.lora_r or args.layout):
        raise SystemExit("--oracle hf checks one process's full training (LoRA on experts and layouts: --oracle ref)")
    if args.lora_dropout and not args.layout:
        args.mbs = 0  # one micro-batch per step: the dumped masks are tagged <step>.0
    lora = ["--lora-r", str(args.lora_r), "--lora-alpha", str(args.lora_alpha), "--lora-targets", args.lora_targets,
            "--lora-init", "false"] + (["--lora-dropout", str(args.lora_dropout)] if args.lora_dropout else []) \
        + (["--lora-rslora"] if args.lora_rslora else []) if args.lora_r else []

    tmp = tempfile.mkdtemp(prefix="twinkle-check-moe-")
    try:
        model = os.path.join(tmp, "model")
        os.makedirs(model)
        only = [int(x) for x in args.mlp_only_layers.split(",") if x != ""]
        cfg = moe_config(args.norm_topk_prob == "true", only, args.layers, args.experts)
        cfg_path = os.path.join(model, "config.json")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)
        ref_py = os.path.join(HERE, "qwen3_moe_ref.py")
        run([sys.executable, ref_py, "init", "--config", cfg_path, "--seed", "0", "--out", model])
        if args.rig_router:
            rig_router(os.path.join(model, "model.safetensors"))
        ids, labels = ct.make_batch(args.batch, cfg["vocab_size"], 1234)
        args.mbs = args.mbs or len(ids)
        rows_path = os.path.join(tmp, "rows.jsonl")
        write_rows(rows_path, ids, labels)
        def twinkle_train(tag, np_, extra, env_extra=None):
            out = os.path.join(tmp, "out_" + tag)
            metrics = os.path.join(tmp, f"metrics_{tag}.jsonl")
            cmd = [args.twinkle or os.path.join(args.build, "bin", "twinkle"), "train", "--model", model, "--dataset", rows_path,
                   "--batch-size", str(args.batch_size or len(ids)), "--micro-batch-size", str(args.mbs), "--max-steps",
                   str(args.steps), "--lr", str(args.lr), "--weight-decay", str(args.weight_decay), "--clip-grad",
                   str(args.clip_grad), "--adam-beta1", "0.9", "--adam-beta2", "0.95", "--adam-eps", "1e-8",
                   "--output-dir", out, "--metrics-file", metrics, "--moe-aux-loss-coeff", str(args.aux_coef),
                   "--moe-aux-loss-type", args.aux_type, "--moe-z-loss-coeff", str(args.z_coef)] + lora + \
                  (["--packing"] if args.packing else []) + args.train_flags.split() + extra
            if np_ > 1:
                cmd = [os.path.join(args.build, "bin", "twinkle-run"), f"--nproc_per_node={np_}"] + cmd
            run(cmd, env=dict(os.environ, OMP_NUM_THREADS="1", **(env_extra or {})))
            return read_metrics(metrics), out

        if args.layout:
            base, base_out = twinkle_train("single", 1, [])
            lay, lay_out = twinkle_train("layout", args.np, args.layout.split() +
                                         (["--packing"] if args.packed_layout else []))
            failures = []
            if len(lay) != args.steps or len(base) != args.steps:
                failures.append(f"logged {len(lay)} / {len(base)} steps, expected {args.steps}")
            for i in range(min(len(lay), len(base))):
                a, b = lay[i], base[i]
                print(f"step {i+1}: loss layout {a['loss']:.8f} single {b['loss']:.8f} | grad_norm "
                      f"{a['grad_norm']:.8f} vs {b['grad_norm']:.8f} | aux {a.get('aux_loss')} vs {b.get('aux_loss')}")
                for key in ("loss", "grad_norm", "expert_grad_norm", "lm_loss", "aux_loss", "z_loss",
                            "expert_load_max", "expert_load_min"):
                    if key not in a or key not in b:
                        failures.append(f"step {i+1}: metrics lack {key}")
                    elif args.bf16_rule:
                        tol = {"loss": 1e-5 if i == 0 else 2e-3, "grad_norm": 2e-4 if i == 0 else None}.get(key)
                        if tol is not None and rel(a[key], b[key]) > tol:
                            failures.append(f"step {i+1}: {key} {a[key]} vs single {b[key]} (bf16 rule: {tol})")
                    elif rel(a[key], b[key]) > 1e-5 and abs(a[key] - b[key]) > 1e-12:
                        failures.append(f"step {i+1}: {key} {a[key]} vs single {b[key]}")
            if args.rig_router:
                failures += rigged_load_failures(lay, "layout") + rigged_load_failures(base, "single")
            # LoRA: every adapter element within layout_tol * steps * lr, as the dense LoRA layouts
            # (check_train.compare_params_strict); full training keeps the per-tensor rule.
            cmp = ct.compare_params_strict if args.lora_r else ct.compare_params
            if not args.bf16_rule:
                failures += cmp(ct.load_ckpt(lay_out), ct.load_ckpt(base_out), args)
            return harness.report(failures, limit=40)

        grads_path = os.path.join(tmp, "tw_grads0.safetensors")
        init_adapter = os.path.join(tmp, "init_adapter")
        masks = os.path.join(tmp, "masks")
        drop_env, drop = None, []
        if args.lora_dropout:  # twinkle's test hook writes every mask it draws (experts: their rows in token order)
            os.makedirs(masks)
            drop_env = {"TWINKLE_TEST_LORA_DROPOUT_DUMP": masks}
            drop = ["--dropout", str(args.lora_dropout), "--dropout-masks", masks]
        tw, tw_out = twinkle_train("single", 1, ["--dump-grads", grads_path] +
                                   (["--save-init-adapter", init_adapter] if args.lora_r else []), drop_env)
        if args.lora_dropout:
            failures_masks = ct.check_dropout_masks(args, masks)
            expert_masks = [f for f in os.listdir(masks) if ".mlp.experts." in f]
            print(f"dropout masks of expert modules: {len(expert_masks)}")
            if any(".mlp.experts." in m for m in lora_modules(tw_out)) and not expert_masks:
                failures_masks.append("expert LoRA pairs but no expert dropout mask was drawn")
        else:
            failures_masks = []
        # the same micro-batches as twinkle's split (rows in order, mbs per micro-batch)
        mbs = [{"input_ids": ids[i:i + args.mbs], "labels": labels[i:i + args.mbs]}
               for i in range(0, len(ids), args.mbs)]
        batch_json = os.path.join(tmp, "batch.json")
        with open(batch_json, "w") as f:
            json.dump({"micro_batches": mbs}, f)
        ref_out = os.path.join(tmp, "ref")
        if args.lora_r:  # float64 (the truth) and float32 (PyTorch's own rounding, held to the same bound)
            for dt in ("float32", "float64"):
                run([sys.executable, os.path.join(HERE, "lora_ref.py"), "step", "--model", model, "--adapter",
                     init_adapter, "--batch", batch_json, "--steps", str(args.steps), "--lr", str(args.lr),
                     "--weight-decay", str(args.weight_decay), "--beta1", "0.9", "--beta2", "0.95", "--eps", "1e-8",
                     "--clip-grad", str(args.clip_grad), "--out", ref_out + ("" if dt == "float64" else "_f32"),
                     "--dtype", dt, "--aux-coef", str(args.aux_coef), "--aux-type", args.aux_type, "--z-coef",
                     str(args.z_coef)] + drop)
        else:
            step_py = os.path.join(HERE, "hf_oracle.py") if args.oracle == "hf" else ref_py
            run([sys.executable, step_py, "step", "--model", model, "--batch", batch_json, "--steps",
                    str(args.steps), "--lr", str(args.lr), "--weight-decay", str(args.weight_decay), "--beta1", "0.9",
                    "--beta2", "0.95", "--eps", "1e-8", "--clip-grad", str(args.clip_grad), "--out", ref_out,
                    "--dtype", "float64", "--save-dtype", "F64", "--aux-coef", str(args.aux_coef), "--aux-type",
                    args.aux_type, "--z-coef", str(args.z_coef)])
        with open(os.path.join(ref_out, "metrics.json")) as f:
            ref = json.load(f)
        ref32 = None
        if args.lora_r:
            with open(os.path.join(ref_out + "_f32", "metrics.json")) as f:
                ref32 = json.load(f)
        failures = failures_masks
        if len(tw) != args.steps:
            failures.append(f"twinkle logged {len(tw)} steps, expected {args.steps}")
        for i in range(min(args.steps, len(tw))):
            print(f"step {i+1}: loss twinkle {tw[i]['loss']:.8f} torch-f64 {ref['loss'][i]:.8f} | grad_norm "
                  f"{tw[i]['grad_norm']:.8f} vs {ref['grad_norm'][i]:.8f} | aux {tw[i].get('aux_loss')} vs "
                  f"{ref['aux_loss'][i]:.8f}" + (f" | torch-f32 loss {ref32['loss'][i]:.8f} grad_norm "
                                                 f"{ref32['grad_norm'][i]:.8f}" if ref32 else ""))
            for key in ("loss", "grad_norm", "lm_loss", "aux_loss", "z_loss"):
                if key not in tw[i]:
                    failures.append(f"step {i+1}: twinkle's metrics lack {key}")
                elif rel(tw[i][key], ref[key][i]) > 1e-5 and abs(tw[i][key] - ref[key][i]) > 1e-12:
                    failures.append(f"step {i+1}: {key} {tw[i][key]} vs torch {ref[key][i]}")
            for key in () if args.lora_r else ("expert_load_max", "expert_load_min"):
                if key not in tw[i] or abs(tw[i][key] - ref[key][i]) > 1e-9:
                    failures.append(f"step {i+1}: {key} {tw[i].get(key)} vs torch {ref[key][i]}")
        g_tw = safetensors_py.load(grads_path)
        g_ref = safetensors_py.load(os.path.join(ref_out, "grads_step0.safetensors"))
        if args.rig_router:
            failures += rigged_load_failures(tw, "twinkle")
            idle = [k for k in g_tw if ".mlp.experts." in k and int(k.split(".mlp.experts.")[1].split(".")[0]) >= 2]
            nonzero = [k for k in idle if bool((g_tw[k] != 0).any())]
            print(f"rigged router: {len(idle)} gradients of experts without rows, {len(nonzero)} not exactly 0")
            if not idle:
                failures.append("rigged router: no gradient of an expert without rows was dumped")
            failures += [f"rigged router: {k}: gradient of an expert without rows is not exactly 0" for k in nonzero[:5]]
        if set(g_tw) != set(g_ref):
            failures.append(f"gradient names differ: only twinkle {sorted(set(g_tw) - set(g_ref))[:5]}, "
                            f"only torch {sorted(set(g_ref) - set(g_tw))[:5]}")
        failures += ct.compare_tensors("twinkle", g_tw, "torch", g_ref, 1e-4, "step-0 gradient")
        if args.lora_r and os.path.exists(os.path.join(tw_out, "model.safetensors")):
            failures.append("a LoRA save wrote model.safetensors (the base weights) instead of only the adapter")
        p_tw = ct.load_ckpt(tw_out)
        if args.lora_r:  # the adapter: the dense LoRA rule (check_train.compare_adapter_f64)
            with open(os.path.join(tw_out, "adapter_config.json")) as f:
                acfg = json.load(f)
            want = args.lora_alpha / (math.sqrt(args.lora_r) if args.lora_rslora else args.lora_r)
            got = acfg["lora_alpha"] / (math.sqrt(acfg["r"]) if acfg.get("use_rslora") else acfg["r"])
            if acfg.get("use_rslora", False) != args.lora_rslora or abs(got - want) > 1e-12:
                failures.append(f"adapter_config.json: use_rslora {acfg.get('use_rslora')}, scaling {got} (want {want})")
            failures += ct.compare_adapter_f64(p_tw, ref_out, ref_out + "_f32", args)
        else:
            failures += ct.compare_params(p_tw, safetensors_py.load(os.path.join(ref_out, "final.safetensors")), args)
        return harness.report(failures, limit=40)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
