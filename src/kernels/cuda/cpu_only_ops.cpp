// The CUDA entry points of the ops that have CPU kernels only (twinkle/kernels/registry.h cpu_only_ops():
// the Gated DeltaNet ops of twinkle/kernels/ops.h). Each throws before it touches an argument, so that a
// "cuda" table resolves and a model that reaches one of these ops on the GPU refuses by the op's name.
#include <string>

#include "ops_cuda.h"
#include "twinkle/core/error.h"

namespace twinkle::cuda::ops {

namespace {
[[noreturn]] void refuse(const char* op, const char* fn) {
  throw Error(std::string("kernels: op '") + op + "' (" + fn +
              ") has no CUDA implementation yet: the Gated DeltaNet kernels run on device 'cpu' only "
              "(twinkle/kernels/cpu/causal_conv1d.h, gated_delta_rule.h, gated_rmsnorm.h)");
}
}  // namespace

void causal_conv1d_forward(const float*, const float*, const float*, float*, const int32_t*, int64_t, int64_t,
                           int64_t, bool) {
  refuse("causal_conv1d", "forward");
}
void causal_conv1d_backward(const float*, const float*, const float*, const float*, float*, float*, float*,
                            const int32_t*, int64_t, int64_t, int64_t, bool) {
  refuse("causal_conv1d", "backward");
}
void gated_delta_rule_forward(const float*, const float*, const float*, const float*, const float*, const float*,
                              float*, float*, const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t, float,
                              bool) {
  refuse("gated_delta_rule", "forward");
}
void gated_delta_rule_backward(const float*, const float*, const float*, const float*, const float*, const float*,
                               const float*, const float*, float*, float*, float*, float*, float*, float*,
                               const int32_t*, int64_t, int64_t, int64_t, int64_t, int64_t, float, bool) {
  refuse("gated_delta_rule", "backward");
}
void gdn_gates_forward(const float*, const float*, const float*, const float*, float*, float*, int64_t, int64_t) {
  refuse("gated_delta_rule", "gates_forward");
}
void gdn_gates_backward(const float*, const float*, const float*, const float*, const float*, const float*, float*,
                        float*, float*, float*, int64_t, int64_t) {
  refuse("gated_delta_rule", "gates_backward");
}
void gated_rmsnorm_forward(const float*, const float*, const float*, float*, float*, int64_t, int64_t, float) {
  refuse("gated_rms_norm", "forward");
}
void gated_rmsnorm_backward(const float*, const float*, const float*, const float*, const float*, float*, float*,
                            float*, int64_t, int64_t) {
  refuse("gated_rms_norm", "backward");
}

}  // namespace twinkle::cuda::ops
