#!/usr/bin/env python3
"""A LoRA run written in Python (tests/reference/python_lora_run.py: PEFT's LoraConfig given to
MegatronModel.add_adapter_to_model) equals the C++ command line's LoRA run (`twinkle train
--lora-* --bf16`: the Python side keeps MegatronModel's default mixed_precision, Twinkle's 'bf16') on
the same data, seed and layout (4 ranks, tp 2 x dp 2): every step's loss, grad norm
and lr within 1e-6 relative, and the saved PEFT adapters identical (adapter_model.safetensors byte
for byte, adapter_config.json equal). The LoraConfig sets every field the binding maps to a
non-default value (r 4, lora_alpha 16, use_rslora, init_lora_weights False so the adapter is not a
no-op at step 1, a target list), so a binding that drops or renames one changes the numbers.

usage: check_python_lora.py --build BUILD [--rows 24]
"""
import argparse
import filecmp
import json
import os
import shutil
import sys
import tempfile

from harness import read_metrics, rel, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', required=True)
    ap.add_argument('--rows', type=int, default=24)
    a = ap.parse_args()
    launcher = os.path.join(a.build, 'bin', 'twinkle-run')
    model = os.path.join(ROOT, 'models', 'qwen3-tiny')
    lr = '2e-3'
    tmp = tempfile.mkdtemp(prefix='twinkle-python-lora-')
    env = dict(os.environ, OMP_NUM_THREADS='1')
    failures = []
    try:
        cpp, py = os.path.join(tmp, 'cpp'), os.path.join(tmp, 'py')
        os.makedirs(py)
        run([launcher, '--nproc_per_node=4', os.path.join(a.build, 'bin', 'twinkle'), 'train', '--model', model,
             '--dataset', 'ms://swift/self-cognition', '--self-cognition', 'twinkle大模型,ModelScope社区',
             '--data-slice', f'0:{a.rows}', '--batch-size', '8', '--lr', lr, '--tp', '2', '--dp', '2',
             '--lora-r', '4', '--lora-alpha', '16', '--lora-targets', 'q_proj,v_proj,down_proj', '--lora-rslora',
             '--lora-init', 'false', '--bf16', '--metrics-file', os.path.join(cpp, 'metrics.jsonl'),
             '--output-dir', os.path.join(cpp, 'adapter')], env)
        run([launcher, '--nproc_per_node=4', os.path.join(ROOT, 'tests', 'reference', 'python_lora_run.py')],
            dict(env, TWINKLE_MODEL=model, TWINKLE_DATA_ROWS=str(a.rows), TWINKLE_OUTPUT_DIR=py, TWINKLE_LR=lr))
        mc, mp = read_metrics(os.path.join(cpp, 'metrics.jsonl')), read_metrics(os.path.join(py, 'metrics.jsonl'))
        steps = (a.rows + 7) // 8
        if len(mc) != steps or len(mp) != steps:
            failures.append(f'expected {steps} steps, got {len(mc)} (C++) and {len(mp)} (Python)')
        for x, y in zip(mp, mc):
            print(f"step {y['step']}: loss python {x['loss']:.10f} c++ {y['loss']:.10f} | grad_norm "
                  f"{x['grad_norm']:.10f} {y['grad_norm']:.10f} | lr {x['lr']:.6e} {y['lr']:.6e}")
            for k in ('loss', 'grad_norm', 'lr'):
                if rel(x[k], y[k]) > 1e-6:
                    failures.append(f"step {y['step']}: {k} {x[k]} (Python) vs {y[k]} (C++)")
        if len(mc) >= 2 and mc[-1]['loss'] >= mc[0]['loss']:
            failures.append(f"the LoRA run did not lower the loss ({mc[0]['loss']} -> {mc[-1]['loss']})")
        pa, ca = os.path.join(py, 'adapter'), os.path.join(cpp, 'adapter')
        f = 'adapter_model.safetensors'
        if not (os.path.exists(os.path.join(pa, f)) and os.path.exists(os.path.join(ca, f))):
            failures.append(f'{f} missing (Python {os.path.exists(os.path.join(pa, f))}, '
                            f'C++ {os.path.exists(os.path.join(ca, f))})')
        elif not filecmp.cmp(os.path.join(pa, f), os.path.join(ca, f), shallow=False):
            failures.append(f'{f} differs between the Python and the C++ run')
        with open(os.path.join(pa, 'adapter_config.json')) as fp, open(os.path.join(ca, 'adapter_config.json')) as fc:
            jp, jc = json.load(fp), json.load(fc)
        if jp != jc:
            failures.append(f'adapter_config.json differs: Python {jp} C++ {jc}')
        if (jc.get('r'), jc.get('lora_alpha'), jc.get('use_rslora')) != (4, 16, True):
            failures.append(f"adapter_config.json: r/lora_alpha/use_rslora {jc.get('r')}/{jc.get('lora_alpha')}/"
                            f"{jc.get('use_rslora')}, expected 4/16/True")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for m in failures:
        print('MISMATCH', m)
    print(f'check_python_lora: {len(failures)} mismatches')
    sys.exit(1 if failures else 0)


if __name__ == '__main__':
    main()
