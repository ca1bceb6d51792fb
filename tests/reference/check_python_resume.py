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

--async-save: B's save is save(..., async_save=True) with every file write slowed down
(TWINKLE_FAULT_WRITE=delay:MS, io_util.cpp), so B goes on training steps save-at+1.. while the
background writers still write; B then wait_for_save()s. Also checked: those overlapped steps equal
A's bit for bit (metrics_overlapped.jsonl) and the checkpoint is the sharded form, committed. Catches
an asynchronous save that writes the live buffers instead of its copy of them (the overlapped steps
change them under the writer: the resumed run then differs), or one that is never committed.

usage: check_python_resume.py --build BUILD [--rows 24] [--steps 6] [--save-at 4] [--mesh 2,2,2]
                              [--async-save [--write-delay-ms 40]]
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
    ap.add_argument('--mesh', default='2,2,2', help='dp,tp,pp of every run (default 2,2,2: 8 ranks)')
    ap.add_argument('--async-save', action='store_true', help="B saves with save(..., async_save=True)")
    ap.add_argument('--write-delay-ms', type=int, default=40,
                    help='with --async-save: each file write of B sleeps this long (TWINKLE_FAULT_WRITE=delay:MS)')
    a = ap.parse_args()
    nproc = 1
    for x in a.mesh.split(','):
        nproc *= int(x)
    launcher = os.path.join(a.build, 'bin', 'twinkle-run')
    prog = os.path.join(ROOT, 'tests', 'reference', 'python_resume_run.py')
    tmp = tempfile.mkdtemp(prefix='twinkle-python-resume-')
    failures = []
    try:
        dirs = {k: os.path.join(tmp, k) for k in ('whole', 'resumed')}
        for d in dirs.values():
            os.makedirs(d)
        base = dict(one_thread_env(), TWINKLE_MODEL=os.path.join(ROOT, 'models', 'qwen3-tiny'),
                    TWINKLE_DATA_ROWS=str(a.rows), TWINKLE_MESH=a.mesh)
        cmd = [launcher, f'--nproc_per_node={nproc}', prog]
        run(cmd, dict(base, TWINKLE_OUTPUT_DIR=dirs['whole'], TWINKLE_STEPS=str(a.steps)), timeout=500)
        saving = dict(base, TWINKLE_OUTPUT_DIR=dirs['resumed'], TWINKLE_STEPS=str(a.steps),
                      TWINKLE_SAVE_AT=str(a.save_at))
        if a.async_save:
            saving.update(TWINKLE_ASYNC_SAVE='1', TWINKLE_FAULT_WRITE=f'delay:{a.write_delay_ms}')
        run(cmd, saving, timeout=500)
        if a.async_save:
            whole_after = read_metrics(os.path.join(dirs['whole'], 'metrics.jsonl'))[a.save_at:]
            overlapped = read_metrics(os.path.join(dirs['resumed'], 'metrics_overlapped.jsonl'))
            if [m['step'] for m in overlapped] != [m['step'] for m in whole_after]:
                failures.append(f"overlapped steps {[m['step'] for m in overlapped]}, expected "
                                f"{[m['step'] for m in whole_after]}")
            for w, o in zip(whole_after, overlapped):
                for k in ('loss', 'grad_norm', 'lr'):
                    if w[k] != o[k]:
                        failures.append(f"step {w['step']} during the asynchronous write: {k} {o[k]!r} vs "
                                        f"{w[k]!r} uninterrupted")
            ck = os.path.join(dirs['resumed'], f'checkpoint-{a.save_at}', f'iter_{a.save_at:07d}')
            st = json.load(open(os.path.join(ck, 'state.json')))
            if st.get('save_format') != 'sharded' or not os.path.exists(os.path.join(ck, 'sharded_index.json')):
                failures.append(f"{ck}: save_format {st.get('save_format')!r}, sharded_index.json "
                                f"{'present' if os.path.exists(os.path.join(ck, 'sharded_index.json')) else 'missing'}")
            else:
                print(f'{ck}: the sharded form, committed after {len(overlapped)} overlapped steps')
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
    print('OK: load(load_optimizer=True) continues exactly like the uninterrupted run'
          + (' (from a save(async_save=True) checkpoint written while training went on)' if a.async_save else ''))


if __name__ == '__main__':
    main()
