#!/usr/bin/env python3
"""Exact resume through the Python package: MegatronModel.load(name, output_dir,
load_optimizer=True) continues a run exactly like the uninterrupted one.

tests/reference/python_resume_run.py on 8 ranks (dp 2 x tp 2 x pp 2, cosine schedule with 2
warm-up steps, lr 1e-3, 24 rows in batches of 8: the save falls inside the second epoch):
  A  one run of --steps steps;
  B  --save-at steps, save(save_optimizer=True), the process ends; a new launch load()s that
     checkpoint with load_optimizer=True, moves the DataLoader, and takes the remaining steps.
Checks: B's steps after the load have A's loss, grad norm and lr bit for bit, and the final
checkpoints are byte-identical (the HF model.safetensors, the fp32 master weights, both AdamW
moments and state.json's optimizer / scheduler state). Catches a load that drops the AdamW
moments or step count (the update after the load differs), the scheduler position (lr), cur_step
(the step numbers), or the data position (the loss).

usage: check_python_resume.py --build BUILD [--rows 24] [--steps 6] [--save-at 4]
"""
import argparse
import filecmp
import json
import os
import shutil
import sys
import tempfile

from harness import one_thread_env, read_metrics, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', required=True)
    ap.add_argument('--rows', type=int, default=24)
    ap.add_argument('--steps', type=int, default=6)
    ap.add_argument('--save-at', type=int, default=4)
    a = ap.parse_args()
    launcher = os.path.join(a.build, 'bin', 'twinkle-run')
    prog = os.path.join(ROOT, 'tests', 'reference', 'python_resume_run.py')
    tmp = tempfile.mkdtemp(prefix='twinkle-python-resume-')
    failures = []
    try:
        dirs = {k: os.path.join(tmp, k) for k in ('whole', 'resumed')}
        for d in dirs.values():
            os.makedirs(d)
        base = dict(one_thread_env(), TWINKLE_MODEL=os.path.join(ROOT, 'models', 'qwen3-tiny'),
                    TWINKLE_DATA_ROWS=str(a.rows))
        cmd = [launcher, '--nproc_per_node=8', prog]
        run(cmd, dict(base, TWINKLE_OUTPUT_DIR=dirs['whole'], TWINKLE_STEPS=str(a.steps)), timeout=500)
        run(cmd, dict(base, TWINKLE_OUTPUT_DIR=dirs['resumed'], TWINKLE_STEPS=str(a.steps),
                      TWINKLE_SAVE_AT=str(a.save_at)), timeout=500)
        run(cmd, dict(base, TWINKLE_OUTPUT_DIR=dirs['resumed'], TWINKLE_STEPS=str(a.steps),
                      TWINKLE_LOAD=f'checkpoint-{a.save_at}'), timeout=500)
        whole = read_metrics(os.path.join(dirs['whole'], 'metrics.jsonl'))
        resumed = read_metrics(os.path.join(dirs['resumed'], 'metrics.jsonl'))
        if [m['step'] for m in whole] != list(range(1, a.steps + 1)) or \
                [m['step'] for m in resumed] != list(range(1, a.steps + 1)):
            failures.append(f"steps: uninterrupted {[m['step'] for m in whole]}, "
                            f"saved + resumed {[m['step'] for m in resumed]}")
        for w, r in zip(whole, resumed):
            print(f"step {w['step']}: loss {w['loss']:.12f} {r['loss']:.12f} | grad_norm {w['grad_norm']:.12f} "
                  f"{r['grad_norm']:.12f} | lr {w['lr']:.6e} {r['lr']:.6e}")
            for k in ('loss', 'grad_norm', 'lr'):
                if w[k] != r[k]:
                    failures.append(f"step {w['step']}: {k} {r[k]!r} after the load vs {w[k]!r} uninterrupted")
        fw, fr = os.path.join(dirs['whole'], 'final'), os.path.join(dirs['resumed'], 'final')
        it = f'iter_{a.steps:07d}'
        for f in ('model.safetensors', f'{it}/master_weights.safetensors', f'{it}/exp_avg.safetensors',
                  f'{it}/exp_avg_sq.safetensors', 'trainer_state.json'):
            x, y = os.path.join(fw, f), os.path.join(fr, f)
            if not (os.path.exists(x) and os.path.exists(y)):
                failures.append(f'{f}: missing (uninterrupted {os.path.exists(x)}, resumed {os.path.exists(y)})')
            elif not filecmp.cmp(x, y, shallow=False):
                failures.append(f'final/{f} differs between the uninterrupted and the resumed run')
            else:
                print(f'final/{f}: identical ({os.path.getsize(x)} bytes)')
        sw, sr = (json.load(open(os.path.join(d, it, 'state.json'))) for d in (fw, fr))
        for k in sorted(set(sw) | set(sr)):
            if k in ('layout', 'dataloader'):
                continue
            if sw.get(k) != sr.get(k):
                failures.append(f'final/{it}/state.json: {k} {sr.get(k)!r} (resumed) vs {sw.get(k)!r}')
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print('FAIL:\n  ' + '\n  '.join(failures))
        sys.exit(1)
    print('OK: load(load_optimizer=True) continues exactly like the uninterrupted run')


if __name__ == '__main__':
    main()
