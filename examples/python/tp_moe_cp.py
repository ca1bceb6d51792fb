# examples/python/tp_moe_cp.py — the cookbook's MoE + CP recipe (Twinkle cookbook/megatron/ascend/
# tp_moe_cp_npu.py: the call sequence of
# tp_npu.py with Qwen3-30B-A3B, data_slice range(128), global batch 2, mesh dp 1 x tp 2 x pp 2 x
# cp 2 x ep 2 on 8 ranks, ring context parallelism, the first 10 steps) as a Python script on
# twinkle's C++ core; the Python twin of examples/moe_cp_recipe.cpp (checked against it:
# tests/reference/check_python_recipe.py --recipe moe_cp).
# The ep groups are the tp groups and the experts are data-parallel over cp (Megatron-core's expert
# RankGenerator, megatron/core/parallel_state.py); every
# sequence is split over the two cp ranks (load-balanced chunks r and 2cp-1-r) and attention runs
# as Megatron's ring (cp_comm_type p2p); sequence parallelism is on for MoE with tp > 1.
# Differences from the cookbook script:
#  - device_type from --device (default 'cpu'), and the default model is the embedded models/qwen3-moe-tiny (Qwen3-MoE's
#    architecture at a size that trains on two cores; TWINKLE_MODEL overrides it);
#  - the cookbook's LoRA adapter line runs only with TWINKLE_LORA=1 ('all-linear': attention and every
#    expert's gate/up/down, PEFT's per-expert keys; the C++ recipe's --lora); by default all
#    parameters train (as the cookbook's comment "Comment this to use full-parameter training" allows,
#    and as the C++ recipe without --lora);
#  - mixed_precision keeps Twinkle's default 'bf16' (the C++ recipe's --bf16; TWINKLE_MIXED_PRECISION=no
#    for fp32);
#  - rank 0 writes metrics.jsonl (with the MoE router losses) and the final checkpoint.
#
#   build/bin/twinkle-run --nproc_per_node=8 examples/python/tp_moe_cp.py
#
# Options (examples/python/recipe_args.py, the names and meanings of examples/moe_recipe's; --help
# lists them): --model, --dataset, --data-rows (default 128), --max-steps (default 10, the cookbook's;
# 0 = one epoch), --batch-size (default 2), --lr, --output-dir (default output/python_tp_moe_cp),
# --dp/--tp/--pp/--cp/--ep (1/2/2/2/2), --lora [--lora-r --lora-alpha --lora-targets] (the cookbook's adapter line), --bf16 (Twinkle's default
# mixed_precision) / --fp32. TWINKLE_MODEL, TWINKLE_DATA_ROWS, TWINKLE_MAX_STEPS, TWINKLE_OUTPUT_DIR,
# TWINKLE_MIXED_PRECISION and TWINKLE_LORA give their defaults. Other options are refused by name.
import os

import twinkle
from recipe_args import MOE_METRICS, parse_recipe_args, train_and_save
from twinkle import DeviceMesh, LoraConfig, Platform, get_device_placement, get_logger
from twinkle.dataloader import DataLoader
from twinkle.dataset import Dataset, DatasetMeta
from twinkle.model import MegatronModel
from twinkle.preprocessor import SelfCognitionProcessor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# dp=1, tp=2, pp=2, cp=2 on 8 processes; ep=2 re-splits the same ranks for the experts
ARGS = parse_recipe_args('tp_moe_cp.py', model=os.path.join(ROOT, 'models', 'qwen3-moe-tiny'), data_rows=128,
                         max_steps=10, batch_size=2, output_dir='output/python_tp_moe_cp',
                         mesh=dict(dp_size=1, tp_size=2, pp_size=2, cp_size=2, ep_size=2))
MODEL_ID = ARGS.model
OUTPUT_DIR = ARGS.output_dir

device_mesh = DeviceMesh.from_sizes(**ARGS.mesh, device_type=ARGS.device)
twinkle.initialize(mode='local', global_device_mesh=device_mesh)

logger = get_logger()


def train():
    dataset = Dataset(dataset_meta=DatasetMeta(ARGS.dataset, data_slice=range(ARGS.data_rows)))
    dataset.set_template('Template', model_id=MODEL_ID, max_length=512)
    dataset.map(SelfCognitionProcessor('twinkle大模型', 'ModelScope社区'))
    dataset.encode()
    # global batch 2: both rows on the one data-parallel rank, each split over the cp ranks
    dataloader = DataLoader(dataset=dataset, batch_size=ARGS.batch_size, num_workers=0)

    model = MegatronModel(model_id=MODEL_ID, mixed_precision=ARGS.mixed_precision,
                          tensorboard_dir=ARGS.tensorboard_dir)
    lora_config = LoraConfig(r=ARGS.lora_r, lora_alpha=ARGS.lora_alpha, target_modules=ARGS.target_modules)
    # the cookbook's adapter line ("Comment this to use full-parameter training"): on with --lora
    if ARGS.lora:
        model.add_adapter_to_model('default', lora_config)
    model.set_optimizer(optimizer_cls='default', lr=ARGS.lr)
    # (examples/moe_recipe.h: decay over max(len, 3) steps so a tiny data slice keeps warm-up < decay)
    model.set_lr_scheduler(scheduler_cls='default', lr_warmup_steps=2, lr_decay_steps=max(len(dataloader), 3))
    logger.info(get_device_placement())
    logger.info(model.get_train_configs())
    logger.info(f'Total steps: {len(dataloader)}')

    steps = ARGS.max_steps or len(dataloader)  # --max-steps: 0 = one epoch
    train_and_save(model, dataloader, steps, OUTPUT_DIR, MOE_METRICS, logger, Platform.get_rank(),
                   save_interval=ARGS.save_interval, async_save=ARGS.async_save)


if __name__ == '__main__':
    train()
