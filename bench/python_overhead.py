#!/usr/bin/env python3
"""Python overhead per step of the Python recipes, measured inside the run.

Runs the loop of examples/python/tp.py (--recipe tp: dp2 tp2 pp2, models/qwen3-tiny, global batch
8) or of examples/python/tp_moe_cp.py (--recipe moe_cp: tp2 pp2 cp2 ep2, models/qwen3-moe-tiny,
global batch 2) on 8 ranks under twinkle-run (or one process), with MegatronModel's default
mixed_precision as the scripts (Twinkle's 'bf16'; --mixed-precision no for fp32), and times, on
rank 0, per step:
  step      wall time of the whole loop body (next batch, forward_backward, clip_grad_and_step,
            calculate_metric), as the Python user sees it;
  python    the work the Python layer adds to the C++ calls: building the batch's row dicts
            (DataLoader iteration), converting them back to rows (the same conversion
            forward_backward does, _core._convert_rows), the wrappers and the metric dict.
  outside  the whole loop body minus the time the C++ core measured inside forward_backward and
            clip_grad_and_step (last_metrics()['step_time_s']): everything else, i.e. the above plus
            the pybind11 calls, GIL hand-offs and wrappers — an upper bound of the Python overhead
            (it also holds calculate_metric's small C++ part).
Prints the means and python/step, outside/step in percent (target < 2 %).

  build/bin/twinkle-run --nproc_per_node=8 bench/python_overhead.py [--recipe tp|moe_cp] [--rows 64]
                        [--mixed-precision bf16|no]
"""
import argparse
import os
import time

import twinkle
from twinkle import DeviceMesh, _core
from twinkle.dataloader import DataLoader
from twinkle.dataset import Dataset, DatasetMeta
from twinkle.model import MegatronModel
from twinkle.preprocessor import SelfCognitionProcessor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --recipe: (8-rank mesh, default model, global batch) of examples/python/<script>
RECIPES = {
    'tp': (dict(dp_size=2, tp_size=2, pp_size=2), 'qwen3-tiny', 8),
    'moe_cp': (dict(dp_size=1, tp_size=2, pp_size=2, cp_size=2, ep_size=2), 'qwen3-moe-tiny', 2),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--recipe', choices=sorted(RECIPES), default='tp')
    ap.add_argument('--rows', type=int, default=64)
    ap.add_argument('--model', default=None, help='default: the recipe\'s embedded model')
    ap.add_argument('--mixed-precision', default='bf16', choices=('bf16', 'no'),
                    help="MegatronModel's mixed_precision (default 'bf16': Twinkle's and the scripts')")
    a = ap.parse_args()
    sizes, model_name, batch_size = RECIPES[a.recipe]
    a.model = a.model or os.path.join(ROOT, 'models', model_name)
    world = _core.world_size()
    mesh = DeviceMesh.from_sizes(**sizes) if world == 8 else DeviceMesh.from_sizes()
    twinkle.initialize(mode='local', global_device_mesh=mesh)
    ds = Dataset(dataset_meta=DatasetMeta('ms://swift/self-cognition', data_slice=range(a.rows)))
    ds.set_template('Template', model_id=a.model, max_length=512)
    ds.map(SelfCognitionProcessor('twinkle大模型', 'ModelScope社区'))
    ds.encode()
    dl = DataLoader(dataset=ds, batch_size=batch_size)
    model = MegatronModel(model_id=a.model, mixed_precision=a.mixed_precision)
    model.set_optimizer(optimizer_cls='default', lr=1e-4)
    model.set_lr_scheduler(scheduler_cls='default', lr_warmup_steps=2, lr_decay_steps=max(len(dl), 3))
    steps, py, core_fb, core_step, core_metric, outside = [], [], [], [], [], []
    it = iter(dl)
    while True:
        t0 = time.perf_counter()
        batch = next(it, None)
        t1 = time.perf_counter()
        if batch is None:
            break
        _core._convert_rows(batch)
        t2 = time.perf_counter()
        model.forward_backward(inputs=batch)
        t3 = time.perf_counter()
        model.clip_grad_and_step()
        t4 = time.perf_counter()
        model.calculate_metric(is_training=True)
        t5 = time.perf_counter()
        # python = batch dicts + conversion (counted once: forward_backward repeats it inside t3-t2)
        py.append((t1 - t0) + (t2 - t1))
        steps.append((t5 - t0) - (t2 - t1))  # the loop body without the extra measuring conversion
        core_fb.append(t3 - t2)
        core_step.append(t4 - t3)
        core_metric.append(t5 - t4)
        outside.append(steps[-1] - model.last_metrics()['step_time_s'])
    if _core.world_rank() == 0:
        k = 1 if len(steps) > 1 else 0  # drop the first step (warm-up)
        mean = lambda v: sum(v[k:]) / max(1, len(v) - k)  # noqa: E731
        print(f'{a.recipe} ({a.mixed_precision}): ranks {world}, steps {len(steps)} (first dropped): step {mean(steps) * 1e3:.1f} ms, '
              f'python layer {mean(py) * 1e3:.3f} ms = {100 * mean(py) / mean(steps):.3f} % of the step '
              f'(forward_backward {mean(core_fb) * 1e3:.1f} ms, clip_grad_and_step {mean(core_step) * 1e3:.1f} ms, '
              f'calculate_metric {mean(core_metric) * 1e3:.2f} ms); outside the C++ step {mean(outside) * 1e3:.3f} ms = '
              f'{100 * mean(outside) / mean(steps):.3f} %')


if __name__ == '__main__':
    main()
