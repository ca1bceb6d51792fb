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
void check_offsets(const char* fn, const int64_t* offsets, int64_t G) {
  check(G >= 0 && (G == 0 || offsets[0] == 0), std::string(fn) + ": offsets[0] must be 0");
  for (int64_t g = 0; g < G; ++g)
    check(offsets[g + 1] >= offsets[g], std::string(fn) + ": offsets decrease at group " + std::to_string(g));
}
}  // namespace

void grouped_linear_forward(const float* X, const float* W, float* Y, const int64_t* offsets, int64_t G, int64_t N,
                            int64_t K) {
  check_offsets("grouped_linear_forward", offsets, G);
  for (int64_t g = 0; g < G; ++g)
    linear_forward(X + offsets[g] * K, W + g * N * K, Y + offsets[g] * N, offsets[g + 1] - offsets[g], N, K, false);
}

void grouped_linear_backward(const float* X, const float* W, const float* dY, float* dX, float* dW,
                             const int64_t* offsets, int64_t G, int64_t N, int64_t K) {
  check_offsets("grouped_linear_backward", offsets, G);
  for (int64_t g = 0; g < G; ++g)
    linear_backward(X + offsets[g] * K, W + g * N * K, dY + offsets[g] * N, dX + offsets[g] * K,
                    dW ? dW + g * N * K : nullptr, offsets[g + 1] - offsets[g], N, K, false);
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
