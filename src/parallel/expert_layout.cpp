// Expert grid vs model checks (see twinkle/parallel/expert_layout.h).
#include "twinkle/parallel/expert_layout.h"

#include "twinkle/core/error.h"

namespace twinkle::parallel {

void check_expert_layout(const DeviceMesh& mesh, bool is_moe, int64_t num_experts, const std::string& model) {
  const int ep = mesh.ep_size(), etp = mesh.etp_size();
  if (!is_moe || num_experts <= 0) {
    if (ep > 1)
      throw Error("ep = " + std::to_string(ep) + " needs a MoE model, but " + model +
                  " is dense (model_type qwen3, no experts); use ep = 1");
    if (etp > 1)
      throw Error("etp = " + std::to_string(etp) + " needs a MoE model, but " + model +
                  " is dense (model_type qwen3, no experts); use etp = 1");
    return;
  }
  if (num_experts % ep != 0)
    throw Error("num_experts = " + std::to_string(num_experts) + " (" + model + ") is not divisible by ep = " +
                std::to_string(ep) + ": each ep rank holds num_experts / ep experts");
  if (etp > 1)
    throw Error("etp = " + std::to_string(etp) +
                ": expert tensor parallelism is not implemented yet; use etp = 1 (Twinkle's default)");
}

}  // namespace twinkle::parallel
