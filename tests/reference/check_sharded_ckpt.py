#!/usr/bin/env python3
"""Sharded training checkpoints (`--save-format sharded`, include/twinkle/io/sharded_checkpoint.h).

Every mode trains the tiny model of check_resume.py (its Runner: the same flags, 5 steps,
--save-interval 5 --save-optimizer) and checks:

  coverage  the same run saved --save-format gathered and sharded on --np ranks with --layout:
            every global tensor of the sharded checkpoint reassembled from the index and the files
            (tests/reference/sharded_ckpt_py.py, independent of the C++ reader) covers each element
            exactly once and equals the gathered checkpoint's fp32 master weights / exp_avg /
            exp_avg_sq bit for bit; every shard file holds only tensors the index names; no file
            holds half the state (the largest file is below half of it
            on 4+ ranks: nothing was gathered); `twinkle export --from-checkpoint`
            writes a directory whose weights file and config.json equal the gathered save's byte
            for byte; the directory holds no HF weights.
  crash     TWINKLE_FAULT_WRITE=kill:N at several points of the sharded save of checkpoint-step-10
            (the ranks' shard files, rank 0's small files, its index): every time the job fails,
            checkpoint-step-10 is absent, checkpoint-step-5 and `latest` are untouched, and a resume
            from the output directory continues exactly (steps 6..10 equal the uninterrupted run).
  bad       corrupted sharded checkpoints are refused naming the file and tensor: the index
            missing (an incomplete save), a rank's shard file missing, a chunk dropped from the
            index (a hole), a chunk's offset moved by one (an overlap), a stored slice of another
            shape; the checkpoint used as --model and a gathered checkpoint given to export are
            refused naming what to do.
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
import check_resume as cr  # noqa: E402
import harness  # noqa: E402
from harness import run, run_any  # noqa: E402
import safetensors_py  # noqa: E402
import sharded_ckpt_py  # noqa: E402


def runner(args, tmp, fmt):
    a = argparse.Namespace(**vars(args))
    a.save_format = fmt
    r = cr.Runner(a, tmp)
    return r


def set_format(r, fmt):
    i = r.common.index("--save-format")
    r.common[i + 1] = fmt


def same_bits(x, y):
    import torch
    return x.dtype == y.dtype and x.shape == y.shape and bool(
        (x.contiguous().view(-1).view(torch.int32) == y.contiguous().view(-1).view(torch.int32)).all())


def check_coverage(args, r):
    failures = []
    set_format(r, "gathered")
    _, out_g, _, _ = r.train("gathered", args.np, args.layout, 5)
    set_format(r, "sharded")
    _, out_s, _, _ = r.train("sharded", args.np, args.layout, 5)
    ck_g, ck_s = os.path.join(out_g, "checkpoint-step-5"), os.path.join(out_s, "checkpoint-step-5")
    it_s = os.path.join(ck_s, "iter_0000005")
    if not sharded_ckpt_py.is_sharded(it_s):
        return [f"{it_s}: no sharded_index.json"]
    weights = "adapter_model.safetensors" if args.lora_r else "model.safetensors"
    if os.path.exists(os.path.join(ck_s, weights)) or os.path.exists(os.path.join(ck_s, "model.safetensors.index.json")):
        failures.append(f"the sharded checkpoint holds HF weights ({weights}): it gathered them")
    sharded, problems = sharded_ckpt_py.state_files(it_s)
    failures += [f"sharded checkpoint: {p}" for p in problems]
    gathered, _ = cr.state_tensors(ck_g)
    n = 0
    for f in cr.STATE_FILES:
        if set(sharded[f]) != set(gathered[f]):
            failures.append(f"{f}: tensor names differ: sharded-only {sorted(set(sharded[f]) - set(gathered[f]))[:3]}, "
                            f"gathered-only {sorted(set(gathered[f]) - set(sharded[f]))[:3]}")
            continue
        for k in gathered[f]:
            n += 1
            if not same_bits(sharded[f][k], gathered[f][k]):
                d = (sharded[f][k].double() - gathered[f][k].double()).abs().max().item()
                failures.append(f"{f}: {k} differs from the gathered save (max abs {d:.3e})")
    # Each rank wrote only its share: no file near the whole state.
    files = sorted(x for x in os.listdir(it_s) if x.startswith("shard-"))
    sizes = [os.path.getsize(os.path.join(it_s, x)) for x in files]
    state = sum(t.numel() * 4 for f in cr.STATE_FILES for t in gathered[f].values())
    print(f"{len(files)} shard files, bytes {sizes}, state {state} bytes, {n} tensors compared")
    if len(files) != args.np:
        failures.append(f"{len(files)} shard files for {args.np} ranks")
    if args.np >= 4 and sizes and max(sizes) > 0.5 * state:
        # (every element is stored once, checked above; this says no rank wrote a gathered copy)
        failures.append(f"the largest shard file has {max(sizes)} bytes, more than half the state's {state}")
    # export: the HF / PEFT files a gathered save writes, byte for byte
    exp = os.path.join(r.tmp, "export")
    run([r.twinkle, "export", "--from-checkpoint", ck_s, "-o", exp], dict(os.environ, OMP_NUM_THREADS="1"))
    for f in [weights, "config.json"] + (["adapter_config.json"] if args.lora_r else []):
        a, b = os.path.join(exp, f), os.path.join(ck_g, f)
        if not os.path.exists(a) or open(a, "rb").read() != open(b, "rb").read():
            failures.append(f"export: {f} differs from the gathered save's")
    return failures


def check_crash(args, r):
    failures = []
    set_format(r, "sharded")
    A, _, _, _ = r.train("full", args.np, args.layout, 10)
    _, out, _, _ = r.train("crash", args.np, args.layout, 5)
    ck5 = os.path.join(out, "checkpoint-step-5")
    rank0 = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(ck5) for f in fs
                if not (f.startswith("shard-") and not f.startswith("shard-00000-")))
    other = max([os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(ck5) for f in fs
                 if f.startswith("shard-") and not f.startswith("shard-00000-")] or [0])
    before = sorted(os.listdir(ck5))
    # kill points: inside a non-zero rank's shard (every rank dies there), early in rank 0's small
    # files, in the middle of rank 0's shard, and in rank 0's index (its last write before the commit)
    points = [("a rank's shard", max(1, other // 2)), ("rank 0's first files", 2000),
              ("rank 0's shard", rank0 // 2), ("rank 0's index", rank0 - 200)]
    for what, n in points:
        _, _, rc, _ = r.train("crash", args.np, args.layout, 10, ["--resume", out],
                              {"TWINKLE_FAULT_WRITE": f"kill:{n}"}, expect_ok=False)
        left = sorted(os.listdir(out))
        print(f"kill:{n} ({what}): exit code {rc}, output dir {left}")
        if rc == 0:
            failures.append(f"kill:{n} ({what}): the run exited 0")
        if os.path.exists(os.path.join(out, "checkpoint-step-10")):
            failures.append(f"kill:{n} ({what}): checkpoint-step-10 exists after the writer was killed")
        if open(os.path.join(out, "latest")).read().strip() != "checkpoint-step-5":
            failures.append(f"kill:{n} ({what}): latest no longer names checkpoint-step-5")
        if sorted(os.listdir(ck5)) != before:
            failures.append(f"kill:{n} ({what}): checkpoint-step-5 changed")
    C, _, _, text = r.train("crash", args.np, args.layout, 10, ["--resume", out])
    if "resuming at step 5" not in text:
        failures.append("the resume after the killed saves did not start at step 5")
    failures += cr.compare_metrics(C, A, range(6, 11), 0, 0, "resumed after the killed saves")
    if any(n.startswith(".checkpoint-step-") for n in os.listdir(out)):
        failures.append(f"staging directories left after a complete save: {os.listdir(out)}")
    return failures


def check_bad(args, r):
    failures = []
    set_format(r, "sharded")
    _, outB, _, _ = r.train("part", args.np, args.layout, 5)
    ck5 = os.path.join(outB, "checkpoint-step-5")
    with open(os.path.join(ck5, "iter_0000005", "sharded_index.json")) as f:
        ix = json.load(f)
    some = next(t for t in ix["tensors"] if t["name"].startswith("exp_avg/") and len(t["chunks"]) > 1)

    def case(name, mutate, patterns, cmd=None):
        d = os.path.join(r.tmp, "bad_" + name)
        shutil.copytree(ck5, d)
        mutate(d, os.path.join(d, "iter_0000005"))
        if cmd is None:
            _, _, rc, text = r.train("bad_" + name, args.np, args.layout, 10, ["--resume", d], expect_ok=False)
        else:
            p = run_any(cmd(d), dict(os.environ, OMP_NUM_THREADS="1"))
            rc, text = p.returncode, p.stdout
        err = [l for l in text.splitlines() if "error" in l.lower()]
        print(f"[{name}] exit {rc}: {err[-1] if err else text[-300:]}")
        if rc == 0:
            failures.append(f"{name}: the bad checkpoint was accepted")
        for p in patterns:
            if not re.search(p, text):
                failures.append(f"{name}: the error does not match /{p}/")

    def edit_index(f):
        def m(d, i):
            p = os.path.join(i, "sharded_index.json")
            j = json.load(open(p))
            f(next(t for t in j["tensors"] if t["name"] == some["name"]))
            json.dump(j, open(p, "w"))
        return m

    case("index_missing", lambda d, i: os.remove(os.path.join(i, "sharded_index.json")),
         [r"sharded_index\.json is missing: the save did not complete"])
    victim = some["chunks"][-1]["file"]
    case("shard_file_missing", lambda d, i: os.remove(os.path.join(i, victim)),
         [re.escape(victim) + r" is missing \(named by .*sharded_index\.json\)"])
    case("chunk_dropped", edit_index(lambda t: t["chunks"].pop()),
         [re.escape(some["name"]) + r"'?: the chunks cover [0-9]+ of its [0-9]+ elements"])

    def shift(t):
        c = t["chunks"][1]
        d = max(range(len(c["offsets"])), key=lambda k: c["offsets"][k])
        c["offsets"][d] -= 1
    case("chunk_offset_off_by_one", edit_index(shift),
         [re.escape(some["name"]) + r"'?: chunk 1 .*(overlaps chunk|lies outside)"])

    def reshape_slice(d, i):
        import torch
        c = some["chunks"][0]
        p = os.path.join(i, c["file"])
        t = safetensors_py.load(p)
        t[c["key"]] = torch.zeros(t[c["key"]].numel() + 1)
        safetensors_py.save(p, t)
    case("slice_of_another_shape", reshape_slice,
         [re.escape(some["chunks"][0]["key"]) + r"'? is F32 \[[0-9]+\], the index says F32"])
    case("checkpoint_as_model", lambda d, i: None, [r"is a sharded training checkpoint .*twinkle export --from-checkpoint"],
         cmd=lambda d: [r.twinkle, "train", "--model", d, "--dataset", r.rows, "--max-steps", "1", "--no-save"])
    set_format(r, "gathered")
    _, outG, _, _ = r.train("gathered", 1, "", 5)
    case("export_of_gathered", lambda d, i: None, [r"is a gathered checkpoint .*its Hugging Face weights are already in"],
         cmd=lambda d: [r.twinkle, "export", "--from-checkpoint", os.path.join(outG, "checkpoint-step-5"), "-o",
                        os.path.join(r.tmp, "x")])
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--mode", choices=["coverage", "crash", "bad"], default="coverage")
    ap.add_argument("--twinkle", default=None)
    ap.add_argument("--model", choices=["dense", "moe"], default="dense")
    ap.add_argument("--np", type=int, default=1)
    ap.add_argument("--layout", default="")
    ap.add_argument("--mlp-only-layers", default="1")
    ap.add_argument("--lora-r", type=int, default=0)
    ap.add_argument("--lora-targets", default="all-linear")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="twinkle-sharded-")
    try:
        r = runner(args, tmp, "sharded")
        failures = {"coverage": check_coverage, "crash": check_crash, "bad": check_bad}[args.mode](args, r)
        ok = (f"sharded checkpoint check OK ({args.mode}, {args.model}{', lora' if args.lora_r else ''}, "
              f"np {args.np} '{args.layout}')")
        return harness.report(failures, ok=ok)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
