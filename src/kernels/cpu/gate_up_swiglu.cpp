#include "twinkle/kernels/cpu/gate_up_swiglu.h"

#include "twinkle/kernels/cpu/gemm.h"
#include "twinkle/kernels/cpu/swiglu.h"

namespace twinkle::kernels::cpu {

void gate_up_swiglu_forward(const float* X, const float* Wgu, float* gu, float* a, int64_t T, int64_t I, int64_t H) {
  linear_forward(X, Wgu, gu, T, 2 * I, H);
  swiglu_forward_rows(gu, 2 * I, gu + I, 2 * I, a, I, T, I);
}

void gate_up_swiglu_backward(const float* X, const float* Wgu, const float* gu, const float* da, float* dgu,
                             float* dX, float* dWgu, int64_t T, int64_t I, int64_t H, bool accumulate_dx) {
  swiglu_backward_rows(gu, 2 * I, gu + I, 2 * I, da, I, dgu, 2 * I, dgu + I, 2 * I, T, I);
  linear_backward(X, Wgu, dgu, dX, dWgu, T, 2 * I, H, accumulate_dx);
}

}  // namespace twinkle::kernels::cpu
