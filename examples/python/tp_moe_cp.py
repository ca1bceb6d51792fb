# examples/python/tp_moe_cp.py — the seed's third recipe (Twinkle cookbook/megatron/ascend/
# tp_moe_cp_npu.py; call sequence in /work/shared/spec/twinkle-behaviour.md §0: the one of
# tp_npu.py with Qwen3-30B-A3B, data_slice range(128), global batch 2, mesh dp 1 x tp 2 x pp 2 x
# cp 2 x ep 2 on 8 ranks, ring context parallelism, the first 10 steps) as a Python script on
# twinkle's C++ core; the Python twin of examples/moe_cp_recipe.cpp (checked against it:
# tests/reference/check_python_recipe.py --recipe moe_cp).
# The ep groups are the tp groups and the experts are data-parallel over cp (spec §1.1); every
# sequence is split over the two cp ranks (load-balanced chunks r and 2cp-1-r) and attention runs
# as Megatron's ring (cp_comm_type p2p); sequence parallelism is on for MoE with tp > 1.
# Differences from the seed:
#  - device_type='cpu', and the default model is the embedded models/qwen3-moe-tiny (Qwen3-MoE's
#    architecture at a size that trains on two cores; TWINKLE_MODEL overrides it);
#  - the seed's LoRA adapter line runs only with TWINKLE_LORA=1 ('all-linear': attention and every
#    expert's gate/up/down, PEFT's per-expert keys; the C++ recipe's --lora); by default all
#    parameters train (as the seed's comment "Comment this to use full-parameter training" allows,
#    and as the C++ recipe without --lora);
#  - mixed_precision keeps Twinkle's default 'bf16' (the C++ recipe's --bf16; TWINKLE_MIXED_PRECISION=no
#    for fp32);
#  - rank 0 writes metrics.jsonl (with the MoE router losses) and the final checkpoint.
#
#   build/bin/twinkle-run --nproc_per_node=8 examples/python/tp_moe_cp.py
#
# Environment: TWINKLE_MODEL, TWINKLE_DATA_ROWS (default 128), TWINKLE_MAX_STEPS (default: 10, the
# seed's), TWINKLE_OUTPUT_DIR (default output/python_tp_moe_cp), TWINKLE_MIXED_PRECISION (bf16,
# Twinkle's default, or no = fp32), TWINKLE_LORA (1: the seed's adapter line).
import json
import os

import twinkle
from twinkle import DeviceMesh, LoraConfig, Platform, get_device_placement, get_logger
from twinkle.dataloader import DataLoader
from twinkle.dataset import Dataset, DatasetMeta
from twinkle.model import MegatronModel
from twinkle.preprocessor import SelfCognitionProcessor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_ID = os.environ.get('TWINKLE_MODEL') or os.path.join(ROOT, 'models', 'qwen3-moe-tiny')
DATA_ROWS = int(os.environ.get('TWINKLE_DATA_ROWS', '128'))
MAX_STEPS = int(os.environ.get('TWINKLE_MAX_STEPS', '10'))
OUTPUT_DIR = os.environ.get('TWINKLE_OUTPUT_DIR', 'output/python_tp_moe_cp')
MIXED_PRECISION = os.environ.get('TWINKLE_MIXED_PRECISION', 'bf16')  # MegatronModel's default, Twinkle's
USE_LORA = os.environ.get('TWINKLE_LORA', '0')
if USE_LORA not in ('0', '1'):
    raise SystemExit(f'TWINKLE_LORA={USE_LORA!r}: 1 (the seed\'s add_adapter_to_model line) or 0 (full training)')

# dp=1, tp=2, pp=2, cp=2 on 8 processes; ep=2 re-splits the same ranks for the experts
device_mesh = DeviceMesh.from_sizes(dp_size=1, tp_size=2, pp_size=2, cp_size=2, ep_size=2, device_type='cpu')
twinkle.initialize(mode='local', global_device_mesh=device_mesh)

logger = get_logger()


def train():
    dataset = Dataset(dataset_meta=DatasetMeta('ms://swift/self-cognition', data_slice=range(DATA_ROWS)))
    dataset.set_template('Template', model_id=MODEL_ID, max_length=512)
    dataset.map(SelfCognitionProcessor('twinkle大模型', 'ModelScope社区'))
    dataset.encode()
    # global batch 2: both rows on the one data-parallel rank, each split over the cp ranks
    dataloader = DataLoader(dataset=dataset, batch_size=2, num_workers=0)

    model = MegatronModel(model_id=MODEL_ID, mixed_precision=MIXED_PRECISION)
    lora_config = LoraConfig(r=8, lora_alpha=32, target_modules='all-linear')
    # the seed's adapter line ("Comment this to use full-parameter training"): on with TWINKLE_LORA=1
    if USE_LORA == '1':
        model.add_adapter_to_model('default', lora_config)
    model.set_optimizer(optimizer_cls='default', lr=1e-4)
    # (examples/moe_recipe.h: decay over max(len, 3) steps so a tiny data slice keeps warm-up < decay)
    model.set_lr_scheduler(scheduler_cls='default', lr_warmup_steps=2, lr_decay_steps=max(len(dataloader), 3))
    logger.info(get_device_placement())
    logger.info(model.get_train_configs())
    logger.info(f'Total steps: {len(dataloader)}')

    metrics_file = None
    if Platform.get_rank() == 0:
        os.makedirs(OUTPUT_DIR, exist_ok=True)
        metrics_file = open(os.path.join(OUTPUT_DIR, 'metrics.jsonl'), 'w')
    for step, batch in enumerate(dataloader):
        if step >= MAX_STEPS:
            break
        model.forward_backward(inputs=batch)
        model.clip_grad_and_step()
        metric = model.calculate_metric(is_training=True)
        logger.info(f'Current is step {step} of {len(dataloader)}, metric: {metric}')
        if metrics_file is not None:
            m = model.last_metrics()
            metrics_file.write(json.dumps({k: m[k] for k in m if k in (
                'step', 'loss', 'grad_norm', 'lr', 'tokens', 'lm_loss', 'aux_loss', 'z_loss', 'expert_load_max',
                'expert_load_min', 'tokens_per_s', 'mfu', 'step_time_s')}) + '\n')
            metrics_file.flush()
    if metrics_file is not None:
        metrics_file.close()
    path = model.save('last-checkpoint', output_dir=OUTPUT_DIR)
    logger.info(f'checkpoint: {path}, metrics: {os.path.join(OUTPUT_DIR, "metrics.jsonl")}')


if __name__ == '__main__':
    train()
