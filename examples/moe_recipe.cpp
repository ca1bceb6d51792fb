// examples/moe_recipe.cpp — Qwen3-MoE with TP + PP + DP + EP: the C++ twin of Twinkle's
// cookbook/megatron/ascend/tp_moe_npu.py (the cookbook's MoE recipe; GPU twin tp_moe.py).
//
//   twinkle-run --nproc_per_node=8 build/examples/moe_recipe [--model DIR|ms://Qwen/Qwen3-30B-A3B]
//               [--device cpu] [--max-steps N] [--output-dir output/moe_recipe] [--bf16 | --fp32]
//               [--tensorboard-dir DIR]
//               [--lora [--lora-r 8 --lora-alpha 32 --lora-targets all-linear]]
//
// The cookbook's run (Twinkle's cookbook/megatron/ascend/tp_moe_npu.py): mesh dp=2 x tp=2 x pp=2 x
// cp=1 with ep=2 (the ep groups are the tp groups, the expert-dp groups the dp groups, as Megatron-core's
// expert RankGenerator in megatron/core/parallel_state.py builds them),
// sequence parallelism switched on for MoE with tp > 1 (logged), self-cognition data_slice
// range(128), global batch 2, the first 10 of the epoch's 64 steps, AdamW lr 1e-4 with the
// distributed optimizer (dense state sharded over dp, expert state over expert-dp), cosine
// schedule with 2 warm-up steps over the epoch. Model id and device also come from
// TWINKLE_MODEL / TWINKLE_DEVICE; default the embedded models/qwen3-moe-tiny (seeded init).
// --lora is the cookbook's add_adapter_to_model('default', LoraConfig(r=8, lora_alpha=32,
// target_modules='all-linear')) line switched on: an adapter pair on every attention linear and on
// every expert's gate/up/down (PEFT's per-expert keys; the router is not a target), the rest frozen;
// the save writes PEFT's adapter directory. --bf16 is Twinkle's default mixed precision (fp32 here
// unless given, as every C++ entry point).
#include "moe_recipe.h"

int main(int argc, char** argv) {
  return twinkle::run_main(argc, argv, [](int c, char** v) {
    return moe_recipe::run(c, v, {"Qwen3-MoE recipe: dp=2, tp=2, pp=2, ep=2 (8 processes)", "moe_recipe", 2, 2, 2, 1, 2,
                                  "output/moe_recipe"});
  });
}
