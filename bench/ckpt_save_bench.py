#!/usr/bin/env python3
"""Checkpoint save: sharded vs gathered (bench/README.md, "Checkpoint save").

Trains one step of a model with Qwen3-0.6B's configuration (bench/qwen3-0.6b/config.json) cut to
--layers decoder layers (seeded init, no weights read) on a 4-rank layout (--layout, default tp2 dp2),
then saves checkpoint-step-1 with --save-optimizer in each --save-format. `twinkle train` with
TWINKLE_SAVE_STATS=1 reports, per rank, the save's wall time, its RSS just before the save and its
peak RSS during the save (VmHWM after resetting it with /proc/self/clear_refs "5" right before the
save: the kernel's high-water mark of that interval). Also times `twinkle export --from-checkpoint`
of the sharded checkpoint (its peak RSS from /usr/bin/time's maximum resident set size when present),
and (--async-steps) the blocking part of an --async-save save and the step that overlaps its write.

    .venv/bin/python bench/ckpt_save_bench.py --build build [--layers 4] [--layout "--tp 2 --dp 2"]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import harness  # noqa: E402


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(p, f)) for p, _, fs in os.walk(d) for f in fs)


def async_bench(a, tmp, model, rows, twinkle, launcher):
    """--async-save vs a synchronous sharded save: --max-steps N with --save-interval N - 1, so the one
    save lands after step N - 1 and step N runs while an asynchronous write is in flight; rank 0's save
    call, its wait at the end of the run, and every step's time (metrics.jsonl step_time_s)."""
    res = {}
    n = a.async_steps
    for mode in ("sync", "async"):
        out = os.path.join(tmp, "out_" + mode)
        shutil.rmtree(out, ignore_errors=True)
        metrics = os.path.join(tmp, f"metrics_{mode}.jsonl")
        cmd = [launcher, f"--nproc_per_node={a.np}", twinkle, "train", "--model", model, "--dataset", rows,
               "--batch-size", str(a.rows), "--max-steps", str(n), "--save-interval", str(n - 1), "--save-optimizer",
               "--no-save", "--output-dir", out, "--metrics-file", metrics] + a.layout.split() + \
              (["--async-save"] if mode == "async" else [])
        p = subprocess.run(cmd, env=dict(os.environ, TWINKLE_SAVE_STATS="1", OMP_NUM_THREADS="1"),
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stdout[-3000:], p.stderr[-3000:])
            raise SystemExit(f"{mode}: twinkle train failed ({p.returncode})")
        text = p.stderr + p.stdout
        m0 = re.search(r"save stats: rank 0 format \S+ wall ([0-9.]+) s", text)
        w0 = re.search(r"save stats: rank 0 waited ([0-9.]+) s at the end", text)
        steps = harness.read_metrics(metrics)
        res[mode] = (float(m0.group(1)), float(w0.group(1)) if w0 else 0.0,
                     [s.get("step_time_s") for s in steps])
    print(f"async: {n} steps, the save after step {n - 1} (rank 0)")
    print("| save | save call (s) | wait at the end (s) | step times (s) |")
    print("|---|---|---|---|")
    for mode, (call, wait, st) in res.items():
        print(f"| {mode} | {call:.2f} | {wait:.2f} | {', '.join(f'{x:.2f}' for x in st if x is not None)} |")
    sync_call = res["sync"][0]
    a_call, a_wait, a_steps = res["async"]
    extra = (a_steps[-1] or 0) - (res["sync"][2][-1] or 0)
    hidden = 1 - (a_call + a_wait + max(0.0, extra)) / sync_call if sync_call > 0 else 0
    print(f"hidden: {100 * hidden:.0f} % of the synchronous save's {sync_call:.2f} s "
          f"(async call {a_call:.2f} s + end wait {a_wait:.2f} s + the overlapped step's extra {extra:+.2f} s)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--layout", default="--tp 2 --dp 2")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--keep", default="", help="keep the output directories here")
    ap.add_argument("--async-steps", type=int, default=3,
                    help="also compare --async-save with a synchronous sharded save over this many steps (0: skip)")
    a = ap.parse_args()
    tmp = a.keep or tempfile.mkdtemp(prefix="twinkle-ckpt-bench-")
    os.makedirs(tmp, exist_ok=True)
    try:
        model = os.path.join(tmp, "model")
        os.makedirs(model, exist_ok=True)
        cfg = json.load(open(os.path.join(HERE, "qwen3-0.6b", "config.json")))
        cfg["num_hidden_layers"] = cfg["max_window_layers"] = a.layers
        json.dump(cfg, open(os.path.join(model, "config.json"), "w"), indent=2)
        ids, labels = [], []
        import random
        rnd = random.Random(0)
        for _ in range(a.rows):
            n = 32
            ids.append([rnd.randrange(cfg["vocab_size"]) for _ in range(n)])
            labels.append([-100] * (n // 2) + ids[-1][n // 2:])
        rows = os.path.join(tmp, "rows.jsonl")
        harness.write_rows(rows, ids, labels)
        twinkle = os.path.join(a.build, "bin", "twinkle")
        launcher = os.path.join(a.build, "bin", "twinkle-run")
        params = None
        results = {}
        for fmt in ("sharded", "gathered"):
            out = os.path.join(tmp, "out_" + fmt)
            shutil.rmtree(out, ignore_errors=True)
            cmd = [launcher, f"--nproc_per_node={a.np}", twinkle, "train", "--model", model, "--dataset", rows,
                   "--batch-size", str(a.rows), "--max-steps", "1", "--save-interval", "1", "--save-optimizer",
                   "--save-format", fmt, "--no-save", "--output-dir", out] + a.layout.split()
            env = dict(os.environ, TWINKLE_SAVE_STATS="1", OMP_NUM_THREADS="1")
            t0 = time.time()
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if p.returncode != 0:
                print(p.stdout[-3000:], p.stderr[-3000:])
                raise SystemExit(f"{fmt}: twinkle train failed ({p.returncode})")
            stats = {}
            for m in re.finditer(r"save stats: rank (\d+) format \S+ wall ([0-9.]+) s RSS before\s+(\d+) kB "
                                 r"peak RSS during save\s+(\d+) kB", p.stderr + p.stdout):
                stats[int(m.group(1))] = (float(m.group(2)), int(m.group(3)) / 1024, int(m.group(4)) / 1024)
            mp = re.search(r"parameters[^0-9]*([0-9,]+)", p.stdout + p.stderr)
            if mp and params is None:
                params = mp.group(1)
            results[fmt] = (stats, dir_bytes(os.path.join(out, "checkpoint-step-1")), time.time() - t0)
        print(f"model: Qwen3-0.6B config, {a.layers} layers; {a.np} ranks '{a.layout}'")
        print("| format | rank | save wall (s) | RSS before save (MiB) | peak RSS during save (MiB) | peak / before |")
        print("|---|---|---|---|---|---|")
        for fmt, (stats, size, _) in results.items():
            for rk in sorted(stats):
                w, before, peak = stats[rk]
                print(f"| {fmt} | {rk} | {w:.2f} | {before:.0f} | {peak:.0f} | {peak / before:.2f} |")
        for fmt, (stats, size, _) in results.items():
            print(f"{fmt}: checkpoint-step-1 {size / 2**20:.1f} MiB")
        if a.async_steps:
            async_bench(a, tmp, model, rows, twinkle, launcher)
        ck = os.path.join(tmp, "out_sharded", "checkpoint-step-1")
        exp = os.path.join(tmp, "export")
        tv = ["/usr/bin/time", "-v"] if os.path.exists("/usr/bin/time") else []
        t0 = time.time()
        p = subprocess.run(tv + [twinkle, "export", "--from-checkpoint", ck, "-o", exp], capture_output=True, text=True,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        dt = time.time() - t0
        if p.returncode != 0:
            raise SystemExit("export failed: " + p.stderr[-2000:])
        mr = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
        print(f"export --from-checkpoint: {dt:.2f} s, {dir_bytes(exp) / 2**20:.1f} MiB written"
              + (f", peak RSS {int(mr.group(1)) / 1024:.0f} MiB" if mr else ""))
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
