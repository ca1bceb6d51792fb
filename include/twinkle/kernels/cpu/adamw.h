// twinkle/kernels/cpu/adamw.h — one AdamW step, torch.optim.AdamW semantics
// (PyTorch 1.13 torch/optim/adamw.py, _single_tensor_adamw, amsgrad=False, maximize=False;
// Loshchilov & Hutter, "Decoupled Weight Decay Regularization").
#pragma once
#include <cstdint>

namespace twinkle::kernels::cpu {

/// step (1-based, the count AFTER incrementing, as torch's state['step']):
///   p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
///   bias1 = 1 - b1^step; bias2 = 1 - b2^step;
///   denom = sqrt(v)/sqrt(bias2) + eps; p -= (lr/bias1) * m/denom.
/// Scalar factors in double; element math in fp32. The float hyper-parameters are widened to the
/// shortest decimal that round-trips them (0.999f -> 0.999, as the config / Python value was), so that
/// 1 - beta2 and the bias corrections match torch's Python-double arithmetic. p, g, m, v: [n] f32 (m, v updated in place;
/// g read only). The gradient used is g * grad_scale (one float multiply: the clip coefficient of
/// torch.nn.utils.clip_grad_norm_, which scales the gradients in place before the step; 1 = unclipped), so a
/// clipped step needs no separate pass over the gradients and equals scale-then-step bit for bit.
/// Throws twinkle::Error if step < 1.
void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                float weight_decay, int64_t step, float grad_scale = 1.0f);

}  // namespace twinkle::kernels::cpu
