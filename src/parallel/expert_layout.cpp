// Expert grid vs model checks (see twinkle/parallel/expert_layout.h).
#include "twinkle/parallel/expert_layout.h"

#include <cmath>
#include <sstream>

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
}

void check_expert_tensor_split(int64_t moe_intermediate_size, int etp) {
  if (etp >= 1 && moe_intermediate_size % etp != 0)
    throw Error("expert tensor parallelism: moe_intermediate_size = " + std::to_string(moe_intermediate_size) +
                " is not divisible by etp = " + std::to_string(etp) +
                " (each etp rank holds moe_intermediate_size / etp columns of every expert)");
}

void check_lora_expert_tensor_parallel(int etp) {
  if (etp > 1)
    throw Error("LoRA with expert tensor parallelism (etp " + std::to_string(etp) +
                ") is not supported (as in Megatron-Bridge); use --etp 1");
}

void check_moe_loss_options(const std::string& aux_type, double aux_coeff, double z_coeff, const DeviceMesh& mesh,
                            bool is_moe) {
  auto num = [](double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  if (aux_type != "global" && aux_type != "per_layer")
    throw Error("--moe-aux-loss-type '" + aux_type + "' is unknown (global: transformers' load_balancing_loss_func, " +
                "per_layer: Megatron's per-layer aux loss)");
  if (!std::isfinite(aux_coeff) || aux_coeff < 0)
    throw Error("--moe-aux-loss-coeff " + num(aux_coeff) + " must be a finite number >= 0");
  if (!std::isfinite(z_coeff) || z_coeff < 0)
    throw Error("--moe-z-loss-coeff " + num(z_coeff) + " must be a finite number >= 0");
  if (!is_moe && (aux_coeff > 0 || z_coeff > 0))
    throw Error(std::string(aux_coeff > 0 ? "--moe-aux-loss-coeff " + num(aux_coeff) : "--moe-z-loss-coeff " + num(z_coeff)) +
                " needs a MoE model (the model is dense)");
  if (aux_type == "global" && aux_coeff > 0 && mesh.pp_size() > 1)
    throw Error("--moe-aux-loss-type global with --moe-aux-loss-coeff " + num(aux_coeff) + " needs pp = 1 (got pp = " +
                std::to_string(mesh.pp_size()) +
                "): transformers' loss needs every MoE layer's statistics of a micro-batch before its backward; use "
                "--moe-aux-loss-type per_layer (Megatron's) with pp = " +
                std::to_string(mesh.pp_size()));
}

}  // namespace twinkle::parallel
