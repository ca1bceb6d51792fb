#!/usr/bin/env python3
"""`twinkle plan` against the measured peak RSS: for each case, run the planner, then
the real thing, and require the planned per-rank peak to be within 15 % of the measured peak RSS
of every rank over the training steps (VmHWM reset after the model is built: the plan is the
training step's memory, not the transient buffers of the seeded init).

Cases: bench/train_bench configs a, b and w (one process; a with recompute none, b with none and
full), the same with mixed precision bf16 (`twinkle plan --bf16` against `train_bench --bf16`: a
with recompute none, b with full), a pipelined data-parallel layout of bench/layout_bench (pp2
dp2, "small" config, fixed 512-token rows, full recompute) and an expert-tensor-parallel
Qwen3-MoE layout (layout_bench's "moe_wide", 16 experts of width 512 holding most of
the memory, dp4 x etp2, so edp = world / (etp·ep·pp) = 2: each expert's gate/up rows and down
columns halved over etp and its AdamW state ZeRO-sharded over the 2 edp ranks), both under
mpirun. The model configs are written here from the figures of bench/train_bench.cpp and
bench/layout_bench.cpp, not read from twinkle.

bf16 must be planned, not only near fp32: the saving of bf16 over fp32 on config a (recompute
none; the bf16 lm head's half-size logits chunk, ~300 MiB there) as planned must be within 30 %
of the saving measured between the two runs, so a plan that ignored --bf16 (saving 0) fails, as
does one that models a bf16 change (bf16 saved activations, a resident bf16 weight copy) the
kernels do not have, or misses one they gained.

Config w (16 heads of 128 over hidden 128, one row of 2048 tokens, full recompute) makes the
attention buffers a large share of the peak: with bf16 the attention backward's packed bf16 operands
are ~20 % of it, so a plan that leaves them out misses the band (measured by removing the term:
-21 %), which configs a and b (< 1 % there) cannot see.

For the layouts, layout_bench also prints each rank's parameter elements (flat buffer: dense
region + expert region) and AdamW state elements (its ZeRO shards); the plan's param_numel +
expert_numel and state_numel must equal them exactly (one case per rank). An etp-blind plan
(experts at full width, or edp = tp·cp·dp/ep) misses those counts and, on the MoE case, the 15 %
peak band as well.

The asynchronous save (`twinkle plan --async-save`, case "async"): `twinkle train --report-memory` on
dp 2 (config "small", 512-token rows, one micro-batch per replica) for 3 steps, once without a save
and once with `--save-interval 2 --save-optimizer --async-save`, so step 3 runs while the save's
staging copy of each rank's slices is held. Each run's planned peak (without / with --async-save)
must be within 15 % of every rank's measured peak; the planned staging item within 30 % of the
measured difference between the two runs (so a plan that ignores --async-save fails); and the
staging item, an upper bound (it includes the ZeRO-1 range's alignment padding), at least the
tensor bytes of each rank's shard file of that save and at most 2 % above the largest.

Usage: check_plan.py --build BUILD_DIR [--mpirun MPIRUN] [--only a|b|w|layout|moe|layout_vpp|async]
Prints "check_plan: N cases pass" and exits 0, else names each miss and exits 1."""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

TOL = 0.15
SAVING_TOL = 0.30  # bf16-over-fp32 saving, planned vs measured
BASE = dict(model_type="qwen3", rope_theta=1e6, rms_norm_eps=1e-6, attention_bias=False)
CONFIGS = {
    "a": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, head_dim=32,
              intermediate_size=768, vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=4096),
    "b": dict(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8, head_dim=64,
              intermediate_size=2816, vocab_size=32000, tie_word_embeddings=True, max_position_embeddings=4096),
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, head_dim=32,
                  intermediate_size=768, vocab_size=32000, tie_word_embeddings=True, max_position_embeddings=1024),
    "moe_wide": dict(model_type="qwen3_moe", hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
                     num_key_value_heads=4, head_dim=32, intermediate_size=768, vocab_size=4096,
                     tie_word_embeddings=False, max_position_embeddings=1024, num_experts=16, num_experts_per_tok=2,
                     moe_intermediate_size=512, norm_topk_prob=True, mlp_only_layers=[1], decoder_sparse_step=1),
    "w": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=16, num_key_value_heads=16, head_dim=128,
              intermediate_size=256, vocab_size=2048, tie_word_embeddings=True, max_position_embeddings=4096),
}
# layout_bench and plan flags of the multi-rank cases: (name, config, layout, ranks)
LAYOUTS = [("layout", "small", "--tp 1 --pp 2 --dp 2", 4), ("moe", "moe_wide", "--dp 4 --etp 2", 4),
           ("layout_vpp", "small", "--tp 1 --pp 2 --dp 2 --vpp 2", 4)]
BENCH = {"a": (4, 512), "b": (2, 512), "w": (1, 2048)}  # train_bench: rows, tokens per row (one micro-batch)


def write_config(tmp, name):
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(BASE, **CONFIGS[name]), f)
    return d


def plan(build, model, flags):
    cmd = [os.path.join(build, "bin", "twinkle"), "plan", "--model", model, "--json"] + flags
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare(name, planned, measured, misses):
    err = planned / measured - 1
    ok = abs(err) <= TOL
    print(f"{name}: planned {planned / 2**20:.1f} MiB, measured {measured / 2**20:.1f} MiB ({err:+.1%})"
          f"{'' if ok else '  <-- MISS'}")
    if not ok:
        misses.append(name)


def safetensors_data_bytes(path):
    """Bytes of a safetensors file's tensors (the file less its 8-byte length and JSON header)."""
    with open(path, 'rb') as f:
        (n,) = struct.unpack('<Q', f.read(8))
    return os.path.getsize(path) - 8 - n


def async_save_case(a, tmp, misses):
    """The "async" case (module docstring); returns the number of cases checked."""
    cfg, np_, seq = "small", 2, 512
    model = write_config(tmp, cfg)
    rows = os.path.join(tmp, "rows.jsonl")
    import random
    rnd = random.Random(0)
    with open(rows, "w") as f:
        for _ in range(8):
            ids = [rnd.randrange(CONFIGS[cfg]["vocab_size"]) for _ in range(seq)]
            f.write(json.dumps({"input_ids": ids, "labels": ids}) + "\n")
    flags = ["--dp", str(np_), "--micro-batch-size", "1", "--seq-length", str(seq), "--global-batch-size", str(np_),
             "--recompute", "full"]
    planned = {mode: plan(a.build, model, flags + (["--async-save"] if mode == "async" else []))
               for mode in ("none", "async")}
    measured, n = {}, 0
    for mode in ("none", "async"):
        out = os.path.join(tmp, "out_" + mode)
        cmd = [a.mpirun, "-np", str(np_), "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "--mca",
               "mpi_yield_when_idle", "1", "-x", "OMP_NUM_THREADS=1", "-x", "MALLOC_MMAP_MAX_=0", "-x",
               "MALLOC_TRIM_THRESHOLD_=68719476736",  # what twinkle-run sets for every job
               os.path.join(a.build, "bin", "twinkle"), "train", "--model", model, "--dataset", rows,
               "--batch-size", str(np_), "--micro-batch-size", "1", "--max-steps", "3", "--dp", str(np_),
               "--recompute-granularity", "full", "--report-memory", "--no-save", "--output-dir", out]
        if mode == "async":
            cmd += ["--save-interval", "2", "--save-optimizer", "--async-save"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            print(r.stdout[-3000:])
            raise SystemExit(f"FAILED: twinkle train ({mode}) exited {r.returncode}")
        got = {int(k): float(v) * 2**20 for k, v in re.findall(r"memory: rank (\d+) .*step peak RSS ([0-9.]+) MiB",
                                                                 r.stdout)}
        if len(got) != np_:
            print(r.stdout[-3000:])
            raise SystemExit(f"FAILED: expected {np_} memory lines from twinkle train ({mode})")
        measured[mode] = got
        for rank, rss in sorted(got.items()):
            compare(f"twinkle train {cfg} dp{np_} {'--async-save' if mode == 'async' else 'no save'} rank {rank}",
                    planned[mode]["stages"][0]["peak"], rss, misses)
            n += 1
    staging = planned["async"]["stages"][0]["save_staging"]
    if planned["none"]["stages"][0]["save_staging"] != 0:
        misses.append("save_staging without --async-save")
    for rank in sorted(measured["async"]):
        diff = measured["async"][rank] - measured["none"][rank]
        ok = diff > 0 and abs(staging - diff) <= SAVING_TOL * diff
        print(f"async save staging, rank {rank}: planned {staging / 2**20:.1f} MiB, measured {diff / 2**20:.1f} MiB "
              f"(peak with --async-save less the peak without a save){'' if ok else '  <-- MISS (within 30 % required)'}")
        if not ok:
            misses.append(f"async save staging rank {rank}")
        n += 1
    it = os.path.join(tmp, "out_async", "checkpoint-step-2", "iter_0000002")
    files = [os.path.join(it, f"shard-{r:05d}-of-{np_:05d}.safetensors") for r in range(np_)]
    sizes = [safetensors_data_bytes(f) for f in files]
    ok = all(staging >= b for b in sizes) and staging <= 1.02 * max(sizes)
    print(f"async save staging {staging:.0f} bytes vs the ranks' shard files' tensor bytes {sizes}"
          f"{'' if ok else '  <-- MISS (>= each, <= 1.02 x the largest required)'}")
    if not ok:
        misses.append("async save staging vs shard files")
    return n + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    misses, n = [], 0
    env = dict(os.environ, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory(prefix="twinkle-plan-") as tmp:
        got = {}  # (cfg, recompute, precision) -> (planned, measured)
        for cfg, rc, prec in (("a", "none", "fp32"), ("a", "none", "bf16"), ("b", "none", "fp32"),
                              ("b", "full", "fp32"), ("b", "full", "bf16"), ("w", "full", "fp32"),
                              ("w", "full", "bf16")):
            if a.only and a.only != cfg:
                continue
            rows, seq = BENCH[cfg]
            p = plan(a.build, write_config(tmp, cfg),
                     ["--micro-batch-size", str(rows), "--seq-length", str(seq), "--recompute", rc, "--" + prec])
            if p.get("mixed_precision") != prec:
                print(f"FAILED: twinkle plan --{prec} reports mixed_precision {p.get('mixed_precision')!r}")
                return 1
            r = subprocess.run([os.path.join(a.build, "bench", "train_bench"), "--config", cfg, "--threads", "1",
                                "--steps", "1", "--warmup", "0", "--recompute", rc, "--" + prec],
                               check=True, stdout=subprocess.PIPE, text=True, env=env)
            m = json.loads(r.stdout.strip().splitlines()[-1])
            if m.get("precision") != prec:
                print(f"FAILED: train_bench --{prec} ran {m.get('precision')!r}")
                return 1
            compare(f"train_bench {cfg} recompute {rc} {prec}", p["peak_bytes"], m["step_peak_rss_bytes"], misses)
            got[(cfg, rc, prec)] = (p["peak_bytes"], m["step_peak_rss_bytes"])
            n += 1
        if ("a", "none", "bf16") in got:
            (pf, mf), (pb, mb) = got[("a", "none", "fp32")], got[("a", "none", "bf16")]
            planned, measured = pf - pb, mf - mb
            ok = measured > 0 and abs(planned - measured) <= SAVING_TOL * measured
            print(f"bf16 saving on train_bench a: planned {planned / 2**20:.1f} MiB, measured {measured / 2**20:.1f} MiB"
                  f"{'' if ok else '  <-- MISS (within 30 % required)'}")
            if not ok:
                misses.append("bf16 saving a")
            n += 1
        for case, cfg, layout, np_ in LAYOUTS:
            if a.only and a.only != case:
                continue
            lay = layout.split()
            p = plan(a.build, write_config(tmp, cfg),
                     lay + ["--micro-batch-size", "1", "--seq-length", "512", "--global-batch-size", "8",
                            "--recompute", "full"])
            cmd = [a.mpirun, "-np", str(np_), "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "--mca",
                   "mpi_yield_when_idle", "1", "-x", "OMP_NUM_THREADS=1", "-x", "MALLOC_MMAP_MAX_=0", "-x",
                   "MALLOC_TRIM_THRESHOLD_=68719476736",  # what twinkle-run sets for every job
                   os.path.join(a.build, "bench", "layout_bench")] + lay + [
                       "--config", cfg, "--rows", "8", "--mbs", "1", "--seq", "512", "--steps", "1", "--no-baseline",
                       "--recompute", "full"]
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
            ranks = re.findall(r"rank (\d+) \(tp (\d+) pp (\d+) (?:cp \d+ )?dp \d+[^)]*\).*step peak RSS ([0-9.]+) MiB.*"
                               r"params (\d+) elements \(expert region (\d+)\), AdamW state (\d+) elements", out)
            if len(ranks) != np_:
                print(out)
                print(f"FAILED: expected {np_} rank lines from layout_bench")
                return 1
            for rank, tp, pp, rss, params, experts, state in ranks:
                st = p["stages"][int(pp)]
                name = f"layout_bench {cfg} {layout} rank {rank} (stage {pp})"
                compare(name, st["peak"], float(rss) * 2**20, misses)
                n += 1
                want = (int(params), int(experts), int(state))
                plan_counts = (st["param_numel"] + st["expert_numel"], st["expert_numel"], st["state_numel"])
                ok = want == plan_counts
                print(f"{name}: planned params {plan_counts[0]} (experts {plan_counts[1]}), AdamW state "
                      f"{plan_counts[2]}; measured {want[0]} ({want[1]}), {want[2]}{'' if ok else '  <-- MISS'}")
                if not ok:
                    misses.append(name + " counts")
                n += 1
        if not a.only or a.only == "async":
            n += async_save_case(a, tmp, misses)
    if misses:
        print(f"check_plan: {len(misses)} of {n} cases miss: {', '.join(misses)}")
        return 1
    print("(peaks within 15 %, bf16 saving within 30 %, layout ranks' parameter and AdamW-state counts exact)")
    print(f"check_plan: {n} cases pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
