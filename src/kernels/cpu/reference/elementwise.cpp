// Reference embedding (torch.nn.functional.embedding), SwiGLU (HF Qwen3MLP act), adds, gradient-norm
// pieces and AdamW (torch.optim.AdamW single-tensor, PyTorch 1.13 torch/optim/adamw.py), in double.
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

#include "reference.h"
#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu::reference {

void embedding_forward(const float* table, const int32_t* ids, float* out, int64_t T, int64_t H, int64_t vstart,
                       int64_t Vl) {
  for (int64_t t = 0; t < T; ++t) {
    const int64_t r = static_cast<int64_t>(ids[t]) - vstart;
    for (int64_t c = 0; c < H; ++c) out[t * H + c] = (r >= 0 && r < Vl) ? table[r * H + c] : 0.0f;
  }
}

void embedding_backward(const float* dout, const int32_t* ids, float* dtable, int64_t T, int64_t H, int64_t vstart,
                        int64_t Vl) {
  for (int64_t t = 0; t < T; ++t) {
    const int64_t r = static_cast<int64_t>(ids[t]) - vstart;
    if (r < 0 || r >= Vl) continue;
    for (int64_t c = 0; c < H; ++c) dtable[r * H + c] += dout[t * H + c];
  }
}

void swiglu_forward(const float* gate, const float* up, float* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i], s = 1.0 / (1.0 + std::exp(-g));
    h[i] = static_cast<float>(g * s * up[i]);
  }
}

// d/dg [g s(g) u] = u (s + g s (1 - s)); d/du = g s(g).
void swiglu_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i], u = up[i], d = dh[i], s = 1.0 / (1.0 + std::exp(-g));
    dgate[i] = static_cast<float>(d * u * (s + g * s * (1.0 - s)));
    dup[i] = static_cast<float>(d * g * s);
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(static_cast<double>(y[i]) + x[i]);
}

void add(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<double>(a[i]) + b[i]);
}

void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = static_cast<float>(static_cast<double>(y[r * cols + c]) + b[c]);
}

void bias_grad_rows(const float* dy, float* db, int64_t rows, int64_t cols) {
  if (db == nullptr) return;
  for (int64_t c = 0; c < cols; ++c) {
    double s = 0.0;
    for (int64_t r = 0; r < rows; ++r) s += dy[r * cols + c];
    db[c] += static_cast<float>(s);
  }
}

double sum_squares(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

void scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<double>(x[i]) * s);
}

namespace {
// The decimal a float hyper-parameter was written as (0.999f -> 0.999): the shortest round-trip string.
double decimal_of(float x) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf) - 1, x);
  if (res.ec != std::errc()) return x;
  *res.ptr = '\0';
  return std::strtod(buf, nullptr);
}
}  // namespace

void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                float weight_decay, int64_t step, float grad_scale) {
  check(step >= 1, "adamw_step: step must be >= 1 (1-based), got " + std::to_string(step));
  const double b1 = decimal_of(beta1), b2 = decimal_of(beta2), a = decimal_of(lr), wd = decimal_of(weight_decay);
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(step));
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g[i] * grad_scale;  // the float product: what scaling g in place first leaves
    const double mi = b1 * m[i] + (1.0 - b1) * gi;
    const double vi = b2 * v[i] + (1.0 - b2) * gi * gi;
    const double denom = std::sqrt(vi) / std::sqrt(bias2) + static_cast<double>(eps);
    p[i] = static_cast<float>(p[i] * (1.0 - a * wd) - (a / bias1) * (mi / denom));
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
  }
}

}  // namespace twinkle::kernels::cpu::reference
