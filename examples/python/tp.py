# examples/python/tp.py — the seed's dense recipe (Twinkle cookbook/megatron/ascend/tp_npu.py and
# its GPU twin cookbook/megatron/tp.py; call sequence in /work/shared/spec/twinkle-behaviour.md §0)
# as a Python script on twinkle's C++ core. Differences from the seed: device_type='cpu', the
# default model is the embedded models/qwen3-tiny (TWINKLE_MODEL overrides it), the seed's LoRA
# adapter line runs only with TWINKLE_LORA=1 (default: full-parameter training, as the seed's
# comment "Comment this to use full-parameter training" allows, like examples/tp_recipe.cpp), and
# rank 0 writes metrics.jsonl next to the final checkpoint. mixed_precision keeps Twinkle's default
# 'bf16' (TWINKLE_MIXED_PRECISION=no for fp32). Checked against the C++ recipe:
# tests/reference/check_python_recipe.py (this script == `examples/tp_recipe --bf16`).
#
#   build/bin/twinkle-run --nproc_per_node=8 examples/python/tp.py      (make demo RECIPE=python)
#
# Environment: TWINKLE_MODEL (model dir or hub id), TWINKLE_DATA_ROWS (data_slice = range(N),
# default 256), TWINKLE_OUTPUT_DIR (default output/python_tp), TWINKLE_MIXED_PRECISION (MegatronModel's
# mixed_precision: bf16, Twinkle's default, or no = fp32), TWINKLE_LORA (1: the seed's
# add_adapter_to_model line, only the adapter trains and the save is PEFT's adapter directory; 0 default).
import json
import os

import twinkle
from twinkle import DeviceMesh, LoraConfig, Platform, get_device_placement, get_logger
from twinkle.dataloader import DataLoader
from twinkle.dataset import Dataset, DatasetMeta
from twinkle.model import MegatronModel
from twinkle.preprocessor import SelfCognitionProcessor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_ID = os.environ.get('TWINKLE_MODEL') or os.path.join(ROOT, 'models', 'qwen3-tiny')
DATA_ROWS = int(os.environ.get('TWINKLE_DATA_ROWS', '256'))
OUTPUT_DIR = os.environ.get('TWINKLE_OUTPUT_DIR', 'output/python_tp')
MIXED_PRECISION = os.environ.get('TWINKLE_MIXED_PRECISION', 'bf16')  # MegatronModel's default, Twinkle's
USE_LORA = os.environ.get('TWINKLE_LORA', '0')
if USE_LORA not in ('0', '1'):
    raise SystemExit(f'TWINKLE_LORA={USE_LORA!r}: 1 (the seed\'s add_adapter_to_model line) or 0 (full training)')

# dp=2, tp=2, pp=2 on 8 processes
device_mesh = DeviceMesh.from_sizes(dp_size=2, tp_size=2, pp_size=2, device_type='cpu')
twinkle.initialize(mode='local', global_device_mesh=device_mesh)

logger = get_logger()


def train():
    dataset = Dataset(dataset_meta=DatasetMeta('ms://swift/self-cognition', data_slice=range(DATA_ROWS)))
    dataset.set_template('Template', model_id=MODEL_ID, max_length=512)
    dataset.map(SelfCognitionProcessor('twinkle大模型', 'ModelScope社区'))
    dataset.encode()
    # global batch 8: 4 rows per data-parallel rank
    dataloader = DataLoader(dataset=dataset, batch_size=8, num_workers=0)

    model = MegatronModel(model_id=MODEL_ID, mixed_precision=MIXED_PRECISION)
    lora_config = LoraConfig(r=8, lora_alpha=32, target_modules='all-linear')
    # the seed's adapter line ("Comment this to use full-parameter training"): on with TWINKLE_LORA=1
    if USE_LORA == '1':
        model.add_adapter_to_model('default', lora_config)
    model.set_optimizer(optimizer_cls='default', lr=1e-4)
    model.set_lr_scheduler(scheduler_cls='default', lr_warmup_steps=2, lr_decay_steps=len(dataloader))
    logger.info(get_device_placement())
    logger.info(model.get_train_configs())
    logger.info(f'Total steps: {len(dataloader)}')

    metrics_file = None
    if Platform.get_rank() == 0:
        os.makedirs(OUTPUT_DIR, exist_ok=True)
        metrics_file = open(os.path.join(OUTPUT_DIR, 'metrics.jsonl'), 'w')
    for step, batch in enumerate(dataloader):
        model.forward_backward(inputs=batch)
        model.clip_grad_and_step()
        metric = model.calculate_metric(is_training=True)
        logger.info(f'Current is step {step} of {len(dataloader)}, metric: {metric}')
        if metrics_file is not None:
            m = model.last_metrics()
            metrics_file.write(json.dumps({k: m[k] for k in ('step', 'loss', 'grad_norm', 'lr', 'tokens',
                                                               'tokens_per_s', 'mfu', 'step_time_s')}) + '\n')
            metrics_file.flush()
    if metrics_file is not None:
        metrics_file.close()
    path = model.save('last-checkpoint', output_dir=OUTPUT_DIR)
    logger.info(f'checkpoint: {path}, metrics: {os.path.join(OUTPUT_DIR, "metrics.jsonl")}')


if __name__ == '__main__':
    train()
