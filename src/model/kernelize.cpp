// kernelize_model: Twinkle's kernelize over the kernel registry (see twinkle/model/kernelize.h).
#include "twinkle/model/kernelize.h"

#include "twinkle/dist/runtime.h"

namespace twinkle {

std::vector<std::string> kernelize_model(Qwen3Model& model, const kernels::KernelMapping& mapping) {
  const kernels::KernelTable& cur = model.kernels();
  const std::string& device = cur.device;
  // mapping = {} -> the built-in bundle of the device; else the current table with the mapping's
  // entries for this device (resolve_kernels validates op names and implementations).
  kernels::KernelTable next = kernels::resolve_kernels(device, "fused", mapping);
  kernels::apply_mixed_precision(next, model.options().mixed_precision);  // the bundle keeps the model's precision
  if (!mapping.empty()) {
    kernels::KernelTable kept = cur;
    for (const auto& [op, per_device] : mapping)
      if (auto it = per_device.find(device); it != per_device.end())
        kept.set(it->second, kernels::Registry::global().get(op, device, it->second));
    next = kept;
  }
  std::vector<std::string> replaced;
  for (const auto& op : kernels::op_names()) {
    const std::string before = cur.impl(op), after = next.impl(op);
    if (before == after) continue;
    replaced.push_back(op);
    get_logger().info("kernelize_model: " + op + " on " + device + ": " + before + " -> " + after);
  }
  if (!replaced.empty()) model.set_kernels(next);
  return replaced;
}

}  // namespace twinkle
