#!/usr/bin/python3
"""Acceptance check of the Python package (issue 15): examples/python/tp.py on 8 ranks
(dp=2, tp=2, pp=2, launched by twinkle-run) against the C++ recipe examples/tp_recipe on the
same data and seed (one epoch of --data-rows rows, global batch 8); with --recipe moe
examples/python/tp_moe.py against examples/moe_recipe (Qwen3-MoE, dp2 tp2 pp2 ep2, global batch 2,
--steps steps; the aux loss too); with --recipe moe_cp examples/python/tp_moe_cp.py against
examples/moe_cp_recipe (Qwen3-MoE, tp2 pp2 cp2 ep2 with ring attention, global batch 2, --steps steps):

1. every step's loss, grad norm and lr in metrics.jsonl agree within 1e-6 relative, and the loss
   the Python script logs per step (Twinkle's metric dict, '%.4f') is the C++ loss formatted;
2. the saved checkpoints are identical byte for byte (config.json, model.safetensors, tokenizer
   files).
Catches: a binding that changes the rows (columns, labels, order, dp split), the optimizer or
scheduler options, the step sequence, or the save path. Run with /usr/bin/python3.
"""
import argparse
import ast
import filecmp
import os
import re
import shutil
import sys
import tempfile

from harness import read_metrics, rel, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# --recipe: (C++ program in build/examples, Python script in examples/python)
RECIPES = {'tp': ('tp_recipe', 'tp.py'), 'moe': ('moe_recipe', 'tp_moe.py'), 'moe_cp': ('moe_cp_recipe', 'tp_moe_cp.py')}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', required=True)
    ap.add_argument('--rows', type=int, default=32, help='data_slice = range(rows); steps = rows / global batch')
    ap.add_argument('--recipe', choices=sorted(RECIPES), default='tp',
                    help='tp: examples/python/tp.py vs examples/tp_recipe (global batch 8); moe: '
                         'examples/python/tp_moe.py vs examples/moe_recipe (global batch 2, --steps of them); '
                         'moe_cp: examples/python/tp_moe_cp.py vs examples/moe_cp_recipe (as moe)')
    ap.add_argument('--steps', type=int, default=3, help='moe, moe_cp: optimizer steps of both runs')
    args = ap.parse_args()
    launcher = os.path.join(args.build, 'bin', 'twinkle-run')
    tmp = tempfile.mkdtemp(prefix='twinkle-python-recipe-')
    env = dict(os.environ, OMP_NUM_THREADS='1')
    failures = []
    try:
        cpp_dir, py_dir = os.path.join(tmp, 'cpp'), os.path.join(tmp, 'py')
        moe = args.recipe != 'tp'
        cpp_prog, py_prog = RECIPES[args.recipe]
        extra = ['--max-steps', str(args.steps)] if moe else []
        run([launcher, '--nproc_per_node=8', os.path.join(args.build, 'examples', cpp_prog), '--data-rows',
             str(args.rows), '--output-dir', cpp_dir] + extra, env)
        py_env = dict(env, TWINKLE_DATA_ROWS=str(args.rows), TWINKLE_OUTPUT_DIR=py_dir)
        if moe:
            py_env['TWINKLE_MAX_STEPS'] = str(args.steps)
        out = run([launcher, '--nproc_per_node=8', os.path.join(ROOT, 'examples', 'python', py_prog)], py_env)
        mc, mp = read_metrics(os.path.join(cpp_dir, 'metrics.jsonl')), read_metrics(os.path.join(py_dir, 'metrics.jsonl'))
        steps = args.steps if moe else (args.rows + 7) // 8
        if len(mc) != steps or len(mp) != steps:
            failures.append(f'expected {steps} metrics lines, got {len(mc)} (C++) and {len(mp)} (Python)')
        logged = {}
        for m in re.finditer(r'Current is step (\d+) of \d+, metric: (\{.*\})', out):
            logged[int(m.group(1))] = ast.literal_eval(m.group(2))
        for i, (a, b) in enumerate(zip(mp, mc)):
            print(f"step {b['step']}: loss python {a['loss']:.10f} c++ {b['loss']:.10f} | grad_norm "
                  f"{a['grad_norm']:.10f} {b['grad_norm']:.10f} | lr {a['lr']:.6e} {b['lr']:.6e}")
            for k in ('loss', 'grad_norm', 'lr') + (('aux_loss',) if moe else ()):
                if rel(a[k], b[k]) > 1e-6 and not (a[k] == 0 and b[k] == 0):
                    failures.append(f"step {b['step']}: {k} {a[k]} (Python) vs {b[k]} (C++)")
            shown = logged.get(i, {}).get('loss')
            if shown != f"{b['loss']:.4f}":
                failures.append(f"step {b['step']}: the Python script logged loss {shown!r}, C++ {b['loss']:.4f}")
        ck = os.path.join(py_dir, 'last-checkpoint')
        for f in ('config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json'):
            a, b = os.path.join(ck, f), os.path.join(cpp_dir, f)
            if not os.path.exists(a) or not os.path.exists(b):
                failures.append(f'{f}: missing in the Python ({os.path.exists(a)}) or C++ ({os.path.exists(b)}) '
                                'checkpoint')
            elif not filecmp.cmp(a, b, shallow=False):
                failures.append(f'{f} differs between the Python and the C++ checkpoint')
            else:
                print(f'{f}: identical ({os.path.getsize(a)} bytes)')
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print('FAIL:\n  ' + '\n  '.join(failures))
        sys.exit(1)
    print('OK: the Python recipe equals the C++ recipe (loss, grad norm, lr per step; checkpoint bytes)')


if __name__ == '__main__':
    main()
