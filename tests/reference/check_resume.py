#!/usr/bin/env python3
"""Checkpoints that resume: exact resume, resharding, crash safety, bad checkpoints.

Every check trains a tiny model with `twinkle train` (--save-interval 5 --save-optimizer, a cosine
schedule with warm-up, clipping active, shuffled rows over several epochs with a short last batch)
and compares against the uninterrupted run of the same flags:

  exact      10 steps uninterrupted (A) vs 5 steps (B) + a new process resuming B's
             checkpoint-step-5 for steps 6..10 (C), on --np ranks with --layout: losses, grad norms
             and lrs of steps 6..10 equal (bit for bit, as JSON doubles), and checkpoint-step-10 of A
             and C identical: fp32 weights, AdamW exp_avg / exp_avg_sq, HF weights, trainer_state.json,
             state.json. B's checkpoint-step-5 must equal A's; its exp_avg must not be all zero and
             its fp32 weights must equal the HF / PEFT weights saved beside them.
  --reshard  also resume B's checkpoint (saved on --layout) on other layouts, "NP:FLAGS,NP:FLAGS":
             losses of steps 6..10 within 1e-6 relative of A's, grad norms within 1e-5.
  crash      a rank SIGKILLed while writing checkpoint-step-10 (TWINKLE_FAULT_WRITE=kill:N): the job
             fails, checkpoint-step-5 and `latest` are untouched, no partial checkpoint-step-10
             exists, and resuming from the output dir gives A's steps 6..10 exactly; then a full
             filesystem (TWINKLE_FAULT_WRITE=enospc:N, writes fail with ENOSPC after N bytes) gives a
             clear error naming the file, and checkpoint-step-5 still resumes (with --keep-last 1,
             which then leaves only checkpoint-step-10).
  bad        corrupted copies of a checkpoint fail at load with a message naming the file and
             tensor or field: a missing optimizer file, a missing tensor, a truncated file, a bf16
             tensor, a tensor of another shape (a layout that cannot be mapped), a model-config
             mismatch, a changed schedule, LoRA state into a full model.
On a device: --twinkle names the binary and --layout carries --device cuda (the checkpoint is the same
format; the AdamW state comes down from the device to be saved and goes back up on resume).
Run with .venv/bin/python (scripts/setup).
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_train as ct  # noqa: E402
import harness  # noqa: E402
from harness import read_metrics, rel, run, run_any, write_rows  # noqa: E402
import check_train_moe as ctm  # noqa: E402
import safetensors_py  # noqa: E402
import sharded_ckpt_py  # noqa: E402

STATE_FILES = ["master_weights.safetensors", "exp_avg.safetensors", "exp_avg_sq.safetensors"]


class Runner:
    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp
        self.twinkle = args.twinkle or os.path.join(args.build, "bin", "twinkle")
        self.launcher = os.path.join(args.build, "bin", "twinkle-run")
        model = os.path.join(tmp, "model")
        if args.model == "moe":
            os.makedirs(model)
            cfg = ctm.moe_config(True, [int(x) for x in args.mlp_only_layers.split(",") if x != ""], 4)
            with open(os.path.join(model, "config.json"), "w") as f:
                json.dump(cfg, f, indent=2)
            run([sys.executable, os.path.join(HERE, "qwen3_moe_ref.py"), "init", "--config",
                    os.path.join(model, "config.json"), "--seed", "0", "--out", model])
        else:
            run([sys.executable, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp, "--variant", "a"])
            os.rename(os.path.join(tmp, "tiny_a"), model)
            cfg_path = os.path.join(model, "config.json")
            with open(cfg_path) as f:
                cfg = json.load(f)
            cfg["num_hidden_layers"] = cfg["max_window_layers"] = 4
            with open(cfg_path, "w") as f:
                json.dump(cfg, f, indent=2)
            run([sys.executable, os.path.join(HERE, "qwen3_ref.py"), "init", "--config", cfg_path, "--seed", "0",
                    "--out", model, "--norm-std", "0.1", "--bias-std", "0.02"])
        self.model, self.cfg = model, cfg
        ids, labels = ct.make_batch("rows:20", cfg["vocab_size"], 1234)
        self.rows = os.path.join(tmp, "rows.jsonl")
        write_rows(self.rows, ids, labels)
        # 20 rows, batch 8: 3 batches per epoch (the last one 4 rows), shuffled: 10 steps cross 3 epochs.
        self.common = ["--model", model, "--dataset", self.rows, "--batch-size", "8", "--lr", "1e-3",
                       "--lr-warmup-steps", "2", "--lr-decay-steps", "10", "--lr-decay-style", "cosine",
                       "--min-lr", "1e-4", "--weight-decay", "0.1", "--clip-grad", "0.05", "--adam-beta2", "0.95",
                       "--shuffle", "--seed", "7", "--save-interval", "5", "--save-optimizer",
                       "--save-format", args.save_format]
        if args.lora_r:
            self.common += ["--lora-r", str(args.lora_r), "--lora-alpha", "16", "--lora-init", "false",
                            "--lora-targets", args.lora_targets]

    def train(self, tag, np_, layout, steps, extra=(), env_extra=None, expect_ok=True):
        out = os.path.join(self.tmp, "out_" + tag)
        metrics = os.path.join(self.tmp, f"metrics_{tag}.jsonl")
        cmd = [self.twinkle, "train"] + self.common + ["--max-steps", str(steps), "--output-dir", out,
                                                      "--metrics-file", metrics, "--no-save"] + layout.split() + list(extra)
        if np_ > 1:
            cmd = [self.launcher, f"--nproc_per_node={np_}"] + cmd
        env = dict(os.environ, OMP_NUM_THREADS="1")
        env.update(env_extra or {})
        r = run_any(cmd, env)
        rc, text = r.returncode, r.stdout
        if expect_ok and rc != 0:
            print(text)
            raise SystemExit(f"{tag}: twinkle train failed with exit code {rc}")
        m = read_metrics(metrics) if os.path.exists(metrics) else []
        return m, out, rc, text


def state_tensors(ckpt):
    it = [d for d in os.listdir(ckpt) if d.startswith("iter_")]
    if len(it) != 1:
        raise SystemExit(f"{ckpt}: expected one iter_* directory, found {it}")
    i = os.path.join(ckpt, it[0])
    if sharded_ckpt_py.is_sharded(i):
        # the sharded form: every tensor reassembled from the ranks' slices, each element exactly once
        t, problems = sharded_ckpt_py.state_files(i)
        if problems:
            raise SystemExit(f"{i}: the sharded checkpoint does not cover its tensors exactly once: {problems[:5]}")
        return t, i
    return {f: safetensors_py.load(os.path.join(i, f)) for f in STATE_FILES}, i


def hf_weights(r, ckpt, lora):
    """The HF / PEFT weights of a checkpoint: the files beside the state (gathered form), or what
    `twinkle export --from-checkpoint` writes from the slices (sharded form)."""
    f = "adapter_model.safetensors" if lora else "model.safetensors"
    if os.path.exists(os.path.join(ckpt, f)):
        return os.path.join(ckpt, f)
    out = os.path.join(r.tmp, "export_" + re.sub(r"[^a-z0-9]", "_", ckpt[-40:]))
    run([r.twinkle, "export", "--from-checkpoint", ckpt, "-o", out], dict(os.environ, OMP_NUM_THREADS="1"))
    return os.path.join(out, f)


def same_checkpoint(a, b, what):
    """Bit-identical training state and weights of two checkpoint directories."""
    bad = []
    ta, ia = state_tensors(a)
    tb, ib = state_tensors(b)
    for f in STATE_FILES:
        if set(ta[f]) != set(tb[f]):
            bad.append(f"{what}: {f}: tensor names differ")
            continue
        for k in ta[f]:
            x, y = ta[f][k], tb[f][k]
            if x.dtype != y.dtype or x.shape != y.shape or not bool((x.view(-1).view(dtype=__import__('torch').int32) ==
                                                                       y.view(-1).view(dtype=__import__('torch').int32)).all()):
                diff = (x.double() - y.double()).abs().max().item() if x.shape == y.shape else float("nan")
                bad.append(f"{what}: {f}: {k} differs (max abs {diff:.3e})")
    for f in ("trainer_state.json",):
        if open(os.path.join(a, f)).read() != open(os.path.join(b, f)).read():
            bad.append(f"{what}: {f} differs")
    sa, sb = json.load(open(os.path.join(ia, "state.json"))), json.load(open(os.path.join(ib, "state.json")))
    for k in ("cur_step", "skipped_steps", "optimizer", "scheduler", "dataloader", "rng"):
        if sa.get(k) != sb.get(k):
            bad.append(f"{what}: state.json {k}: {sa.get(k)} vs {sb.get(k)}")
    wa = "adapter_model.safetensors" if os.path.exists(os.path.join(a, "adapter_model.safetensors")) else "model.safetensors"
    if os.path.exists(os.path.join(a, wa)) or os.path.exists(os.path.join(b, wa)):
        if open(os.path.join(a, wa), "rb").read() != open(os.path.join(b, wa), "rb").read():
            bad.append(f"{what}: {wa} differs")
    elif not sharded_ckpt_py.is_sharded(ia) or not sharded_ckpt_py.is_sharded(ib):
        bad.append(f"{what}: neither {wa} nor a sharded index")
    elif open(os.path.join(ia, "sharded_index.json")).read() != open(os.path.join(ib, "sharded_index.json")).read():
        bad.append(f"{what}: sharded_index.json differs (same layout, same slices expected)")
    return bad


def compare_metrics(got, want, steps, rel_loss, rel_gn, what):
    bad = []
    g = {m["step"]: m for m in got}
    w = {m["step"]: m for m in want}
    for s in steps:
        if s not in g:
            bad.append(f"{what}: step {s} missing (got steps {sorted(g)})")
            continue
        a, b = g[s], w[s]
        print(f"{what} step {s}: loss {a['loss']!r} vs {b['loss']!r} | grad_norm {a['grad_norm']!r} vs {b['grad_norm']!r} | lr {a['lr']!r} vs {b['lr']!r}")
        for key, tol in (("loss", rel_loss), ("grad_norm", rel_gn), ("lr", rel_loss)):
            if tol == 0:
                if a[key] != b[key]:
                    bad.append(f"{what}: step {s}: {key} {a[key]!r} != {b[key]!r}")
            elif rel(a[key], b[key]) > tol:
                bad.append(f"{what}: step {s}: {key} {a[key]!r} vs {b[key]!r} (rel {rel(a[key], b[key]):.2e} > {tol:g})")
    return bad


def check_exact(args, r):
    failures = []
    # --async-save: A's checkpoint-step-5 is written by the background threads while steps 6.. change the
    # weights; every file write of A sleeps (TWINKLE_FAULT_WRITE=delay:MS, io_util.cpp) so that the write
    # really overlaps them, and the comparison with B's (written at B's end) below then catches a save
    # that writes the live buffers instead of its copy of them
    slow = {"TWINKLE_FAULT_WRITE": "delay:20"} if "--async-save" in args.layout.split() else None
    A, outA, _, _ = r.train("full", args.np, args.layout, 10, env_extra=slow)
    B, outB, _, _ = r.train("part", args.np, args.layout, 5)
    ck5 = os.path.join(outB, "checkpoint-step-5")
    C, outC, _, textC = r.train("resumed", args.np, args.layout, 10, ["--resume", outB])
    if "resuming at step 5" not in textC:
        failures.append("the resumed run did not log 'resuming at step 5'")
    if [m["step"] for m in C] != [6, 7, 8, 9, 10]:
        failures.append(f"resumed run logged steps {[m['step'] for m in C]}, expected 6..10")
    failures += compare_metrics(B, A, range(1, 6), 0, 0, "first half")
    failures += compare_metrics(C, A, range(6, 11), 0, 0, "resumed")
    failures += same_checkpoint(os.path.join(outA, "checkpoint-step-5"), ck5, "checkpoint-step-5 (A vs B)")
    failures += same_checkpoint(os.path.join(outA, "checkpoint-step-10"), os.path.join(outC, "checkpoint-step-10")
                                if os.path.exists(os.path.join(outC, "checkpoint-step-10"))
                                else os.path.join(outB, "checkpoint-step-10"), "checkpoint-step-10 (A vs resumed)")
    with open(os.path.join(ck5, "trainer_state.json")) as f:
        ts = json.load(f)
    if ts != {"checkpoint_version": 1, "cur_step": 5, "consumed_train_samples": 36, "gradient_accumulation_steps": 1}:
        failures.append(f"trainer_state.json {ts}")
    if open(os.path.join(outB, "latest")).read().strip() != "checkpoint-step-5":
        failures.append("latest does not name checkpoint-step-5")
    st, _ = state_tensors(ck5)
    if all(float(t.abs().max()) == 0 for t in st["exp_avg.safetensors"].values()):
        failures.append("exp_avg is all zero: the optimizer state was not saved")
    # The saved fp32 weights are the trained ones: equal to the HF weights saved at the same step (f32 model).
    hf = safetensors_py.load(hf_weights(r, ck5, args.lora_r))
    for k, t in st["master_weights.safetensors"].items():
        hk = ("base_model.model." + k) if args.lora_r else k
        if hk not in hf or not bool((hf[hk].float() == t).all()):
            failures.append(f"master weight {k} differs from the HF/PEFT weights of the same checkpoint")
            break
    for spec in [s for s in args.reshard.split(",") if s]:
        np_, flags = spec.split(":", 1)
        tag = "reshard_" + re.sub(r"[^a-z0-9]", "", flags) + np_
        D, _, _, _ = r.train(tag, int(np_), flags, 10, ["--resume", ck5])
        failures += compare_metrics(D, A, range(6, 11), 1e-6, 1e-5, f"resharded to np {np_} '{flags}'")
    return failures


def check_crash(args, r):
    failures = []
    A, _, _, _ = r.train("full", args.np, args.layout, 10)
    out = os.path.join(r.tmp, "out_crash")
    B, out, _, _ = r.train("crash", args.np, args.layout, 5)
    ck5 = os.path.join(out, "checkpoint-step-5")
    # the bytes rank 0 writes for checkpoint-step-5 (sharded: all but the other ranks' shard files)
    size5 = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(ck5) for f in fs
                if not (f.startswith("shard-") and not f.startswith("shard-00000-")))
    # Kill the writer in the middle of checkpoint-step-10: after about half of its bytes.
    _, _, rc, text = r.train("crash", args.np, args.layout, 10, ["--resume", out],
                             {"TWINKLE_FAULT_WRITE": f"kill:{size5 // 2}"}, expect_ok=False)
    print(f"killed run: exit code {rc}")
    if rc == 0:
        failures.append("the run killed while writing its checkpoint exited 0")
    if os.path.exists(os.path.join(out, "checkpoint-step-10")):
        failures.append("a checkpoint-step-10 directory exists after the writer was killed mid-write")
    if not any(n.startswith(".checkpoint-step-10.tmp.") for n in os.listdir(out)):
        failures.append(f"no staging directory of checkpoint-step-10 was left: the kill did not hit the write ({os.listdir(out)})")
    if open(os.path.join(out, "latest")).read().strip() != "checkpoint-step-5":
        failures.append("latest no longer names checkpoint-step-5")
    C, _, _, _ = r.train("crash", args.np, args.layout, 10, ["--resume", out])
    failures += compare_metrics(C, A, range(6, 11), 0, 0, "resumed after the killed save")
    # A full filesystem while writing checkpoint-step-10: a clear error, checkpoint-step-5 kept.
    shutil.rmtree(os.path.join(out, "checkpoint-step-10"))
    with open(os.path.join(out, "latest"), "w") as f:
        f.write("checkpoint-step-5\n")
    _, _, rc, text = r.train("crash", args.np, args.layout, 10, ["--resume", out],
                             {"TWINKLE_FAULT_WRITE": f"enospc:{size5 // 3}"}, expect_ok=False)
    m = re.search(r".*checkpoint .*checkpoint-step-10 was not written \(earlier checkpoints are untouched\).*No space left on device.*", text)
    print("full filesystem:", m.group(0) if m else text[-2000:])
    if rc == 0 or not m or ".safetensors" not in m.group(0) and ".json" not in m.group(0):
        failures.append("a full filesystem did not fail with an error naming the file and 'No space left on device'")
    if os.path.exists(os.path.join(out, "checkpoint-step-10")) or any(n.startswith(".checkpoint-step-10") for n in os.listdir(out)):
        failures.append(f"the failed save left {os.listdir(out)}")
    D, _, _, _ = r.train("crash", args.np, args.layout, 10, ["--resume", out, "--keep-last", "1"])
    failures += compare_metrics(D, A, range(6, 11), 0, 0, "resumed after the failed save")
    # --keep-last 1: checkpoint-step-5 pruned after checkpoint-step-10 was committed, latest names 10.
    left = sorted(os.listdir(out))
    print("after --keep-last 1:", left)
    if left != ["checkpoint-step-10", "latest"] or open(os.path.join(out, "latest")).read().strip() != "checkpoint-step-10":
        failures.append(f"--keep-last 1 left {left}")
    return failures


def check_bad(args, r):
    failures = []
    B, outB, _, _ = r.train("part", 1, "", 5)
    ck5 = os.path.join(outB, "checkpoint-step-5")
    it = os.path.join(ck5, "iter_0000005")
    master = safetensors_py.load(os.path.join(it, "master_weights.safetensors"))
    some = sorted(master)[len(master) // 2]

    def case(name, mutate, patterns, extra=(), common_replace=None):
        d = os.path.join(r.tmp, "bad_" + name)
        shutil.copytree(ck5, d)
        mutate(d, os.path.join(d, "iter_0000005"))
        saved = list(r.common)
        if common_replace:
            r.common = [common_replace.get(x, x) for x in r.common]
        _, _, rc, text = r.train("bad_" + name, 1, "", 10, ["--resume", d] + list(extra), expect_ok=False)
        r.common = saved
        err = [l for l in text.splitlines() if "resume" in l.lower() or "error" in l.lower()]
        print(f"[{name}] exit {rc}: {err[-1] if err else text[-500:]}")
        if rc == 0:
            failures.append(f"{name}: loading the bad checkpoint succeeded")
        for p in patterns:
            if not re.search(p, text):
                failures.append(f"{name}: the error does not match /{p}/")

    def drop_file(d, i):
        os.remove(os.path.join(i, "exp_avg_sq.safetensors"))
    case("missing_optimizer_file", drop_file, [r"exp_avg_sq\.safetensors is missing"])

    def drop_tensor(d, i):
        p = os.path.join(i, "exp_avg.safetensors")
        t = safetensors_py.load(p)
        del t[some]
        safetensors_py.save(p, t)
    case("missing_tensor", drop_tensor, [r"exp_avg\.safetensors has no tensor '" + re.escape(some) + "'"])

    def truncate(d, i):
        p = os.path.join(i, "master_weights.safetensors")
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) - 100)
    case("truncated_file", truncate, [r"master_weights\.safetensors.*(tensor '|data buffer|file is)"])

    def bf16(d, i):
        p = os.path.join(i, "exp_avg.safetensors")
        t = safetensors_py.load(p)
        safetensors_py.save(p, {k: v.bfloat16() if k == some else v for k, v in t.items()})
    case("bf16_state", bf16, [r"exp_avg\.safetensors: tensor '" + re.escape(some) + "' is BF16"])

    def reshape(d, i):
        import torch
        p = os.path.join(i, "exp_avg_sq.safetensors")
        t = safetensors_py.load(p)
        t[some] = torch.zeros(t[some].numel() + 2)
        safetensors_py.save(p, t)
    case("unmappable_shape", reshape, [r"exp_avg_sq\.safetensors: tensor '" + re.escape(some) + "' has shape"])

    def config(d, i):
        p = os.path.join(i, "state.json")
        s = json.load(open(p))
        s["model_config"]["hidden_size"] = s["model_config"]["hidden_size"] * 2
        json.dump(s, open(p, "w"))
    case("config_mismatch", config, [r"state\.json: model config field 'hidden_size'"])

    case("schedule_changed", lambda d, i: None, [r"state\.json: scheduler field 'lr_decay_steps' is 10 .* 12"],
         common_replace={"10": "12"})

    if not args.lora_r:
        case("lora_into_full", lambda d, i: None, [r"state\.json was saved by full training, but this model has LoRA"],
             ["--lora-r", "2"])
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--mode", choices=["exact", "crash", "bad"], default="exact")
    ap.add_argument("--twinkle", default=None,
                    help="the twinkle binary (default build/bin/twinkle; the emulated device: build/tests/twinkle_cuda_emu "
                         "with --layout '... --device cuda')")
    ap.add_argument("--model", choices=["dense", "moe"], default="dense")
    ap.add_argument("--np", type=int, default=1)
    ap.add_argument("--layout", default="")
    ap.add_argument("--mlp-only-layers", default="1",
                    help="--model moe: the dense layers of the 4 (comma list; '0,1' puts pp2's first stage on dense layers)")
    ap.add_argument("--lora-r", type=int, default=0)
    ap.add_argument("--lora-targets", default="all-linear")
    ap.add_argument("--reshard", default="", help="'NP:FLAGS,NP:FLAGS' layouts that resume the checkpoint")
    ap.add_argument("--save-format", choices=["gathered", "sharded"], default="gathered",
                    help="the checkpoints' --save-format (gathered: the form every resume test before the sharded "
                         "one was written for; bad mode: gathered only)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="twinkle-resume-")
    try:
        r = Runner(args, tmp)
        failures = {"exact": check_exact, "crash": check_crash, "bad": check_bad}[args.mode](args, r)
        ok = (f"resume check OK ({args.mode}, {args.model}{', lora' if args.lora_r else ''}, np {args.np} '{args.layout}'"
              f", {args.save_format})")
        return harness.report(failures, ok=ok)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
