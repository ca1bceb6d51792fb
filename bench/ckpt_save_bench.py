#!/usr/bin/env python3
"""Checkpoint save: sharded vs gathered (bench/README.md, "Checkpoint save").

Trains one step of a model with Qwen3-0.6B's configuration (bench/qwen3-0.6b/config.json) cut to
--layers decoder layers (seeded init, no weights read) on a 4-rank layout (--layout, default tp2 dp2),
then saves checkpoint-step-1 with --save-optimizer in each --save-format. `twinkle train` with
TWINKLE_SAVE_STATS=1 reports, per rank, the save's wall time, its RSS just before the save and its
peak RSS during the save (VmHWM after resetting it with /proc/self/clear_refs "5" right before the
save: the kernel's high-water mark of that interval). Also times `twinkle export --from-checkpoint`
of the sharded checkpoint (its peak RSS from /usr/bin/time's maximum resident set size when present),
and (--async-overlap K) the blocking part of an --async-save save and the K steps that overlap its write
(--writer-priority normal,nice,idle: the writer thread's priority, TWINKLE_ASYNC_WRITER_PRIORITY).

    .venv/bin/python bench/ckpt_save_bench.py --build build [--layers 4] [--layout "--tp 2 --dp 2"]
    .venv/bin/python bench/ckpt_save_bench.py --build build --np 1 --layout "" --skip-formats \
        --async-overlap 3 --writer-priority normal,idle      # one rank: a core left for the writer
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
    """--async-save vs a synchronous sharded save: saves after steps S = K + 1 and 2S (--save-interval S), the
    K = --async-overlap steps after the second running while its asynchronous write is in flight (--max-steps
    2S + K); the first asynchronous save faults its staging buffer in, the second reuses it (the steady state,
    reported). Per mode (sync, then async with each --writer-priority): rank 0's second save call (and its
    first), the shard file's write time (the writer thread's, TWINKLE_SAVE_STATS), its wait at the end of the
    run, and the step times; a step's extra time is its excess over the median of steps 2..S of the same run
    (before any save)."""
    res = {}
    k = a.async_overlap
    s_at, n = k + 1, 2 * (k + 1) + k
    modes = [("sync", "")] + [("async", p) for p in a.writer_priority.split(",")]
    for mode, prio in modes:
        tag = mode + ("_" + prio if prio else "")
        out = os.path.join(tmp, "out_" + tag)
        shutil.rmtree(out, ignore_errors=True)
        metrics = os.path.join(tmp, f"metrics_{tag}.jsonl")
        cmd = [launcher, f"--nproc_per_node={a.np}", twinkle, "train", "--model", model, "--dataset", rows,
               "--batch-size", str(a.rows), "--max-steps", str(n), "--save-interval", str(s_at), "--save-optimizer",
               "--no-save", "--output-dir", out, "--metrics-file", metrics] + a.layout.split() + \
              (["--async-save"] if mode == "async" else [])
        env = dict(os.environ, TWINKLE_SAVE_STATS="1", OMP_NUM_THREADS=str(a.threads))
        if prio:
            env["TWINKLE_ASYNC_WRITER_PRIORITY"] = prio
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stdout[-3000:], p.stderr[-3000:])
            raise SystemExit(f"{tag}: twinkle train failed ({p.returncode})")
        text = p.stderr + p.stdout
        calls = [float(x) for x in re.findall(r"save stats: rank 0 format \S+ wall ([0-9.]+) s", text)]
        w0 = re.search(r"save stats: rank 0 waited ([0-9.]+) s at the end", text)
        writes = [float(x) for x in re.findall(r"save stats: rank 0 shard file written in ([0-9.]+) s", text)]
        steps = [x.get("step_time_s") for x in harness.read_metrics(metrics)]
        base = sorted(steps[1:s_at])[(s_at - 1) // 2]  # median of steps 2..S
        extra = sum(steps[2 * s_at:]) - k * base
        res[tag] = (calls[-1], calls[0], writes[-1] if writes else 0.0, float(w0.group(1)) if w0 else 0.0,
                    steps, base, extra)
    print(f"async: {n} steps, saves after steps {s_at} and {2 * s_at}, steps {2 * s_at + 1}..{n} overlap the second "
          f"one's write (rank 0; {a.np} ranks '{a.layout}', OMP_NUM_THREADS={a.threads})")
    print("| save | second save call (first) (s) | its shard file write (s) | wait at the end (s) | step times (s) | "
          f"steps {2 * s_at + 1}..{n} over the pre-save median (s) | hidden |")
    print("|---|---|---|---|---|---|---|")
    sync_call = res["sync"][0]
    for tag, (call, first, write, wait, st, base, extra) in res.items():
        hidden = "" if tag == "sync" else \
            f"{100 * (1 - (call + wait + max(0.0, extra)) / sync_call):.0f} %"
        print(f"| {tag} | {call:.2f} ({first:.2f}) | {write:.2f} | {wait:.2f} | {', '.join(f'{x:.2f}' for x in st)} | "
              f"{'' if tag == 'sync' else f'{extra:+.2f}'} | {hidden} |")
    print(f"hidden = 1 - (save call + wait at the end + the overlapped steps' extra time) / the synchronous save "
          f"call ({sync_call:.2f} s)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--layout", default="--tp 2 --dp 2")
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--keep", default="", help="keep the output directories here")
    ap.add_argument("--async-overlap", type=int, default=3,
                    help="also compare --async-save with a synchronous sharded save: this many steps run after the "
                         "save (0: skip)")
    ap.add_argument("--writer-priority", default="normal",
                    help="comma-separated priorities of the asynchronous writer thread to compare: normal, nice "
                         "(nice 19), idle (SCHED_IDLE) (TWINKLE_ASYNC_WRITER_PRIORITY)")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every rank (default 1)")
    ap.add_argument("--skip-formats", action="store_true", help="only the --async-overlap comparison")
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
        for fmt in () if a.skip_formats else ("sharded", "gathered"):
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
        if a.async_overlap:
            async_bench(a, tmp, model, rows, twinkle, launcher)
        if a.skip_formats:
            return
        print("| format | rank | save wall (s) | RSS before save (MiB) | peak RSS during save (MiB) | peak / before |")
        print("|---|---|---|---|---|---|")
        for fmt, (stats, size, _) in results.items():
            for rk in sorted(stats):
                w, before, peak = stats[rk]
                print(f"| {fmt} | {rk} | {w:.2f} | {before:.0f} | {peak:.0f} | {peak / before:.2f} |")
        for fmt, (stats, size, _) in results.items():
            print(f"{fmt}: checkpoint-step-1 {size / 2**20:.1f} MiB")
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
