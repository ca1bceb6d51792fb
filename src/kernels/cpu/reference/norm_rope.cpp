// Reference RMSNorm (HF Qwen3RMSNorm), residual add + RMSNorm, RoPE (HF apply_rotary_pos_emb with the
// given cos/sin table) and their composition qk-norm + RoPE, all in double.
#include <cmath>
#include <string>
#include <vector>

#include "reference.h"
#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu::reference {

void rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim, float eps) {
  std::vector<double> row(static_cast<size_t>(dim));
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t j = 0; j < dim; ++j) {
      row[j] = x[r * dim + j];
      ss += row[j] * row[j];
    }
    const double rs = 1.0 / std::sqrt(ss / static_cast<double>(dim) + static_cast<double>(eps));
    rstd[r] = static_cast<float>(rs);
    for (int64_t j = 0; j < dim; ++j) y[r * dim + j] = static_cast<float>(static_cast<double>(w[j]) * row[j] * rs);
  }
}

// d/dx of y = w * x * rs(x):  dx = rs * (g - xh * mean(g * xh)), g = dy * w, xh = x * rs; dw += dy * xh.
void rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, float* dx, float* dw,
                      int64_t rows, int64_t dim) {
  std::vector<double> dwacc(static_cast<size_t>(dim), 0.0), out(static_cast<size_t>(dim));
  for (int64_t r = 0; r < rows; ++r) {
    const double rs = rstd[r];
    double dot = 0.0;
    for (int64_t j = 0; j < dim; ++j) dot += static_cast<double>(dy[r * dim + j]) * w[j] * (x[r * dim + j] * rs);
    const double mean = dot / static_cast<double>(dim);
    for (int64_t j = 0; j < dim; ++j) {
      const double xh = x[r * dim + j] * rs, g = static_cast<double>(dy[r * dim + j]) * w[j];
      dwacc[j] += static_cast<double>(dy[r * dim + j]) * xh;
      out[j] = rs * (g - xh * mean);
    }
    for (int64_t j = 0; j < dim; ++j) dx[r * dim + j] = static_cast<float>(out[j]);  // dx may alias dy
  }
  if (dw)
    for (int64_t j = 0; j < dim; ++j) dw[j] = static_cast<float>(dw[j] + dwacc[j]);
}

void add_rmsnorm_forward(const float* x, const float* r, float* h, const float* w, float* y, float* rstd,
                         int64_t rows, int64_t dim, float eps) {
  add(h, x, r, rows * dim);
  rmsnorm_forward(h, w, y, rstd, rows, dim, eps);
}

void add_rmsnorm_backward(const float* h, const float* w, const float* rstd, const float* dy, const float* dres,
                          float* dh, float* dw, int64_t rows, int64_t dim) {
  std::vector<float> d(static_cast<size_t>(rows * dim));
  rmsnorm_backward(h, w, rstd, dy, d.data(), dw, rows, dim);
  add(dh, d.data(), dres, rows * dim);
}

namespace {
void check_rope(const char* fn, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t head_dim) {
  check(head_dim == t.head_dim, std::string(fn) + ": head_dim " + std::to_string(head_dim) +
                                    " differs from the rope table's " + std::to_string(t.head_dim));
  for (int64_t i = 0; i < tokens; ++i)
    check(pos[i] >= 0 && pos[i] < t.max_pos, std::string(fn) + ": position " + std::to_string(pos[i]) +
                                                  " of token " + std::to_string(i) + " is outside the rope table");
}
// out[i] = x1 cos - x2 sin, out[i+half] = x2 cos + x1 sin; sign -1 rotates by -angle (the transpose).
void rotate(float* x, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads, int64_t D, double sign) {
  const int64_t half = D / 2;
  for (int64_t tk = 0; tk < tokens; ++tk)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        float* a = x + (tk * heads + h) * D + i;
        float* b = a + half;
        const double c = t.cos[pos[tk] * half + i], s = sign * t.sin[pos[tk] * half + i];
        const double x1 = *a, x2 = *b;
        *a = static_cast<float>(x1 * c - x2 * s);
        *b = static_cast<float>(x2 * c + x1 * s);
      }
}
}  // namespace

void rope_forward(float* x, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads, int64_t head_dim) {
  check_rope("rope_forward", pos, t, tokens, head_dim);
  rotate(x, pos, t, tokens, heads, head_dim, 1.0);
}

void rope_backward(float* dx, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads,
                   int64_t head_dim) {
  check_rope("rope_backward", pos, t, tokens, head_dim);
  rotate(dx, pos, t, tokens, heads, head_dim, -1.0);
}

void qk_norm_rope_forward(const float* x, const float* w, float* y, float* rstd, const int32_t* pos,
                          const RopeTable& t, int64_t tokens, int64_t heads, int64_t head_dim, float eps) {
  check_rope("qk_norm_rope_forward", pos, t, tokens, head_dim);
  rmsnorm_forward(x, w, y, rstd, tokens * heads, head_dim, eps);
  reference::rope_forward(y, pos, t, tokens, heads, head_dim);
}

void qk_norm_rope_backward(const float* x, const float* w, const float* rstd, const int32_t* pos, const RopeTable& t,
                           const float* dy, float* dx, float* dw, int64_t tokens, int64_t heads, int64_t head_dim) {
  check_rope("qk_norm_rope_backward", pos, t, tokens, head_dim);
  std::vector<float> g(dy, dy + tokens * heads * head_dim);
  reference::rope_backward(g.data(), pos, t, tokens, heads, head_dim);
  rmsnorm_backward(x, w, rstd, g.data(), dx, dw, tokens * heads, head_dim);
}

}  // namespace twinkle::kernels::cpu::reference
