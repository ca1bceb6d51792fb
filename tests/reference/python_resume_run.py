#!/usr/bin/env python3
"""The Python side of check_python_resume.py, launched by twinkle-run on 8 ranks (dp 2 x tp 2 x
pp 2): Twinkle's training loop over self-cognition with a cosine schedule, and Twinkle's
checkpoint calls — save(name, save_optimizer=True, consumed_train_samples=...) after step
SAVE_AT, and, with TWINKLE_LOAD set, load(name, output_dir, load_optimizer=True) plus
DataLoader.resume_from_checkpoint before the first step. Rank 0 appends one line per step to
OUTPUT_DIR/metrics.jsonl; a run to the end saves 'final' with the optimizer state.
Environment: TWINKLE_MODEL, TWINKLE_DATA_ROWS, TWINKLE_OUTPUT_DIR, TWINKLE_STEPS (the run's
length: lr_decay_steps), TWINKLE_SAVE_AT (save after this step and stop; 0 = run to the end),
TWINKLE_LOAD (a checkpoint name in OUTPUT_DIR, or empty)."""
import json
import os

import twinkle
from twinkle import DeviceMesh, Platform
from twinkle.dataloader import DataLoader
from twinkle.dataset import Dataset, DatasetMeta
from twinkle.model import MegatronModel
from twinkle.preprocessor import SelfCognitionProcessor

MODEL_ID = os.environ['TWINKLE_MODEL']
ROWS = int(os.environ['TWINKLE_DATA_ROWS'])
OUT = os.environ['TWINKLE_OUTPUT_DIR']
STEPS = int(os.environ['TWINKLE_STEPS'])
SAVE_AT = int(os.environ.get('TWINKLE_SAVE_AT', '0'))
LOAD = os.environ.get('TWINKLE_LOAD', '')
BATCH = 8

twinkle.initialize(mode='local', global_device_mesh=DeviceMesh.from_sizes(dp_size=2, tp_size=2, pp_size=2,
                                                                          device_type='cpu'))
dataset = Dataset(dataset_meta=DatasetMeta('ms://swift/self-cognition', data_slice=range(ROWS)))
dataset.set_template('Template', model_id=MODEL_ID, max_length=512)
dataset.map(SelfCognitionProcessor('twinkle大模型', 'ModelScope社区'))
dataset.encode()
dataloader = DataLoader(dataset=dataset, batch_size=BATCH, num_workers=0)
model = MegatronModel(model_id=MODEL_ID)
model.set_optimizer(optimizer_cls='default', lr=1e-3)
model.set_lr_scheduler(scheduler_cls='default', lr_warmup_steps=2, lr_decay_steps=STEPS)
if LOAD:
    state = model.load(LOAD, output_dir=OUT, load_optimizer=True)
    assert state['cur_step'] == model.cur_step, (state, model.cur_step)
    dataloader.resume_from_checkpoint(state['consumed_train_samples'])
metrics = open(os.path.join(OUT, 'metrics.jsonl'), 'a') if Platform.get_rank() == 0 else None
STOP = SAVE_AT or STEPS
while model.cur_step < STOP:
    for batch in dataloader:
        model.forward_backward(inputs=batch)
        model.clip_grad_and_step()
        if metrics is not None:
            m = model.last_metrics()
            metrics.write(json.dumps({k: m[k] for k in ('step', 'loss', 'grad_norm', 'lr')}) + '\n')
            metrics.flush()
        if model.cur_step == SAVE_AT:
            model.save(f'checkpoint-{SAVE_AT}', output_dir=OUT, save_optimizer=True,
                       consumed_train_samples=model.cur_step * BATCH)
        if model.cur_step >= STOP:
            break
if metrics is not None:
    metrics.close()
if not SAVE_AT:
    # the final state in the gathered form (full tensors the check compares file by file); the
    # checkpoint the second launch loads is the default, sharded one
    model.save('final', output_dir=OUT, save_optimizer=True, consumed_train_samples=model.cur_step * BATCH,
               save_format='gathered')
