#!/usr/bin/env python3
"""An uncaught Python exception on one rank of a twinkle-run job ends the whole job, non-zero,
with the traceback and the rank's error line printed, while the other rank waits in a collective.
And a batch that one rank cannot convert (a row whose labels are shorter than its input_ids, given
to forward_backward on rank 1 only) is refused on both ranks alike, so a script that catches the
error goes on training on both (before, rank 1 raised ValueError in the binding while rank 0
entered the step's collectives: a hang, or collectives paired out of step).

Without twinkle's sys.excepthook (python/twinkle/__init__.py) the failing interpreter exits
through MPI_Finalize, which waits for the other rank, and that rank waits in the step's
collectives for the failing one: the job hangs. The check gives it HANG_S seconds (a hang
detector, not a speed figure; a working abort takes a few seconds) and then kills it.

usage: check_python_rank_exception.py --build BUILD_DIR   (.venv/bin/python, scripts/setup)
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HANG_S = 90

PRELUDE = r'''
import sys
import twinkle
from twinkle import DeviceMesh, Platform
from twinkle.dataloader import DataLoader
from twinkle.dataset import Dataset, DatasetMeta
from twinkle.model import MegatronModel
from twinkle.preprocessor import SelfCognitionProcessor

MODEL = sys.argv[1]
twinkle.initialize(mode='local', global_device_mesh=DeviceMesh.from_sizes(dp_size=2, device_type='cpu'))
ds = Dataset(dataset_meta=DatasetMeta(sys.argv[2], data_slice=range(16)))
ds.set_template('Template', model_id=MODEL, max_length=64)
ds.map(SelfCognitionProcessor('twinkle', 'ModelScope'))
ds.encode()
dl = DataLoader(dataset=ds, batch_size=4)
model = MegatronModel(model_id=MODEL, mixed_precision='no')
model.set_optimizer(optimizer_cls='default', lr=1e-4)
rank = Platform.get_rank()
'''

RAISES = PRELUDE + r'''
for i, batch in enumerate(dl):
    if rank == 1 and i == 1:
        raise ValueError('deliberate failure on rank 1 at step %d' % i)
    model.forward_backward(inputs=batch)
    model.clip_grad_and_step()
print('UNREACHABLE: rank %d finished' % rank, flush=True)
'''

CAUGHT = PRELUDE + r'''
for i, batch in enumerate(dl):
    if rank == 1 and i == 1:
        batch = [dict(r) for r in batch]
        batch[0]['labels'] = list(batch[0]['labels'])[:-1]
    try:
        model.forward_backward(inputs=batch)
    except Exception as e:
        print('REFUSED rank %d step %d: %s: %s' % (rank, i, type(e).__name__, e), flush=True)
        continue
    model.clip_grad_and_step()
print('DONE rank %d' % rank, flush=True)
'''


def run_job(build, text):
    # The script under `twinkle-run --nproc_per_node=2`: (output, exit code), exit code None when it
    # still ran after HANG_S seconds (then killed).
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "job.py")
        with open(script, "w") as f:
            f.write(text)
        cmd = [os.path.join(build, "bin", "twinkle-run"), "--nproc_per_node=2", script,
               os.path.join(ROOT, "models", "qwen3-tiny"), os.path.join(ROOT, "data", "self_cognition.jsonl")]
        job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)
        try:
            out, _ = job.communicate(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, 9)
            out, _ = job.communicate()
            print(out[-4000:])
            return out, None
    print(out[-3000:])
    return out, job.returncode


def run_caught(build):
    # Both ranks refuse rank 1's bad batch and finish their loops; returns the failures.
    out, rc = run_job(build, CAUGHT)
    if rc is None:
        return [f"caught refusal: the job still ran {HANG_S} s after rank 1's bad batch (hang)"]
    failures = []
    if rc != 0:
        failures.append(f"caught refusal: the job exited {rc}")
    for r, kind in ((0, "RuntimeError"), (1, "ValueError")):  # rank 1 keeps its conversion error's type
        if f"REFUSED rank {r} step 1: {kind}:" not in out:
            failures.append(f"caught refusal: rank {r} did not refuse step 1 with {kind}")
        if f"DONE rank {r}" not in out:
            failures.append(f"caught refusal: rank {r} did not finish its loop")
    if "labels has" not in out:
        failures.append("caught refusal: the error does not say what was wrong with rank 1's row")
    if "REFUSED rank 0 step 0" in out or "REFUSED rank 1 step 2" in out:
        failures.append("caught refusal: a good step was refused")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    failures = []
    out, rc = run_job(args.build, RAISES)
    if rc is None:
        print(f"FAILED: the job still ran {HANG_S} s after rank 1 raised (hang)")
        return 1
    if rc == 0:
        failures.append("the job exited 0")
    if "UNREACHABLE" in out:
        failures.append("a rank finished its loop")
    if "ValueError: deliberate failure on rank 1 at step 1" not in out:
        failures.append("the traceback of rank 1's exception was not printed")
    if "[rank 1] error: uncaught Python exception ValueError: deliberate failure on rank 1" not in out:
        failures.append("rank 1's error line was not printed")
    failures += run_caught(args.build)
    for f in failures:
        print("FAILED:", f)
    if failures:
        return 1
    print(f"python rank exception check OK: the job ended with exit code {rc}; a batch one rank "
          "could not convert was refused on both and both finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
