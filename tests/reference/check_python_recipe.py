#!/usr/bin/env python3
"""Acceptance check of the Python package: examples/python/tp.py on 8 ranks
(dp=2, tp=2, pp=2, launched by twinkle-run) against the C++ recipe examples/tp_recipe on the
same data and seed (one epoch of --data-rows rows, global batch 8); with --recipe moe
examples/python/tp_moe.py against examples/moe_recipe (Qwen3-MoE, dp2 tp2 pp2 ep2, global batch 2,
--steps steps; the aux loss too); with --recipe moe_cp examples/python/tp_moe_cp.py against
examples/moe_cp_recipe (Qwen3-MoE, tp2 pp2 cp2 ep2 with ring attention, global batch 2, --steps steps).
Both programs get the same command line (--data-rows, --max-steps, --bf16 / --fp32, --lora: what
scripts/demo and `make demo RECIPE=python ARGS=...` pass on): --precision bf16 (default) is
MegatronModel's default mixed_precision (Twinkle's 'bf16') and the C++ recipe's --bf16; --precision
fp32 is mixed_precision='no' and --fp32. --lora switches on the cookbook's adapter line and compares PEFT's
adapter directory instead of the full checkpoint. Checks:

0. every option of the script's --help is one of the C++ recipe's, and an option the script lacks
   (--resume) is refused with exit 2 naming it (the scripts took no options and ignored them);

1. every step's loss, grad norm and lr in metrics.jsonl agree within 1e-6 relative, and the loss
   the Python script logs per step (Twinkle's metric dict, '%.4f') is the C++ loss formatted;
2. the saved checkpoints are identical byte for byte (config.json, model.safetensors, tokenizer
   files; with --lora adapter_model.safetensors and adapter_config.json);
3. both runs log the same "Mixed precision:" line of get_train_configs (bf16 or fp32 as asked), and
   with --lora both log the adapter.
Catches: a binding that changes the rows (columns, labels, order, dp split), the optimizer or
scheduler options, the step sequence, or the save path; one that drops mixed_precision (a Python
run in fp32 differs from the C++ --bf16 run by far more than 1e-6: bf16 GEMM inputs change the
loss in the 3rd-4th digit) or the adapter. Run with .venv/bin/python (scripts/setup).

On a device (--device cuda): both programs get --device cuda; --recipe-bin names the C++ program and
--python-dir the directory holding the `twinkle` package to import (the emulated device:
build/tests/tp_recipe_cuda_emu and build/python_cuda_emu, tests/cuda.cmake; the Python ranks are then
started by mpirun directly, since twinkle-run puts build/python first on PYTHONPATH); --np and --layout
(e.g. '--dp 1 --tp 2 --pp 2') pick a smaller mesh for both.
"""
import argparse
import ast
import filecmp
import os
import re
import shutil
import subprocess
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
    ap.add_argument('--precision', choices=('bf16', 'fp32'), default='bf16',
                    help="bf16: the script's default mixed_precision ('bf16', Twinkle's) vs the C++ recipe --bf16; "
                         "fp32: TWINKLE_MIXED_PRECISION=no vs the C++ recipe --fp32")
    ap.add_argument('--lora', action='store_true',
                    help="the cookbook's add_adapter_to_model line (TWINKLE_LORA=1) vs the C++ recipe --lora")
    ap.add_argument('--device', choices=('cpu', 'cuda'), default=None,
                    help='passed to both programs as --device (default: theirs, cpu)')
    ap.add_argument('--recipe-bin', default=None, help='the C++ program (default: build/examples/<recipe>)')
    ap.add_argument('--python-dir', default=None,
                    help='directory holding the twinkle package for the Python run (default: build/python, '
                         'through twinkle-run)')
    ap.add_argument('--batch-size', type=int, default=None,
                    help='tp: the global batch of both programs (default: theirs, 8)')
    ap.add_argument('--np', type=int, default=8, help='ranks of both runs (default 8: the cookbook recipe mesh)')
    ap.add_argument('--layout', default='', help="mesh options for both programs, e.g. '--dp 1 --tp 2 --pp 2'")
    args = ap.parse_args()
    launcher = os.path.join(args.build, 'bin', 'twinkle-run')
    tmp = tempfile.mkdtemp(prefix='twinkle-python-recipe-')
    env = dict(os.environ, OMP_NUM_THREADS='1')
    failures = []
    try:
        cpp_dir, py_dir = os.path.join(tmp, 'cpp'), os.path.join(tmp, 'py')
        moe = args.recipe != 'tp'
        cpp_prog, py_prog = RECIPES[args.recipe]
        cpp_path, py_path = os.path.join(args.build, 'examples', cpp_prog), os.path.join(ROOT, 'examples', 'python', py_prog)
        if args.recipe_bin:
            cpp_path = args.recipe_bin
        # 0. the script's options are the C++ recipe's (same names), and one it lacks is refused by name
        help_env = dict(env, PYTHONPATH=os.path.join(args.build, 'python'))
        py_opts = set(re.findall(r'(--[a-z][a-z0-9-]+)', run([sys.executable, py_path, '--help'], help_env)))
        cpp_opts = set(re.findall(r'(--[a-z][a-z0-9-]+)', run([cpp_path, '--help'], env)))
        if not py_opts or py_opts - cpp_opts:
            failures.append(f'{py_prog} options missing from {cpp_prog} --help: {sorted(py_opts - cpp_opts)}')
        r = subprocess.run([sys.executable, py_path, '--resume', 'auto'], env=help_env, capture_output=True,
                           text=True)
        if r.returncode != 2 or 'unrecognized arguments: --resume auto' not in r.stderr:
            failures.append(f'{py_prog} --resume auto (an option it lacks): exit {r.returncode}, stderr '
                            f'{r.stderr[-300:]!r}; expected exit 2 naming it')
        # the same command line for both programs (what scripts/demo passes on)
        extra = ['--data-rows', str(args.rows)] + (['--max-steps', str(args.steps)] if moe else [])
        extra += ['--' + args.precision] + (['--lora'] if args.lora else [])
        extra += (['--device', args.device] if args.device else []) + args.layout.split()
        extra += ['--batch-size', str(args.batch_size)] if args.batch_size else []
        nproc = f'--nproc_per_node={args.np}'
        cpp_out = run([launcher, nproc, cpp_path, '--output-dir', cpp_dir] + extra, env)
        recipe_env = ('TWINKLE_MODEL', 'TWINKLE_DATA_ROWS', 'TWINKLE_MAX_STEPS', 'TWINKLE_OUTPUT_DIR',
                      'TWINKLE_MIXED_PRECISION', 'TWINKLE_LORA', 'TWINKLE_MOE_MESH')
        py_env = {k: v for k, v in env.items() if k not in recipe_env}  # the command line alone
        if args.python_dir:
            py_env['PYTHONPATH'] = os.path.abspath(args.python_dir)
            mpirun = [shutil.which('mpirun') or 'mpirun', '-np', str(args.np), '--oversubscribe', '--allow-run-as-root',
                      '--bind-to', 'none', '-x', 'PYTHONPATH', '-x', 'OMP_NUM_THREADS', sys.executable]
            out = run(mpirun + [py_path, '--output-dir', py_dir] + extra, py_env)
        else:
            out = run([launcher, nproc, py_path, '--output-dir', py_dir] + extra, py_env)
        # get_train_configs (logged by both) names the precision the C++ model was built with
        want = f'Mixed precision: {args.precision}'
        for who, text in (('C++', cpp_out), ('Python', out)):
            if args.device and f'Backend: twinkle (Megatron-style, {args.device})' not in text:
                failures.append(f'the {who} run logged no "Backend: twinkle (Megatron-style, {args.device})" line')
            if want not in text:
                got = re.findall(r'Mixed precision: \w+', text)
                failures.append(f'the {who} run logged {got[:1] or "no Mixed precision line"}, expected {want!r}')
            if args.lora and 'Adapter config: default {"r": 8, "lora_alpha": 32, "target_modules": "all-linear"' \
                    not in text:
                failures.append(f'the {who} run logged no adapter in get_train_configs (--lora)')
        mc, mp = read_metrics(os.path.join(cpp_dir, 'metrics.jsonl')), read_metrics(os.path.join(py_dir, 'metrics.jsonl'))
        batch = args.batch_size or 8
        steps = args.steps if moe else (args.rows + batch - 1) // batch
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
        files = (('adapter_config.json', 'adapter_model.safetensors') if args.lora else
                 ('config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json'))
        for f in files:
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
