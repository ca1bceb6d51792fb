// The CUDA runtime on a real GPU (label gpu; without a GPU: prints why, exits 77 = skipped):
// tensors on the device through core's DeviceAllocator, the caching allocator's reuse (a second
// identical step makes no cudaMalloc), fp32 GEMMs without TF32 (a product TF32 would round is exact),
// CUDA / cuBLAS errors as twinkle::Error naming the call, the position / label checks of the ops, and
// the device facts `twinkle info` prints. Every check prints what it measured.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "twinkle/core/device_allocator.h"
#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/rope.h"
#include "twinkle/kernels/cuda/runtime.h"
#include "twinkle/kernels/registry.h"

using namespace twinkle;

namespace {

Tensor dev_vec(const std::vector<float>& v) { return Tensor::from_vector({static_cast<int64_t>(v.size())}, v).to(Device::CUDA); }

Tensor dev_ints(const std::vector<int32_t>& v) {
  Tensor h = Tensor::zeros({static_cast<int64_t>(v.size())}, DType::I32);
  std::copy(v.begin(), v.end(), h.data<int32_t>());
  return h.to(Device::CUDA);
}

// One "training step" worth of device tensors: weights kept, activations and scratch freed.
void step(const kernels::KernelTable& k, Tensor& w) {
  Tensor x = Tensor::zeros({64, 256}, DType::F32, Device::CUDA);
  Tensor y = Tensor::zeros({64, 128}, DType::F32, Device::CUDA);
  k.linear.forward(x.f32(), w.f32(), y.f32(), 64, 128, 256, false);
  Tensor dx = Tensor::zeros({64, 256}, DType::F32, Device::CUDA);
  Tensor dw = Tensor::zeros({128, 256}, DType::F32, Device::CUDA);
  k.linear.backward(x.f32(), w.f32(), y.f32(), dx.f32(), dw.f32(), 64, 128, 256, false);
  (void)k.norms.sum_squares(dw.f32(), dw.numel());
}

}  // namespace

TEST(CudaDevice, TensorsRoundTripThroughTheDevice) {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.1f * static_cast<float>(i));
  Tensor d = dev_vec(v);
  EXPECT_EQ(d.device(), Device::CUDA);
  EXPECT_EQ(d.to_vector(), v);
  Tensor z = Tensor::zeros({3, 333}, DType::F32, Device::CUDA);
  EXPECT_EQ(z.to_vector(), std::vector<float>(999, 0.0f));
  Tensor c = d.clone();
  d.zero_();
  EXPECT_EQ(c.to_vector(), v);
  EXPECT_EQ(d.to_vector(), std::vector<float>(1000, 0.0f));
  std::printf("  device allocator: %s\n", device_allocator(Device::CUDA).describe().c_str());
}

TEST(CudaDevice, ASecondIdenticalStepMakesNoCudaMalloc) {
  const auto k = kernels::resolve_kernels("cuda");
  Tensor w = Tensor::zeros({128, 256}, DType::F32, Device::CUDA);
  step(k, w);
  cuda::synchronize();
  const auto a = cuda::allocator().stats();
  step(k, w);
  step(k, w);
  cuda::synchronize();
  const auto b = cuda::allocator().stats();
  std::printf("  after step 1: %lld cudaMalloc, reserved %lld B; after step 3: %lld cudaMalloc, %lld/%lld hits\n",
              static_cast<long long>(a.raw_allocs), static_cast<long long>(a.bytes_reserved),
              static_cast<long long>(b.raw_allocs), static_cast<long long>(b.cache_hits),
              static_cast<long long>(b.allocs));
  EXPECT_EQ(b.raw_allocs, a.raw_allocs);
  EXPECT_GT(b.cache_hits, a.cache_hits);
}

TEST(CudaDevice, Fp32GemmHasNoTf32Rounding) {
  // x = 1 + 2^-11 needs 11 mantissa bits: TF32 (10 bits) rounds it to 1 (ties to even), fp32 keeps it. Every
  // partial sum m * x (m <= K = 256) is exactly representable in fp32, so ANY summation order of an fp32
  // GEMM gives exactly K * x = 256.125, and a TF32 GEMM gives 256. (GPU run 1 used x = 1 + 2^-20, whose
  // partial sums are not exact in fp32: its 1.2e-4 was fp32 accumulation, not TF32.)
  const int64_t M = 64, N = 64, K = 256;
  const float x = 1.0f + std::ldexp(1.0f, -11);
  Tensor X = Tensor::full({M, K}, x).to(Device::CUDA), W = Tensor::full({N, K}, 1.0f).to(Device::CUDA);
  Tensor Y = Tensor::zeros({M, N}, DType::F32, Device::CUDA);
  const auto k = kernels::resolve_kernels("cuda");
  k.linear.forward(X.f32(), W.f32(), Y.f32(), M, N, K, false);
  const auto y = Y.to_vector();
  const double want = static_cast<double>(K) * x;  // 256.125
  double err = 0.0;
  for (float v : y) err = std::max(err, std::fabs(v - want));
  std::printf("  linear fp32: max |Y - K*x| = %.3e (exact fp32: 0; TF32 would give %.3e)\n", err, want - K);
  EXPECT_EQ(err, 0.0) << "the fp32 GEMM is not exact fp32 (TF32 or reduced-precision math?)";
}

TEST(CudaDevice, DeviceFacts) {
  const auto infos = cuda::device_info();
  ASSERT_FALSE(infos.empty());
  for (const auto& d : infos) {
    std::printf("  GPU %d: %s, %d SMs, %.1f GiB, sm_%d%d, peak bf16 %.0f / fp32 %.1f TFLOP/s\n", d.ordinal,
                d.name.c_str(), d.sms, d.total_memory / 1073741824.0, d.cc_major, d.cc_minor, d.peak_bf16_tflops,
                d.peak_fp32_tflops);
    EXPECT_GT(d.sms, 0);
    EXPECT_GT(d.total_memory, size_t{1} << 30);
  }
  EXPECT_EQ(cuda::current_device(), 0);
}

TEST(CudaDevice, ErrorsNameTheCallAndTheInput) {
  const auto k = kernels::resolve_kernels("cuda");
  // a position outside the rope table: twinkle::Error naming the token, no read past the table
  const auto table = kernels::cpu::make_rope_table(16, 8, 10000.0);
  Tensor x = Tensor::zeros({3, 2, 8}, DType::F32, Device::CUDA);
  Tensor pos = dev_ints({0, 5, 16});
  std::string e;
  try {
    k.rope.forward(x.f32(), pos.data<int32_t>(), table, 3, 2, 8);
  } catch (const Error& err) {
    e = err.what();
  }
  std::printf("  rope bad position: %s\n", e.c_str());
  EXPECT_NE(e.find("position 16 of token 2"), std::string::npos) << e;
  // a label outside the vocabulary
  Tensor logits = Tensor::zeros({2, 5}, DType::F32, Device::CUDA), lse = Tensor::zeros({2}, DType::F32, Device::CUDA);
  Tensor labels = dev_ints({1, 7});
  e.clear();
  try {
    k.cross_entropy.forward(logits.f32(), labels.data<int32_t>(), 2, 5, lse.f32());
  } catch (const Error& err) {
    e = err.what();
  }
  std::printf("  cross entropy bad label: %s\n", e.c_str());
  EXPECT_NE(e.find("label 7 of row 1"), std::string::npos) << e;
  // (last test: should the bad copy below ever fault asynchronously, it cannot poison the tests before it)
  // a CUDA runtime error becomes a twinkle::Error naming the call
  e.clear();
  try {
    device_allocator(Device::CUDA).copy(nullptr, x.raw(), size_t{1} << 40, CopyKind::DeviceToDevice);
  } catch (const Error& err) {
    e = err.what();
  }
  std::printf("  bad copy: %s\n", e.c_str());
  EXPECT_NE(e.find("cudaMemcpyAsync"), std::string::npos) << e;
  cuda::synchronize();  // the stream is still usable
  EXPECT_EQ(x.to_vector(), std::vector<float>(48, 0.0f));
}

int main(int argc, char** argv) {
  std::string why;
  if (cuda::visible_device_count(&why) == 0) {
    std::printf("SKIPPED: no GPU visible (CUDA_VISIBLE_DEVICES=%s): %s\n",
                std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "<unset>", why.c_str());
    return 77;
  }
  cuda::init();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
