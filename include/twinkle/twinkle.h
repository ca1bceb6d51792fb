// twinkle/twinkle.h — the umbrella header of twinkle's public API.
//
// The C++ counterpart of `import twinkle` for the Megatron backend:
//
//   DeviceMesh mesh = DeviceMesh::from_sizes({.dp = 2, .tp = 2, .pp = 2, .device_type = "cpu"});
//   twinkle::initialize({.mode = "local", .global_device_mesh = mesh});
//   Dataset ds(DatasetMeta("ms://swift/self-cognition", DataSlice::range(256)));
//   ds.set_template("Template", {.model_id = MODEL_ID, .max_length = 512});
//   ds.map(SelfCognitionProcessor("twinkle大模型", "ModelScope社区"));  ds.encode();
//   DataLoader loader(ds, {.batch_size = 8});
//   MegatronModel model(MODEL_ID);
//   model.set_optimizer("default", {.lr = 1e-4});
//   for (auto& batch : loader) { model.forward_backward(batch); model.clip_grad_and_step(); }
#pragma once

#include "twinkle/core/error.h"
#include "twinkle/core/option_check.h"
#include "twinkle/core/tensor.h"
#include "twinkle/data/batch.h"
#include "twinkle/data/dataloader.h"
#include "twinkle/data/dataset.h"
#include "twinkle/data/dataset_meta.h"
#include "twinkle/data/hub.h"
#include "twinkle/data/preprocessor.h"
#include "twinkle/data/template.h"
#include "twinkle/data/tokenizer.h"
#include "twinkle/dist/device_mesh.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/io/model_config.h"
#include "twinkle/io/safetensors.h"
#include "twinkle/optim/distributed_optimizer.h"
#include "twinkle/optim/lr_scheduler.h"
#include "twinkle/train/megatron_model.h"
#include "twinkle/train/tensorboard_log.h"
