#!/usr/bin/env python3
"""`twinkle train --tensorboard-dir` against TensorBoard itself (tensorboard's EventAccumulator and its
TFRecord reader as the oracle, not twinkle's writer):

  1. a 6-step run (checkpoints at steps 3 and 6) logs 'lm loss', 'grad-norm', 'learning-rate',
     'tokens-per-sec', 'mfu', 'iteration-time', 'mem-max-allocated-bytes' at steps 1..6, each value the
     float32 of the run's metrics.jsonl line (the peak memory, the CPU process's peak resident
     set, is metrics.jsonl's peak_memory_bytes: above 1 MiB, never decreasing); `twinkle plot` draws that run's metrics.jsonl;
  2. every record's two masked CRC32Cs equal tensorboard's masked_crc32c of the same bytes, and a copy
     with one payload byte flipped is refused by tensorboard's record reader (DataLossError);
  3. resuming checkpoint-step-3 into the same directory (a new event file that starts with SessionLog
     START at step 4) shows one curve: steps 1..6 once each (the first run's 4..6 superseded), the
     values of 4..6 the resumed run's.
  4. the recipes' --tensorboard-dir (examples/moe_recipe, one process, 2 steps) writes the MoE tags
     ('lm loss', 'load_balancing_loss', 'expert-grad-norm', 'expert-load-max', ...) equal to its
     metrics.jsonl;
  5. the Python MegatronModel(..., tensorboard_dir=...) (the C++ MegatronModelOptions::tensorboard_dir):
     4 steps saved at step 2 with the optimizer state, then a new process that load()s step 2 and takes
     steps 3..4: the directory holds two event files, 'lm loss' / 'grad-norm' / 'learning-rate' at steps
     1..4 once each, equal to the processes' last_metrics() (3..4 the resumed one's), the same tags as
     `twinkle train`; the second file starts with SessionLog START at step 3, the first has none.
With --device-twinkle BIN (the twinkle built against the emulated CUDA device, tests/twinkle_cuda_emu) it
checks only the device's peak memory instead: `BIN train --device cuda --report-memory --tensorboard-dir`
writes 'mem-max-allocated-bytes' equal to metrics.jsonl's peak_memory_bytes, the caching allocator's peak of
device bytes in use (DeviceAllocator::peak_bytes_in_use), which is below the resident set the process had
before its first step (the host figure it would be if the device's were not used).
Prints "tensorboard check OK: ..." on success. Run with .venv/bin/python (scripts/setup).
"""
import argparse
import glob
import json
import os
import shutil
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_train as ct  # noqa: E402
from harness import read_metrics, rel, run, write_rows  # noqa: E402

TAGS = ("lm loss", "grad-norm", "learning-rate", "tokens-per-sec", "mfu", "iteration-time", "mem-max-allocated-bytes")

# Section 5's training loop, run as `python - MODEL ROWS TB OUT first|resume` with the build's package.
PY_LOOP = r"""
import json, sys
from twinkle.model import MegatronModel
model, rows_path, tb, out, phase = sys.argv[1:]
rows = [json.loads(l) for l in open(rows_path)]
m = MegatronModel(model, mixed_precision='no', tensorboard_dir=tb)
m.set_optimizer('default', lr=1e-3)
m.set_lr_scheduler('default', lr_warmup_steps=1, lr_decay_steps=4)
start = 0
if phase == 'resume':
    start = m.load('checkpoint-step-2', output_dir=out, load_optimizer=True)['cur_step']
logged = []
for step in range(start, 4):
    m.forward_backward(inputs=rows[4 * step:4 * step + 4])
    m.clip_grad_and_step()
    logged.append(dict(m.last_metrics(), cur_step=m.cur_step))
    if phase == 'first' and m.cur_step == 2:
        m.save('checkpoint-step-2', output_dir=out, save_optimizer=True)
print('METRICS ' + json.dumps({'metrics': logged, 'tensorboard_path': m.tensorboard_path}))
"""
METRIC_OF = {"lm loss": "loss", "grad-norm": "grad_norm", "learning-rate": "lr"}


def records(path):
    """(length bytes, length crc, payload, payload crc) of every TFRecord, parsed here."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    i = 0
    while i < len(data):
        head = data[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", data[i + 8:i + 12])
        payload = data[i + 12:i + 12 + n]
        (pcrc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        out.append((head, hcrc, payload, pcrc))
        i += 16 + n
    return out


def tiny_model_and_rows(tmp, rows_spec, seed, init_weights):
    """The tiny test model (make_tiny_model.py variant a) in tmp/tiny_a, with seeded weights written by the
    reference (init_weights) or none (twinkle's own seeded init), and a jsonl of random token rows
    (check_train.make_batch's rows_spec); returns (model dir, rows path)."""
    run([sys.executable, os.path.join(HERE, "make_tiny_model.py"), "--out", tmp, "--variant", "a"])
    model = os.path.join(tmp, "tiny_a")
    if init_weights:
        run([sys.executable, os.path.join(HERE, "qwen3_ref.py"), "init", "--config", os.path.join(model, "config.json"),
             "--seed", "0", "--out", model])
    with open(os.path.join(model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    ids, labels = ct.make_batch(rows_spec, vocab, seed)
    rows = os.path.join(tmp, "rows.jsonl")
    write_rows(rows, ids, labels)
    return model, rows


def check_python_keyword(build, model, rows, tmp, EventAccumulator):
    """Section 5; returns the failures."""
    failures = []
    tb, out = os.path.join(tmp, "tb_python"), os.path.join(tmp, "out_python")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.path.join(build, "python"))
    logged = {}
    for phase in ("first", "resume"):
        o = run([sys.executable, "-c", PY_LOOP, model, rows, tb, out, phase], env=env)
        line = [x for x in o.splitlines() if x.startswith("METRICS ")]
        if not line:
            return [f"python {phase}: no METRICS line in {o[-500:]}"]
        res = json.loads(line[-1][len("METRICS "):])
        if not res["tensorboard_path"].startswith(tb + os.sep):
            failures.append(f"python {phase}: tensorboard_path {res['tensorboard_path']!r} is not in {tb}")
        for m in res["metrics"]:
            logged[m["cur_step"]] = m  # the resumed process's steps replace the first one's
    ea = EventAccumulator(tb, size_guidance={"scalars": 0})
    ea.Reload()
    tags = set(ea.Tags()["scalars"])
    if not set(TAGS) <= tags:
        failures.append(f"python tensorboard_dir: tags {sorted(tags)} lack {sorted(set(TAGS) - tags)}")
    for t, k in METRIC_OF.items():
        got = [(e.step, e.value) for e in ea.Scalars(t)] if t in tags else []
        want = [(s, struct.unpack("f", struct.pack("f", logged[s][k]))[0]) for s in sorted(logged)]
        if [s for s, _ in got] != [1, 2, 3, 4] or any(rel(a, b) > 1e-7 for (_, a), (_, b) in zip(got, want)):
            failures.append(f"python tensorboard_dir: '{t}' {got} vs last_metrics() {want} (steps 1..4 once each)")
    files = sorted(glob.glob(os.path.join(tb, "events.out.tfevents.*")))
    if len(files) != 2:
        failures.append(f"python tensorboard_dir: {len(files)} event files, expected 2 (a new one per process)")
    else:
        # the resumed process's file: file_version, then SessionLog START at the first new step (3), then step 3's
        # scalars (tensorboard's Event proto decodes each record); the first process's file has no START
        from tensorboard.compat.proto import event_pb2
        first, second = ([event_pb2.Event.FromString(r[2]) for r in records(f)] for f in files)
        start = [(e.step, e.session_log.status) for e in second if e.HasField("session_log")]
        if start != [(3, event_pb2.SessionLog.START)] or not second[1].HasField("session_log"):
            failures.append(f"python tensorboard_dir: the resumed file's SessionLog events {start}, expected START at "
                            "step 3 right after file_version")
        if any(e.HasField("session_log") for e in first):
            failures.append("python tensorboard_dir: the first process's file holds a SessionLog event")
    print(f"python MegatronModel(tensorboard_dir=...): {len(tags)} tags, 'lm loss' steps "
          f"{[e.step for e in ea.Scalars('lm loss')] if 'lm loss' in tags else []} over 2 processes")
    return failures


def check_device_peak_memory(device_twinkle, tmp, EventAccumulator):
    """--device-twinkle: the CUDA caching allocator's peak as 'mem-max-allocated-bytes'; returns the failures."""
    import re
    model, rows = tiny_model_and_rows(tmp, "rows:8", 5, init_weights=False)
    tb, metrics = os.path.join(tmp, "tb_cuda"), os.path.join(tmp, "cuda.jsonl")
    out = run([device_twinkle, "train", "--device", "cuda", "--model", model, "--dataset", rows, "--batch-size", "4",
               "--max-steps", "2", "--no-save", "--report-memory", "--output-dir", os.path.join(tmp, "out_cuda"),
               "--metrics-file", metrics, "--tensorboard-dir", tb],
              env=dict(os.environ, OMP_NUM_THREADS="1", ASAN_OPTIONS="detect_leaks=0"))
    m = re.search(r"resident before the first step: ([0-9.]+) MiB", out)
    ea = EventAccumulator(tb, size_guidance={"scalars": 0})
    ea.Reload()
    got = [(e.step, e.value) for e in ea.Scalars("mem-max-allocated-bytes")] \
        if "mem-max-allocated-bytes" in ea.Tags()["scalars"] else []
    want = [(x["step"], struct.unpack("f", struct.pack("f", x["peak_memory_bytes"]))[0]) for x in read_metrics(metrics)]
    failures = []
    if not m:
        return [f"cuda: no --report-memory line in {out[-500:]}"]
    resident = float(m.group(1)) * 1048576
    if got != want or not got or not 0 < got[-1][1] < resident:
        failures.append(f"cuda: 'mem-max-allocated-bytes' {got} vs metrics.jsonl {want}: expected equal, above 0 and "
                        f"below the {resident:.0f} resident bytes before the first step (the device allocator's peak)")
    print(f"cuda (emulated): 'mem-max-allocated-bytes' {got}, the process's resident set before step 1 {resident:.0f} B")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--twinkle", default=None, help="the twinkle binary (default BUILD/bin/twinkle)")
    ap.add_argument("--device-twinkle", default=None,
                    help="only the CUDA peak-memory check, with this twinkle (tests/twinkle_cuda_emu)")
    args = ap.parse_args()
    if args.device_twinkle:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        tmp = tempfile.mkdtemp(prefix="twinkle-tb-cuda-")
        try:
            failures = check_device_peak_memory(args.device_twinkle, tmp, EventAccumulator)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if failures:
            print("FAIL:\n  " + "\n  ".join(failures))
            return 1
        print("tensorboard check OK: the device's peak memory is the caching allocator's")
        return 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

    twinkle = args.twinkle or os.path.join(args.build, "bin", "twinkle")
    tmp = tempfile.mkdtemp(prefix="twinkle-tb-")
    failures = []
    try:
        model, rows = tiny_model_and_rows(tmp, "rows:20", 1234, init_weights=True)
        tb = os.path.join(tmp, "tb")
        common = ["--model", model, "--dataset", rows, "--batch-size", "8", "--lr", "1e-3", "--lr-warmup-steps", "2",
                  "--lr-decay-steps", "6", "--lr-decay-style", "cosine", "--shuffle", "--seed", "7",
                  "--save-interval", "3", "--save-optimizer", "--max-steps", "6", "--no-save", "--tensorboard-dir", tb]
        out_a = os.path.join(tmp, "out_a")
        run([twinkle, "train"] + common + ["--output-dir", out_a, "--metrics-file", os.path.join(tmp, "a.jsonl")])
        ma = read_metrics(os.path.join(tmp, "a.jsonl"))

        def scalars():
            ea = EventAccumulator(tb, size_guidance={"scalars": 0})
            ea.Reload()
            return ea, {t: ea.Scalars(t) for t in ea.Tags()["scalars"]}

        _, sc = scalars()
        for t in TAGS:
            if t not in sc:
                failures.append(f"run 1: no '{t}' scalars (tags {sorted(sc)})")
        for t, k in METRIC_OF.items():
            got = [(e.step, e.value) for e in sc.get(t, [])]
            want = [(m["step"], struct.unpack("f", struct.pack("f", m[k]))[0]) for m in ma]
            if [s for s, _ in got] != [s for s, _ in want] or any(rel(a, b) > 1e-7 for (_, a), (_, b) in zip(got, want)):
                failures.append(f"run 1: '{t}' {got} vs metrics.jsonl {want}")
        # the peak memory (the CPU process's peak resident set): metrics.jsonl's, above 1 MiB, never decreasing
        mem = [(e.step, e.value) for e in sc.get("mem-max-allocated-bytes", [])]
        want = [(m["step"], struct.unpack("f", struct.pack("f", m["peak_memory_bytes"]))[0]) for m in ma]
        if mem != want or any(b < a for (_, a), (_, b) in zip(mem, mem[1:])) or not mem or mem[0][1] < 1 << 20:
            failures.append(f"run 1: 'mem-max-allocated-bytes' {mem}: expected metrics.jsonl's {want}, > 1 MiB, "
                            "non-decreasing")
        # twinkle plot still draws the metrics file of a --tensorboard-dir run
        png = os.path.join(tmp, "a.png")
        run([twinkle, "plot", os.path.join(tmp, "a.jsonl"), "-o", png])
        if not os.path.isfile(png) or open(png, "rb").read(8) != b"\x89PNG\r\n\x1a\n":
            failures.append(f"twinkle plot of run 1's metrics.jsonl wrote no PNG at {png}")
        files = sorted(glob.glob(os.path.join(tb, "events.out.tfevents.*")))
        if len(files) != 1:
            failures.append(f"run 1 wrote {len(files)} event files, expected 1")
        # 2. the CRCs, recomputed by tensorboard; a flipped byte is refused by its reader
        recs = records(files[0])
        for i, (head, hcrc, payload, pcrc) in enumerate(recs):
            if hcrc != pywrap_tensorflow.masked_crc32c(head) or pcrc != pywrap_tensorflow.masked_crc32c(payload):
                failures.append(f"record {i}: masked CRC32C differs from tensorboard's")
        bad = os.path.join(tmp, "bad", os.path.basename(files[0]))
        os.makedirs(os.path.dirname(bad))
        raw = bytearray(open(files[0], "rb").read())
        raw[len(raw) // 2] ^= 0x40
        open(bad, "wb").write(bytes(raw))
        reader, refused = pywrap_tensorflow.PyRecordReader_New(bad), False
        try:
            for _ in range(len(recs) + 1):
                reader.GetNext()
        except errors.DataLossError:
            refused = True
        except errors.OutOfRangeError:
            pass
        if not refused:
            failures.append("a flipped payload byte was not refused by tensorboard's record reader")
        # 3. resume checkpoint-step-3 into the same directory: one curve
        out_b = os.path.join(tmp, "out_b")
        run([twinkle, "train"] + common + ["--output-dir", out_b, "--metrics-file", os.path.join(tmp, "b.jsonl"),
                                           "--resume", os.path.join(out_a, "checkpoint-step-3")])
        mb = read_metrics(os.path.join(tmp, "b.jsonl"))
        _, sc = scalars()
        got = [(e.step, e.value) for e in sc.get("lm loss", [])]
        steps = [s for s, _ in got]
        if steps != [1, 2, 3, 4, 5, 6]:
            failures.append(f"after the resume: 'lm loss' at steps {steps}, expected 1..6 once each")
        want_b = {m["step"]: struct.unpack("f", struct.pack("f", m["loss"]))[0] for m in mb}
        for s, v in got:
            if s >= 4 and (s not in want_b or rel(v, want_b[s]) > 1e-7):
                failures.append(f"after the resume: step {s} shows {v}, the resumed run logged {want_b.get(s)}")
        n_files = len(glob.glob(os.path.join(tb, "events.out.tfevents.*")))
        if n_files != 2:
            failures.append(f"after the resume: {n_files} event files, expected 2 (a new one per run)")
        print(f"run 1: {len(recs)} records, 'lm loss' steps 1..6: {[round(v, 6) for _, v in got]}")
        # 4. the MoE recipe's --tensorboard-dir (one process, 2 steps): the MoE tags equal its metrics.jsonl
        out_r, tb_r = os.path.join(tmp, "out_recipe"), os.path.join(tmp, "tb_recipe")
        run([os.path.join(args.build, "examples", "moe_recipe"), "--dp", "1", "--tp", "1", "--pp", "1", "--cp", "1",
             "--ep", "1", "--max-steps", "2", "--data-rows", "8", "--micro-batch-size", "1", "--output-dir", out_r,
             "--tensorboard-dir", tb_r], env=dict(os.environ, OMP_NUM_THREADS="1"))
        mr = read_metrics(os.path.join(out_r, "metrics.jsonl"))
        ea = EventAccumulator(tb_r, size_guidance={"scalars": 0})
        ea.Reload()
        for t, k in {"lm loss": "lm_loss", "load_balancing_loss": "aux_loss", "expert-grad-norm": "expert_grad_norm",
                     "expert-load-max": "expert_load_max", "grad-norm": "grad_norm", "learning-rate": "lr"}.items():
            got_r = [(e.step, e.value) for e in ea.Scalars(t)] if t in ea.Tags()["scalars"] else []
            want_r = [(m["step"], struct.unpack("f", struct.pack("f", m[k]))[0]) for m in mr]
            if [x for x, _ in got_r] != [x for x, _ in want_r] or any(rel(a, b) > 1e-7 for (_, a), (_, b) in
                                                                     zip(got_r, want_r)):
                failures.append(f"moe_recipe --tensorboard-dir: '{t}' {got_r} vs its metrics.jsonl {want_r}")
        print(f"moe_recipe --tensorboard-dir: {len(ea.Tags()['scalars'])} tags at steps {[m['step'] for m in mr]}")
        # 5. the Python MegatronModel(tensorboard_dir=...): 4 steps saved at 2, then a resumed process
        failures += check_python_keyword(args.build, model, rows, tmp, EventAccumulator)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("tensorboard check OK: 6 steps of 7 tags read back by EventAccumulator, CRCs equal tensorboard's, a flipped "
          "byte refused, a resume supersedes steps 4..6, twinkle plot, the MoE recipe's tags, the Python "
          "tensorboard_dir through a resume")
    return 0


if __name__ == "__main__":
    sys.exit(main())
