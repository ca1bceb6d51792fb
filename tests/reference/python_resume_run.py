#!/usr/bin/env python3
"""The Python side of check_python_resume.py, launched by twinkle-run on 8 ranks (dp 2 x tp 2 x
pp 2, or TWINKLE_MESH): Twinkle's training loop over self-cognition with a cosine schedule, and Twinkle's
checkpoint calls — save(name, save_optimizer=True, consumed_train_samples=...) after step
SAVE_AT, and, with TWINKLE_LOAD set, load(name, output_dir, load_optimizer=True) plus
DataLoader.resume_from_checkpoint before the first step. Rank 0 appends one line per step to
OUTPUT_DIR/metrics.jsonl; a run to the end saves 'final' with the optimizer state.
With TWINKLE_ASYNC_SAVE=1 the save is save(..., async_save=True): the run checks that it returned
before the checkpoint exists (save_pending), trains on to TWINKLE_STEPS while the writer threads
write (those steps' lines go to OUTPUT_DIR/metrics_overlapped.jsonl), then wait_for_save() commits
it; no 'final' is saved.
Environment: TWINKLE_MODEL, TWINKLE_DATA_ROWS, TWINKLE_OUTPUT_DIR, TWINKLE_STEPS (the run's
length: lr_decay_steps), TWINKLE_SAVE_AT (save after this step and stop; 0 = run to the end),
TWINKLE_LOAD (a checkpoint name in OUTPUT_DIR, or empty), TWINKLE_MESH (dp,tp,pp; default 2,2,2),
TWINKLE_ASYNC_SAVE (1 = as above)."""
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
ASYNC = os.environ.get('TWINKLE_ASYNC_SAVE', '0') == '1'
DP, TP, PP = (int(x) for x in os.environ.get('TWINKLE_MESH', '2,2,2').split(','))
BATCH = 8

twinkle.initialize(mode='local', global_device_mesh=DeviceMesh.from_sizes(dp_size=DP, tp_size=TP, pp_size=PP,
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
STOP = STEPS if ASYNC else SAVE_AT or STEPS
while model.cur_step < STOP:
    for batch in dataloader:
        model.forward_backward(inputs=batch)
        model.clip_grad_and_step()
        if metrics is not None:
            m = model.last_metrics()
            metrics.write(json.dumps({k: m[k] for k in ('step', 'loss', 'grad_norm', 'lr')}) + '\n')
            metrics.flush()
        if model.cur_step == SAVE_AT:
            d = model.save(f'checkpoint-{SAVE_AT}', output_dir=OUT, save_optimizer=True,
                           consumed_train_samples=model.cur_step * BATCH, async_save=ASYNC)
            if ASYNC:
                # returned with the write in flight: committed only after every rank's writer is done
                assert model.save_pending, 'save(async_save=True) returned with no pending save'
                assert not os.path.exists(d), f'{d} exists before the asynchronous save was committed'
                if metrics is not None:  # the steps that run during the write
                    metrics.close()
                    metrics = open(os.path.join(OUT, 'metrics_overlapped.jsonl'), 'w')
        if model.cur_step >= STOP:
            break
if metrics is not None:
    metrics.close()
if ASYNC:
    model.wait_for_save()
    assert not model.save_pending
    assert os.path.exists(os.path.join(OUT, f'checkpoint-{SAVE_AT}', 'trainer_state.json'))
if not SAVE_AT:
    # the final state in the gathered form (full tensors the check compares file by file); the
    # checkpoint the second launch loads is the default, sharded one
    model.save('final', output_dir=OUT, save_optimizer=True, consumed_train_samples=model.cur_step * BATCH,
               save_format='gathered')
