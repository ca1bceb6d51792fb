# examples/python/tp.py — the cookbook's dense recipe (Twinkle cookbook/megatron/ascend/tp_npu.py and
# its GPU twin cookbook/megatron/tp.py)
# as a Python script on twinkle's C++ core. Differences from the cookbook script: device_type from --device (default 'cpu'), the
# default model is the embedded models/qwen3-tiny (--model overrides it), the cookbook's LoRA
# adapter line runs only with --lora (default: full-parameter training, as the cookbook's
# comment "Comment this to use full-parameter training" allows, like examples/tp_recipe.cpp), the
# options below, and rank 0 writes metrics.jsonl next to the final checkpoint. mixed_precision keeps
# Twinkle's default 'bf16' (--fp32 for mixed_precision='no'). Checked against the C++ recipe:
# tests/reference/check_python_recipe.py (this script == `examples/tp_recipe --bf16`).
#
#   build/bin/twinkle-run --nproc_per_node=8 examples/python/tp.py [options]   (make demo RECIPE=python)
#
# Options (examples/python/recipe_args.py, the names and meanings of examples/tp_recipe's; --help
# lists them): --model, --dataset, --data-rows (data_slice = range(N), default 256), --max-steps
# (0 = one epoch, the default), --batch-size (8), --lr, --output-dir (default output/python_tp),
# --dp/--tp/--pp (2/2/2), --lora [--lora-r --lora-alpha --lora-targets] (the cookbook's
# add_adapter_to_model line: only the adapter trains and the save is PEFT's adapter directory),
# --bf16 (MegatronModel's default mixed_precision, Twinkle's) / --fp32 (mixed_precision='no'), --device
# (cpu | cuda | npu: the DeviceMesh's device_type).
# The environment variables TWINKLE_MODEL, TWINKLE_DATA_ROWS, TWINKLE_MAX_STEPS, TWINKLE_OUTPUT_DIR,
# TWINKLE_MIXED_PRECISION and TWINKLE_LORA give their defaults. Other options are refused by name.
import os

import twinkle
from recipe_args import DENSE_METRICS, parse_recipe_args, train_and_save
from twinkle import DeviceMesh, LoraConfig, Platform, get_device_placement, get_logger
from twinkle.dataloader import DataLoader
from twinkle.dataset import Dataset, DatasetMeta
from twinkle.model import MegatronModel
from twinkle.preprocessor import SelfCognitionProcessor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = parse_recipe_args('tp.py', model=os.path.join(ROOT, 'models', 'qwen3-tiny'), data_rows=256, max_steps=0,
                         batch_size=8, output_dir='output/python_tp', mesh=dict(dp_size=2, tp_size=2, pp_size=2, vpp_size=1))
MODEL_ID = ARGS.model
OUTPUT_DIR = ARGS.output_dir

# dp=2, tp=2, pp=2 on 8 processes
device_mesh = DeviceMesh.from_sizes(**ARGS.mesh, device_type=ARGS.device)
twinkle.initialize(mode='local', global_device_mesh=device_mesh)

logger = get_logger()


def train():
    dataset = Dataset(dataset_meta=DatasetMeta(ARGS.dataset, data_slice=range(ARGS.data_rows)))
    dataset.set_template('Template', model_id=MODEL_ID, max_length=512)
    dataset.map(SelfCognitionProcessor('twinkle大模型', 'ModelScope社区'))
    dataset.encode()
    # global batch --batch-size (8: 4 rows per data-parallel rank)
    dataloader = DataLoader(dataset=dataset, batch_size=ARGS.batch_size, num_workers=0)
    # --max-steps (0 = one epoch); the schedule decays over the steps run, at least 3 (examples/tp_recipe.cpp)
    steps = ARGS.max_steps or len(dataloader)

    model = MegatronModel(model_id=MODEL_ID, mixed_precision=ARGS.mixed_precision,
                          tensorboard_dir=ARGS.tensorboard_dir)
    lora_config = LoraConfig(r=ARGS.lora_r, lora_alpha=ARGS.lora_alpha, target_modules=ARGS.target_modules)
    # the cookbook's adapter line ("Comment this to use full-parameter training"): on with --lora
    if ARGS.lora:
        model.add_adapter_to_model('default', lora_config)
    model.set_optimizer(optimizer_cls='default', lr=ARGS.lr)
    model.set_lr_scheduler(scheduler_cls='default', lr_warmup_steps=2, lr_decay_steps=max(steps, 3))
    logger.info(get_device_placement())
    logger.info(model.get_train_configs())
    logger.info(f'Total steps: {len(dataloader)}')

    train_and_save(model, dataloader, steps, OUTPUT_DIR, DENSE_METRICS, logger, Platform.get_rank(),
                   save_interval=ARGS.save_interval, async_save=ARGS.async_save)


if __name__ == '__main__':
    train()
