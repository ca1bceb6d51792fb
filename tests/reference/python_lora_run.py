#!/usr/bin/env python3
"""The Python side of check_python_lora.py, launched by twinkle-run: the same run as
`twinkle train --dataset ms://swift/self-cognition --self-cognition NAME,AUTHOR --data-slice 0:N
--batch-size 8 --lr LR --tp 2 --dp 2 --lora-r 4 --lora-alpha 16 --lora-targets q_proj,v_proj,down_proj
--lora-rslora --lora-init false --bf16` written with Twinkle's Python API: LoRA given as PEFT's
LoraConfig, mixed_precision left at MegatronModel's default ('bf16', Twinkle's).
Environment: TWINKLE_MODEL, TWINKLE_DATA_ROWS, TWINKLE_OUTPUT_DIR (metrics.jsonl + the adapter in
adapter/), TWINKLE_LR."""
import json
import os

import twinkle
from twinkle import DeviceMesh, LoraConfig, Platform
from twinkle.dataloader import DataLoader
from twinkle.dataset import Dataset, DatasetMeta
from twinkle.model import MegatronModel
from twinkle.preprocessor import SelfCognitionProcessor

MODEL_ID = os.environ['TWINKLE_MODEL']
ROWS = int(os.environ['TWINKLE_DATA_ROWS'])
OUT = os.environ['TWINKLE_OUTPUT_DIR']
LR = float(os.environ['TWINKLE_LR'])

twinkle.initialize(mode='local', global_device_mesh=DeviceMesh.from_sizes(dp_size=2, tp_size=2, device_type='cpu'),
                   seed=42)
dataset = Dataset(dataset_meta=DatasetMeta('ms://swift/self-cognition', data_slice=range(ROWS)))
dataset.set_template('Template', model_id=MODEL_ID)
dataset.map(SelfCognitionProcessor('twinkle大模型', 'ModelScope社区'))
dataset.encode()
dataloader = DataLoader(dataset=dataset, batch_size=8, num_workers=0)
model = MegatronModel(model_id=MODEL_ID)
model.add_adapter_to_model('default', LoraConfig(r=4, lora_alpha=16, target_modules=['q_proj', 'v_proj', 'down_proj'],
                                                 use_rslora=True, init_lora_weights=False))
model.set_optimizer(optimizer_cls='default', lr=LR)
metrics = open(os.path.join(OUT, 'metrics.jsonl'), 'w') if Platform.get_rank() == 0 else None
for batch in dataloader:
    model.forward_backward(inputs=batch)
    model.clip_grad_and_step()
    if metrics is not None:
        m = model.last_metrics()
        metrics.write(json.dumps({k: m[k] for k in ('step', 'loss', 'grad_norm', 'lr')}) + '\n')
if metrics is not None:
    metrics.close()
model.save('adapter', output_dir=OUT)
