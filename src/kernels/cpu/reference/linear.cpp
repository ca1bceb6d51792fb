// Reference linear (torch.nn.functional.linear, W in [out, in] layout), grouped linear (a loop over the
// groups) and gate/up + SwiGLU composed from them, with double dot products. Output rows are independent,
// so the outer loops run in parallel (OpenMP) — every element's sum is still one plain serial loop.
#include <string>
#include <vector>

#include "reference.h"
#include "twinkle/core/error.h"

namespace twinkle::kernels::cpu::reference {

void linear_forward(const float* X, const float* W, float* Y, int64_t M, int64_t N, int64_t K, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = accumulate ? Y[m * N + n] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(X[m * K + k]) * W[n * K + k];
      Y[m * N + n] = static_cast<float>(s);
    }
}

void linear_backward(const float* X, const float* W, const float* dY, float* dX, float* dW, int64_t M, int64_t N,
                     int64_t K, bool accumulate_dx) {
  if (dX) {
#pragma omp parallel
    {
      std::vector<double> acc(static_cast<size_t>(K));
#pragma omp for schedule(static)
      for (int64_t m = 0; m < M; ++m) {  // dX[m, :] = sum_n dY[m, n] W[n, :]
        for (int64_t k = 0; k < K; ++k) acc[k] = accumulate_dx ? dX[m * K + k] : 0.0;
        for (int64_t n = 0; n < N; ++n) {
          const double d = dY[m * N + n];
          for (int64_t k = 0; k < K; ++k) acc[k] += d * W[n * K + k];
        }
        for (int64_t k = 0; k < K; ++k) dX[m * K + k] = static_cast<float>(acc[k]);
      }
    }
  }
  if (dW) {
#pragma omp parallel
    {
      std::vector<double> acc(static_cast<size_t>(K));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {  // dW[n, :] += sum_m dY[m, n] X[m, :]
        for (int64_t k = 0; k < K; ++k) acc[k] = dW[n * K + k];
        for (int64_t m = 0; m < M; ++m) {
          const double d = dY[m * N + n];
          for (int64_t k = 0; k < K; ++k) acc[k] += d * X[m * K + k];
        }
        for (int64_t k = 0; k < K; ++k) dW[n * K + k] = static_cast<float>(acc[k]);
      }
    }
  }
}

namespace {
void check_counts(const char* fn, const int64_t* counts, int64_t E) {
  for (int64_t e = 0; e < E; ++e)
    check(counts[e] >= 0, std::string(fn) + ": counts[" + std::to_string(e) + "] = " + std::to_string(counts[e]) +
                              " is negative");
}
}  // namespace

// A loop over the experts, each a plain linear on its block of rows.
void grouped_linear_forward(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                            float* Y, int64_t N, int64_t K, bool accumulate) {
  check_counts("grouped_linear_forward", counts, E);
  int64_t r0 = 0;
  for (int64_t e = 0; e < E; ++e) {
    linear_forward(X + r0 * K, W + e * w_stride, Y + r0 * N, counts[e], N, K, accumulate);
    r0 += counts[e];
  }
}

void grouped_linear_backward(const float* X, const float* W, int64_t w_stride, const int64_t* counts, int64_t E,
                             const float* dY, float* dX, float* dW, int64_t N, int64_t K, bool accumulate_dx) {
  check_counts("grouped_linear_backward", counts, E);
  int64_t r0 = 0;
  for (int64_t e = 0; e < E; ++e) {
    linear_backward(X + r0 * K, W + e * w_stride, dY + r0 * N, dX ? dX + r0 * K : nullptr,
                    dW ? dW + e * w_stride : nullptr, counts[e], N, K, accumulate_dx);
    r0 += counts[e];
  }
}

// Unfused: gate = X Wg^T, up = X Wu^T (two linears), a = swiglu(gate, up); gu holds [gate | up] per row.
void gate_up_swiglu_forward(const float* X, const float* Wgu, float* gu, float* a, int64_t T, int64_t I, int64_t H) {
  std::vector<float> g(static_cast<size_t>(T * I)), u(static_cast<size_t>(T * I));
  linear_forward(X, Wgu, g.data(), T, I, H, false);
  linear_forward(X, Wgu + I * H, u.data(), T, I, H, false);
  swiglu_forward(g.data(), u.data(), a, T * I);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < I; ++i) {
      gu[t * 2 * I + i] = g[t * I + i];
      gu[t * 2 * I + I + i] = u[t * I + i];
    }
}

void gate_up_swiglu_backward(const float* X, const float* Wgu, const float* gu, const float* da, float* dgu,
                             float* dX, float* dWgu, int64_t T, int64_t I, int64_t H, bool accumulate_dx) {
  std::vector<float> g(static_cast<size_t>(T * I)), u(g.size()), dg(g.size()), du(g.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < I; ++i) {
      g[t * I + i] = gu[t * 2 * I + i];
      u[t * I + i] = gu[t * 2 * I + I + i];
    }
  swiglu_backward(g.data(), u.data(), da, dg.data(), du.data(), T * I);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < I; ++i) {
      dgu[t * 2 * I + i] = dg[t * I + i];
      dgu[t * 2 * I + I + i] = du[t * I + i];
    }
  linear_backward(X, Wgu, dg.data(), dX, dWgu, T, I, H, accumulate_dx);
  linear_backward(X, Wgu + I * H, du.data(), dX, dWgu ? dWgu + I * H : nullptr, T, I, H, true);
}

}  // namespace twinkle::kernels::cpu::reference
