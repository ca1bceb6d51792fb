// twinkle/model/kernelize.h — Twinkle's kernelize_model (twinkle.kernel.kernelize,
// src/twinkle/kernel/): swaps the kernels a model calls, per op and device.
//
//   kernelize_model(model);                                        // the device's built-in fused bundle
//   kernelize_model(model, {{"rms_norm", {{"cpu", "reference"}}}});  // one op; other devices skipped
//
// A mapping is {op -> {device -> implementation name}} over the registry of twinkle/kernels/registry.h
// (a user registers an own kernel there first). As in Twinkle: an empty mapping applies the built-in
// bundle ("fused" on the CPU) to every op, a mapping replaces only its ops, entries for other devices
// than the model's are skipped, it is idempotent and logs one line per op it replaces (nothing when
// nothing changes). Unlike Twinkle it also works on the Megatron-style model (Twinkle's Megatron recipes
// get MindSpeed's fused kernels instead), and it is reversible (kernelize again with "reference"). The
// empty mapping keeps the model's mixed precision (Qwen3ModelOptions::mixed_precision "bf16": the bf16
// GEMM ops of kernels::apply_mixed_precision).
#pragma once
#include <string>
#include <vector>

#include "twinkle/kernels/registry.h"
#include "twinkle/model/qwen3_model.h"

namespace twinkle {

/// Applies the mapping (see above) to model.kernels(); returns the ops whose implementation changed,
/// each also logged at info level ("kernelize_model: rms_norm on cpu: reference -> fused").
/// Throws twinkle::Error for an unknown op or an implementation not registered for the device.
std::vector<std::string> kernelize_model(Qwen3Model& model, const kernels::KernelMapping& mapping = {});

}  // namespace twinkle
