# examples/python/recipe_args.py — the command line of the Python recipes (tp.py, tp_moe.py,
# tp_moe_cp.py): the options they share with their C++ twins (examples/tp_recipe.cpp,
# examples/moe_recipe.h), same names and meanings, so `make demo RECIPE=python` / scripts/demo pass
# the same extra arguments to either. An option the script does not have (--resume, --kernels, ...: the
# C++ recipes' extras) is refused by name (exit 2), never ignored.
# Each option's default comes from its TWINKLE_* environment variable (the scripts' older interface),
# else the script's own default; the command line wins over the environment. train_and_save is the
# recipes' training loop (the cookbook's loop, with --max-steps and metrics.jsonl as the C++ recipes have them).
import argparse
import json
import os

DENSE_METRICS = ('step', 'loss', 'grad_norm', 'lr', 'tokens', 'tokens_per_s', 'mfu', 'step_time_s')
MOE_METRICS = DENSE_METRICS + ('lm_loss', 'aux_loss', 'z_loss', 'expert_load_max', 'expert_load_min')


def _env_int(name, default):
    v = os.environ.get(name)
    if v is None or v == '':
        return default
    try:
        return int(v)
    except ValueError:
        raise SystemExit(f'{name}={v!r}: expected an integer')


def parse_recipe_args(prog, *, model, data_rows, max_steps, batch_size, output_dir, mesh, argv=None):
    """The recipe's options. model, data_rows, max_steps, batch_size, output_dir: the script's
    defaults (batch_size None: the script picks it); mesh: its DeviceMesh sizes, e.g. dict(dp_size=2, tp_size=2, pp_size=2) — each key
    becomes an option (--dp, --tp, --pp, --cp, --ep). Returns the argparse namespace with
    .mixed_precision ('bf16' or 'no'), .tensorboard_dir (None: off), .mesh (the sizes dict) and .target_modules (PEFT's
    target_modules: 'all-linear' or a list)."""
    ap = argparse.ArgumentParser(prog=prog, allow_abbrev=False, description='Options shared with the C++ recipe of the same name '
                                 '(the C++ recipe has more); environment variables TWINKLE_* give the defaults.')
    ap.add_argument('--model', default=os.environ.get('TWINKLE_MODEL') or model,
                    help='model directory or hub id (TWINKLE_MODEL; default: %(default)s)')
    ap.add_argument('--dataset', default='ms://swift/self-cognition', help='dataset id or file (default: %(default)s)')
    ap.add_argument('--data-rows', type=int, default=_env_int('TWINKLE_DATA_ROWS', data_rows),
                    help='data_slice = range(N) (TWINKLE_DATA_ROWS; default: %(default)s)')
    ap.add_argument('--max-steps', type=int, default=_env_int('TWINKLE_MAX_STEPS', max_steps),
                    help='optimizer steps, 0 = one epoch (TWINKLE_MAX_STEPS; default: %(default)s)')
    ap.add_argument('--batch-size', type=int, default=batch_size,
                    help='global batch size (default: %s)' % (batch_size or "2, or the data-parallel size if larger"))
    ap.add_argument('--lr', type=float, default=1e-4, help='peak learning rate (default: %(default)s)')
    ap.add_argument('--output-dir', default=os.environ.get('TWINKLE_OUTPUT_DIR') or output_dir,
                    help='where the final checkpoint and metrics.jsonl go (TWINKLE_OUTPUT_DIR; default: %(default)s)')
    ap.add_argument('--tensorboard-dir', default=os.environ.get('TWINKLE_TENSORBOARD_DIR') or None,
                    help="TensorBoard event files of every step's metrics here (rank 0; MegatronModel's "
                         "tensorboard_dir, Megatron's --tensorboard-dir; TWINKLE_TENSORBOARD_DIR; default: none)")
    ap.add_argument('--save-interval', type=int, default=0,
                    help='every N steps save OUTPUT_DIR/checkpoint-step-<step> with the optimizer state '
                         '(save(interval=N, save_optimizer=True); 0 = none, the default)')
    ap.add_argument('--async-save', action='store_true',
                    help="write the --save-interval checkpoints in a background thread from a copy of each rank's "
                         'slices while training goes on (save(async_save=True); the next save and the end of the '
                         'run wait for it: wait_for_save())')
    ap.add_argument('--device', default=os.environ.get('TWINKLE_DEVICE') or 'cpu', choices=('cpu', 'cuda', 'npu'),
                    help="the DeviceMesh's device_type (TWINKLE_DEVICE; default: %(default)s)")
    for key, size in mesh.items():
        ap.add_argument('--' + key[:-len('_size')], type=int, default=size, dest=key,
                        help=f'{key} of the DeviceMesh (default: %(default)s)')
    lora_env = os.environ.get('TWINKLE_LORA', '0')
    if lora_env not in ('0', '1'):
        raise SystemExit(f"TWINKLE_LORA={lora_env!r}: 1 (the cookbook's add_adapter_to_model line) or 0 (full training)")
    ap.add_argument('--lora', action='store_true', default=lora_env == '1',
                    help="the cookbook's add_adapter_to_model line: train a LoRA adapter (TWINKLE_LORA=1)")
    ap.add_argument('--lora-r', type=int, default=8, help='LoRA rank (with --lora; default: %(default)s)')
    ap.add_argument('--lora-alpha', type=float, default=32, help='LoRA alpha (with --lora; default: %(default)s)')
    ap.add_argument('--lora-targets', default='all-linear',
                    help='all-linear or comma-separated module names (with --lora; default: %(default)s)')
    mp_env = os.environ.get('TWINKLE_MIXED_PRECISION', 'bf16')
    prec = ap.add_mutually_exclusive_group()
    prec.add_argument('--bf16', dest='mixed_precision', action='store_const', const='bf16',
                      help="MegatronModel's mixed_precision='bf16' (Twinkle's default; TWINKLE_MIXED_PRECISION)")
    prec.add_argument('--fp32', dest='mixed_precision', action='store_const', const='no',
                      help="mixed_precision='no': fp32 everywhere (TWINKLE_MIXED_PRECISION=no)")
    ap.set_defaults(mixed_precision=mp_env)
    args = ap.parse_args(argv)
    for name in ('data_rows', 'batch_size'):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            ap.error(f'--{name.replace("_", "-")} must be >= 1, got {getattr(args, name)}')
    if args.max_steps < 0:
        ap.error(f'--max-steps must be >= 0 (0 = one epoch), got {args.max_steps}')
    if args.save_interval < 0:
        ap.error(f'--save-interval must be >= 0 (0 = none), got {args.save_interval}')
    if args.async_save and args.save_interval == 0:
        ap.error('--async-save needs --save-interval N (the checkpoints it writes)')
    args.mesh = {key: getattr(args, key) for key in mesh}
    args.target_modules = (args.lora_targets if args.lora_targets == 'all-linear' else
                           [t.strip() for t in args.lora_targets.split(',') if t.strip()])
    return args


def train_and_save(model, dataloader, steps, output_dir, metric_keys, logger, rank, save_interval=0, async_save=False):
    """The cookbook's loop: forward_backward, clip_grad_and_step and the metric log per batch, for `steps`
    optimizer steps (past one epoch the next begins, as in the C++ recipes); rank 0 writes the
    metric_keys of model.last_metrics() to output_dir/metrics.jsonl, one line per step. With
    save_interval N every N-th step saves output_dir/checkpoint-step-<step> with the optimizer state
    (consumed_train_samples = steps x the global batch), in the background with async_save. Ends by
    waiting for a pending asynchronous save, then saves the checkpoint 'last-checkpoint' under output_dir."""
    metrics_file = None
    if rank == 0:
        os.makedirs(output_dir, exist_ok=True)
        metrics_file = open(os.path.join(output_dir, 'metrics.jsonl'), 'w')
    step = 0
    while step < steps:
        for batch in dataloader:
            model.forward_backward(inputs=batch)
            model.clip_grad_and_step()
            metric = model.calculate_metric(is_training=True)
            logger.info(f'Current is step {step} of {len(dataloader)}, metric: {metric}')
            if metrics_file is not None:
                m = model.last_metrics()
                metrics_file.write(json.dumps({k: m[k] for k in m if k in metric_keys}) + '\n')
                metrics_file.flush()
            step += 1
            if save_interval:  # Twinkle's save(interval=N, save_optimizer=True): None on the other steps
                model.save(output_dir=output_dir, interval=save_interval, save_optimizer=True,
                           consumed_train_samples=step * dataloader.batch_size, async_save=async_save)
            if step >= steps:
                break
    if metrics_file is not None:
        metrics_file.close()
    if model.save_pending:  # the last asynchronous checkpoint is committed before the run ends
        model.wait_for_save()
        logger.info('the last asynchronous checkpoint is written')
    path = model.save('last-checkpoint', output_dir=output_dir)
    logger.info(f'checkpoint: {path}, metrics: {os.path.join(output_dir, "metrics.jsonl")}')
