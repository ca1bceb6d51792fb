// The bf16 grouped GEMM of the CUDA "bf16" kernel set: every local expert's product in ONE launch (Megatron-core's
// GroupedMLP / TEGroupedLinear run the experts as one grouped GEMM), on bf16 inputs with fp32 accumulation and
// an fp32 output — the numbers of cublasGemmEx (CUDA_R_16BF A / B, CUDA_R_32F C, CUBLAS_COMPUTE_32F) that the
// per-expert path used. cuBLAS's grouped call (cublasGemmGroupedBatchedEx) is not used: its documented type
// combinations pair bf16 inputs with a bf16 output, and the bf16 set keeps the GEMM output fp32 (gemm_bf16.cpp).
//
// The kernel: tensor-core warp matrix operations (nvcuda::wmma, 16 x 16 x 16 bf16 fragments, fp32 accumulator;
// sm_80 and newer). A block of 4 warps computes one 64 x 64 tile of one problem's C, stepping through the
// reduction 32 at a time: the block copies op(A)'s 64 x 32 and op(B)'s 32 x 64 slices into shared memory
// (transposing where the operand is transposed, zero past the problem's edges), each warp multiplies its
// 32 x 32 quarter as 2 x 2 fragments. A host-built table lists the tiles of every problem with rows, so the
// grid is exactly the tiles (an expert with no rows costs nothing) and every block reads its problem from it.
#include <cstring>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <mma.h>
#endif

#include "cuda_common.h"
#include "ops_cuda.h"
#include "twinkle/core/error.h"

namespace twinkle::cuda::ops {

namespace {

constexpr int kBM = 64, kBN = 64, kBK = 32, kThreads = 128;
// shared-memory leading dimensions: multiples of 16 bytes (wmma's ldm rule), padded against bank conflicts
constexpr int kLdA = kBK + 8, kLdB = kBN + 8, kLdC = kBN + 4;

struct DevProblem {
  int64_t a_off, b_off, c_off;  // element offsets of the problem's A, B, C from the call's bases
  int32_t m, n, k, pad;
};
struct DevTile {
  int32_t problem, m0, n0, pad;
};

__global__ void __launch_bounds__(kThreads)
    k_grouped_gemm_bf16(const uint16_t* __restrict__ A, const uint16_t* __restrict__ B, float* __restrict__ C,
                        const DevProblem* __restrict__ problems, const DevTile* __restrict__ tiles, int ta, int tb,
                        int64_t lda, int64_t ldb, int64_t ldc, int accumulate) {
  namespace wmma = nvcuda::wmma;
  __shared__ __align__(32) uint16_t As[kBM * kLdA];  // op(A) slice [kBM][kBK]
  __shared__ __align__(32) uint16_t Bs[kBK * kLdB];  // op(B) slice [kBK][kBN]
  __shared__ __align__(32) float Cs[kBM * kLdC];     // the block's tile, for the masked write-out
  const DevTile t = tiles[blockIdx.x];
  const DevProblem p = problems[t.problem];
  const uint16_t* a = A + p.a_off;
  const uint16_t* b = B + p.b_off;
  float* c = C + p.c_off;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, wm = warp / 2, wn = warp % 2;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  for (int k0 = 0; k0 < p.k; k0 += kBK) {
    // op(A)[r][kk]: A[r][kk] (row-major [m, k], lda) or A[kk][r] (ta: A is [k, m]); consecutive threads walk
    // A's contiguous dimension
    for (int e = tid; e < kBM * kBK; e += kThreads) {
      const int r = ta ? e % kBM : e / kBK, kk = ta ? e / kBM : e % kBK;
      const int gm = t.m0 + r, gk = k0 + kk;
      uint16_t v = 0;
      if (gm < p.m && gk < p.k) v = ta ? a[static_cast<int64_t>(gk) * lda + gm] : a[static_cast<int64_t>(gm) * lda + gk];
      As[r * kLdA + kk] = v;
    }
    // op(B)[kk][n]: B[kk][n] (row-major [k, n], ldb) or B[n][kk] (tb: B is [n, k])
    for (int e = tid; e < kBK * kBN; e += kThreads) {
      const int kk = tb ? e % kBK : e / kBN, n = tb ? e / kBK : e % kBN;
      const int gk = k0 + kk, gn = t.n0 + n;
      uint16_t v = 0;
      if (gk < p.k && gn < p.n) v = tb ? b[static_cast<int64_t>(gn) * ldb + gk] : b[static_cast<int64_t>(gk) * ldb + gn];
      Bs[kk * kLdB + n] = v;
    }
    __syncthreads();
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb[2];
      for (int i = 0; i < 2; ++i)
        wmma::load_matrix_sync(fa[i], reinterpret_cast<const __nv_bfloat16*>(As + (wm * 32 + i * 16) * kLdA + kk),
                               kLdA);
      for (int j = 0; j < 2; ++j)
        wmma::load_matrix_sync(fb[j], reinterpret_cast<const __nv_bfloat16*>(Bs + kk * kLdB + wn * 32 + j * 16),
                               kLdB);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * kLdC + wn * 32 + j * 16, acc[i][j], kLdC,
                              wmma::mem_row_major);
  __syncthreads();
  for (int e = tid; e < kBM * kBN; e += kThreads) {
    const int r = e / kBN, n = e % kBN, gm = t.m0 + r, gn = t.n0 + n;
    if (gm < p.m && gn < p.n) {
      float* o = c + static_cast<int64_t>(gm) * ldc + gn;
      const float v = Cs[r * kLdC + n];
      *o = accumulate ? *o + v : v;  // beta 0 never reads C (it may be uninitialised)
    }
  }
}

}  // namespace

void grouped_gemm_bf16(bool ta, bool tb, const std::vector<GroupedGemmProblem>& problems, const uint16_t* A,
                       int64_t lda, const uint16_t* B, int64_t ldb, bool accumulate, float* C, int64_t ldc,
                       const char* what) {
  const int64_t lim = int64_t{1} << 31;
  std::vector<DevProblem> dp;
  std::vector<DevTile> dt;
  for (const GroupedGemmProblem& q : problems) {
    check(q.m >= 0 && q.n >= 0 && q.k >= 0 && q.m < lim && q.n < lim && q.k < lim,
          std::string(what) + ": a problem of " + std::to_string(q.m) + " x " + std::to_string(q.n) + " x " +
              std::to_string(q.k) + " is negative or exceeds the 32-bit range");
    if (q.m == 0 || q.n == 0) continue;  // no output
    check(q.k > 0 || accumulate, std::string(what) + ": a problem with an empty reduction and no accumulation");
    if (q.k == 0) continue;  // C += 0
    const int32_t id = static_cast<int32_t>(dp.size());
    dp.push_back({q.a_off, q.b_off, q.c_off, static_cast<int32_t>(q.m), static_cast<int32_t>(q.n),
                  static_cast<int32_t>(q.k), 0});
    for (int64_t m0 = 0; m0 < q.m; m0 += kBM)
      for (int64_t n0 = 0; n0 < q.n; n0 += kBN) dt.push_back({id, static_cast<int32_t>(m0), static_cast<int32_t>(n0), 0});
  }
  if (dt.empty()) return;
  check(static_cast<int64_t>(dt.size()) < lim, std::string(what) + ": too many tiles for one launch");
  // one upload of both tables (problems first: 8-byte members), stream-ordered before the launch
  const size_t pbytes = dp.size() * sizeof(DevProblem), tbytes = dt.size() * sizeof(DevTile);
  std::vector<char> host(pbytes + tbytes);
  std::memcpy(host.data(), dp.data(), pbytes);
  std::memcpy(host.data() + pbytes, dt.data(), tbytes);
  Scratch dev(host.size());
  TWINKLE_CUDA_CHECK(cudaMemcpyAsync(dev.p, host.data(), host.size(), cudaMemcpyHostToDevice, detail::stream()));
  const auto* probs = dev.as<DevProblem>();
  const auto* tiles = reinterpret_cast<const DevTile*>(dev.as<char>() + pbytes);
  TWINKLE_LAUNCH(k_grouped_gemm_bf16, static_cast<unsigned>(dt.size()), kThreads, 0, A, B, C, probs, tiles,
                 ta ? 1 : 0, tb ? 1 : 0, lda, ldb, ldc, accumulate ? 1 : 0);
  TWINKLE_CUDA_LAUNCHED(what);
}

}  // namespace twinkle::cuda::ops
