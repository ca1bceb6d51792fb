// examples/moe_cp_recipe.cpp — Qwen3-MoE with TP + PP + CP + EP: the C++ twin of Twinkle's
// cookbook/megatron/ascend/tp_moe_cp_npu.py (the cookbook's MoE + CP recipe).
//
//   twinkle-run --nproc_per_node=8 build/examples/moe_cp_recipe [--model DIR] [--cp-comm-type p2p|a2a]
//               [--max-steps N] [--output-dir output/moe_cp_recipe] [--bf16 | --fp32] [--lora ...]
//
// The cookbook's run (Twinkle's cookbook/megatron/ascend/tp_moe_cp_npu.py): mesh dp=1 x tp=2 x pp=2
// x cp=2 with ep=2 — the ep groups are the tp groups and the expert-data-parallel groups the cp groups
// (Megatron-core's expert RankGenerator, megatron/core/parallel_state.py: dense dp is 1 but the
// experts are data-parallel over cp); every sequence is split
// over the two cp ranks (load-balanced chunks r and 2cp-1-r) and attention runs as the ring
// (Megatron's cp_comm_type p2p; --cp-comm-type a2a for Ulysses); sequence parallelism is switched
// on for MoE with tp > 1. The rest as examples/moe_recipe.cpp: self-cognition range(128), global
// batch 2, 10 of 64 steps, AdamW lr 1e-4, cosine with 2 warm-up steps; default model the
// embedded models/qwen3-moe-tiny.
#include "moe_recipe.h"

int main(int argc, char** argv) {
  return twinkle::run_main(argc, argv, [](int c, char** v) {
    return moe_recipe::run(c, v, {"Qwen3-MoE recipe with context parallelism: dp=1, tp=2, pp=2, cp=2, ep=2 (8 processes)",
                                  "moe_cp_recipe", 1, 2, 2, 2, 2, "output/moe_cp_recipe"});
  });
}
