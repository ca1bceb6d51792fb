#include "twinkle/kernels/cpu/qk_norm_rope.h"

#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "twinkle/core/error.h"

#include "rms_rstd.h"

namespace twinkle::kernels::cpu {

namespace {

void check_args(const char* fn, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t head_dim) {
  check(head_dim == t.head_dim && head_dim % 2 == 0, std::string(fn) + ": head_dim " + std::to_string(head_dim) +
                                                         " differs from the rope table's " +
                                                         std::to_string(t.head_dim));
  for (int64_t i = 0; i < tokens; ++i)
    if (pos[i] < 0 || pos[i] >= t.max_pos)
      throw Error(std::string(fn) + ": position " + std::to_string(pos[i]) + " of token " + std::to_string(i) +
                  " is outside the rope table [0, " + std::to_string(t.max_pos) + ")");
}

}  // namespace

void qk_norm_rope_forward(const float* x, const float* w, float* y, float* rstd, const int32_t* pos,
                          const RopeTable& t, int64_t tokens, int64_t heads, int64_t head_dim, float eps) {
  check_args("qk_norm_rope_forward", pos, t, tokens, head_dim);
  const int64_t half = head_dim / 2;
#pragma omp parallel for schedule(static) if (tokens * heads * head_dim > 16384)
  for (int64_t tk = 0; tk < tokens; ++tk) {
    const float* c = t.cos.data() + static_cast<int64_t>(pos[tk]) * half;
    const float* s = t.sin.data() + static_cast<int64_t>(pos[tk]) * half;
    for (int64_t hd = 0; hd < heads; ++hd) {
      const int64_t row = tk * heads + hd;
      const float* xa = x + row * head_dim;
      const float* xb = xa + half;
      float* ya = y + row * head_dim;
      float* yb = ya + half;
      double ss = 0.0;
#pragma omp simd reduction(+ : ss)
      for (int64_t j = 0; j < head_dim; ++j) ss += static_cast<double>(xa[j]) * xa[j];
      const float rs = rms_rstd(ss, head_dim, eps);  // HF: variance in fp32, rsqrt(var + eps)
      rstd[row] = rs;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float n1 = w[i] * (xa[i] * rs), n2 = w[i + half] * (xb[i] * rs);
        ya[i] = n1 * c[i] - n2 * s[i];
        yb[i] = n2 * c[i] + n1 * s[i];
      }
    }
  }
}

void qk_norm_rope_backward(const float* x, const float* w, const float* rstd, const int32_t* pos, const RopeTable& t,
                           const float* dy, float* dx, float* dw, int64_t tokens, int64_t heads, int64_t head_dim) {
  check_args("qk_norm_rope_backward", pos, t, tokens, head_dim);
  const int64_t half = head_dim / 2;
  const bool par = tokens * heads * head_dim > 16384;
  const int nt = par ? omp_get_max_threads() : 1;
  std::vector<float> part(dw ? static_cast<size_t>(nt) * head_dim : 0, 0.0f);
#pragma omp parallel num_threads(nt) if (par)
  {
    const int tid = omp_get_thread_num();
    float* pw = dw ? part.data() + static_cast<size_t>(tid) * head_dim : nullptr;
    std::vector<float> g(static_cast<size_t>(head_dim));  // un-rotated gradient of the norm output
#pragma omp for schedule(static)
    for (int64_t tk = 0; tk < tokens; ++tk) {
      const float* c = t.cos.data() + static_cast<int64_t>(pos[tk]) * half;
      const float* s = t.sin.data() + static_cast<int64_t>(pos[tk]) * half;
      for (int64_t hd = 0; hd < heads; ++hd) {
        const int64_t row = tk * heads + hd;
        const float* xr = x + row * head_dim;
        const float* da = dy + row * head_dim;
        const float* db = da + half;
        float* dxr = dx + row * head_dim;
        const float rs = rstd[row];
        float* gp = g.data();
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {  // transpose rotation (angle -> -angle), as rope_backward
          const float d1 = da[i], d2 = db[i];
          gp[i] = d1 * c[i] + d2 * s[i];
          gp[i + half] = d2 * c[i] - d1 * s[i];
        }
        double dot = 0.0;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < head_dim; ++j) dot += static_cast<double>(gp[j] * w[j]) * (xr[j] * rs);
        const float cc = static_cast<float>(dot / static_cast<double>(head_dim));
        if (pw) {
#pragma omp simd
          for (int64_t j = 0; j < head_dim; ++j) pw[j] += gp[j] * (xr[j] * rs);
        }
#pragma omp simd
        for (int64_t j = 0; j < head_dim; ++j) dxr[j] = rs * (gp[j] * w[j] - (xr[j] * rs) * cc);
      }
    }
  }
  if (dw) {
    for (int tt = 0; tt < nt; ++tt) {
      const float* pw = part.data() + static_cast<size_t>(tt) * head_dim;
#pragma omp simd
      for (int64_t j = 0; j < head_dim; ++j) dw[j] += pw[j];
    }
  }
}

}  // namespace twinkle::kernels::cpu
