// The host emulation of CUDA itself (cuda_shim.h): barrier, shuffle and exit semantics of the fiber
// scheduler, no switches for a kernel without barriers, the pointer-space checks of launches, copies,
// memsets and cuBLAS, and ASan seeing device and fiber-stack overflows. Built under ASan with the shim
// alone (tests/cuda.cmake: test_cuda_shim).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cuda_shim.h"
// after the CUDA API (here the shim's), as in src/kernels/cuda and src/dist/cuda
#include "../../../src/core/cuda_check.h"

namespace {

using twinkle_shim::launch;

std::string last_error_text() {
  const cudaError_t e = cudaGetLastError();
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

template <typename T> struct DeviceBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceBuf(size_t count) : n(count) {
    void* v = nullptr;
    EXPECT_EQ(cudaMalloc(&v, n * sizeof(T)), cudaSuccess);
    p = static_cast<T*>(v);
  }
  ~DeviceBuf() { EXPECT_EQ(cudaFree(p), cudaSuccess); }
  void put(const std::vector<T>& h) {
    ASSERT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// ---------------------------------------------------------------- scheduling semantics

__global__ void k_block_sum(const int* x, int* out) {
  __shared__ int sh[256];
  const unsigned t = threadIdx.x;
  sh[t] = x[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
    if (t < w) sh[t] += sh[t + w];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = sh[0];
}

TEST(CudaShim, SyncthreadsOrdersSharedMemoryAcrossTheBlock) {
  const int blocks = 5, nt = 256;
  std::vector<int> h(blocks * nt);
  std::iota(h.begin(), h.end(), 1);
  DeviceBuf<int> x(h.size()), out(blocks);
  x.put(h);
  launch(k_block_sum, blocks, nt, 0, x.p, out.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> r = out.get();
  for (int b = 0; b < blocks; ++b) {
    const int lo = b * nt + 1, hi = (b + 1) * nt;
    EXPECT_EQ(r[b], (lo + hi) * nt / 2) << "block " << b;
  }
}

__global__ void k_shfl(const float* x, float* out, int delta) {
  const unsigned t = threadIdx.x + blockDim.x * threadIdx.y;
  out[t] = __shfl_down_sync(0xffffffffu, x[t], delta);
}

TEST(CudaShim, ShuffleDownReadsTheLaneDeltaAboveWithinTheWarp) {
  const unsigned nt = 72;  // two full warps and a partial one of 8 lanes; 2-d block (36 x 2)
  std::vector<float> h(nt);
  for (unsigned i = 0; i < nt; ++i) h[i] = 100.0f + i;
  DeviceBuf<float> x(nt), out(nt);
  x.put(h);
  for (int delta : {1, 5, 16}) {
    launch(k_shfl, 1, dim3(36, 2), 0, x.p, out.p, delta);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    const std::vector<float> r = out.get();
    for (unsigned t = 0; t < nt; ++t) {
      const unsigned lane = t % 32, src = lane + delta, st = t - lane + src;
      EXPECT_EQ(r[t], src < 32 && st < nt ? h[st] : h[t]) << "thread " << t << " delta " << delta;
    }
  }
}

// Warp sums by shuffles, then a block barrier, several rounds: shuffles and __syncthreads interleave.
__global__ void k_warp_then_block(const double* x, double* out) {
  __shared__ double sh[8];
  const unsigned t = threadIdx.x, lane = t % 32, warp = t / 32;
  double v = x[t];
  for (int round = 0; round < 3; ++round) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    v = 0.0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) v += sh[w];
    v = v / blockDim.x + t;  // something new for the next round
  }
  out[t] = v;
}

TEST(CudaShim, ShufflesAndBlockBarriersInterleave) {
  const unsigned nt = 256;
  std::vector<double> h(nt);
  for (unsigned i = 0; i < nt; ++i) h[i] = 0.5 * i;
  DeviceBuf<double> x(nt), out(nt);
  x.put(h);
  launch(k_warp_then_block, 1, nt, 0, x.p, out.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  // the same on the host: lane 0 of each warp holds the warp's sum
  std::vector<double> v = h;
  for (int round = 0; round < 3; ++round) {
    double total = 0.0;
    for (unsigned w = 0; w < nt / 32; ++w) {
      double s = 0.0;  // the shuffle tree's order for lane 0
      std::vector<double> lanes(v.begin() + w * 32, v.begin() + w * 32 + 32);
      for (int o = 16; o > 0; o >>= 1)
        for (int l = 0; l < 32; ++l) lanes[l] += l + o < 32 ? lanes[l + o] : lanes[l];
      s = lanes[0];
      total += s;
    }
    for (unsigned t = 0; t < nt; ++t) v[t] = total / nt + t;
  }
  EXPECT_EQ(out.get(), v);
}

__global__ void k_sync_or(const int* flags, int* out) {
  const unsigned t = threadIdx.x;
  int acc = 0;
  for (int round = 0; round < 4; ++round) acc = acc * 2 + __syncthreads_or(flags[round * blockDim.x + t]);
  out[t] = acc;
}

TEST(CudaShim, SyncthreadsOrOfSuccessiveRounds) {
  const unsigned nt = 64;
  std::vector<int> f(4 * nt, 0);
  f[0 * nt + 63] = 1;  // round 0: one thread
  f[2 * nt + 0] = 7;   // round 2: another, non-zero counts as true
  DeviceBuf<int> flags(f.size()), out(nt);
  flags.put(f);
  launch(k_sync_or, 1, nt, 0, flags.p, out.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int v : out.get()) EXPECT_EQ(v, 0b1010);
}

__global__ void k_early_exit(int* out, unsigned live) {
  __shared__ int sh[128];
  const unsigned t = threadIdx.x;
  if (t >= live) return;  // exited threads do not hold back __syncthreads (as on sm_70+)
  sh[t] = static_cast<int>(t);
  __syncthreads();
  out[t] = sh[live - 1 - t];
}

TEST(CudaShim, ExitedThreadsDoNotHoldBackBarriers) {
  DeviceBuf<int> out(128);
  launch(k_early_exit, 1, 128, 0, out.p, 100u);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> r = out.get();
  for (int t = 0; t < 100; ++t) EXPECT_EQ(r[t], 99 - t);
}

__global__ void k_divergent(float* out) {
  const unsigned t = threadIdx.x;
  if (t < 16)
    __syncthreads();
  else
    out[t] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}

TEST(CudaShim, BarriersThatCannotMeetFailTheLaunchAndTheNextLaunchRuns) {
  DeviceBuf<float> out(64);
  launch(k_divergent, 2, 64, 0, out.p);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "queued: the fault shows when the work runs";
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  const std::string e = last_error_text();
  EXPECT_NE(e.find("cudaErrorLaunchFailure"), std::string::npos) << e;
  EXPECT_NE(e.find("k_divergent"), std::string::npos) << e;
  EXPECT_NE(e.find("block (0, 0, 0)"), std::string::npos) << e;
  std::vector<int> h(256, 1);
  DeviceBuf<int> x(256), sum(1);
  x.put(h);
  launch(k_block_sum, 1, 256, 0, x.p, sum.p);  // the abandoned fibers start over
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(sum.get()[0], 256);
}

__global__ void k_axpy(float* y, const float* x, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}

TEST(CudaShim, AKernelWithoutBarriersRunsEachBlockOnOneFiberWithoutSwitches) {
  const int n = 4 * 1024;
  DeviceBuf<float> x(n), y(n);
  x.put(std::vector<float>(n, 2.0f));
  y.put(std::vector<float>(n, 1.0f));
  launch(k_axpy, 1, 1024, 0, y.p, x.p, 0.0f, n);  // warm: the fiber pool exists
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const twinkle_shim::FiberStats s0 = twinkle_shim::fiber_stats();
  launch(k_axpy, n / 1024, 1024, 0, y.p, x.p, 0.5f, n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const twinkle_shim::FiberStats s1 = twinkle_shim::fiber_stats();
  EXPECT_EQ(s1.fibers, s0.fibers);
  EXPECT_EQ(s1.switches - s0.switches, 2u * (n / 1024)) << "one switch into the block's fiber and one back per block";
  for (float v : y.get()) EXPECT_EQ(v, 2.0f);
}

// ---------------------------------------------------------------- streams and events

__global__ void k_fill(float* y, float v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = v;
}

struct Stream {
  cudaStream_t s = nullptr;
  explicit Stream(unsigned flags = cudaStreamNonBlocking) { EXPECT_EQ(cudaStreamCreateWithFlags(&s, flags), cudaSuccess); }
  ~Stream() { EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess); }
};
struct Event {
  cudaEvent_t e = nullptr;
  Event() { EXPECT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess); }
  ~Event() { EXPECT_EQ(cudaEventDestroy(e), cudaSuccess); }
};

// A kernel on a non-blocking stream has not run when the host reads through the legacy stream's
// cudaMemcpy (a missing synchronize shows as the old bytes, as it may on a GPU); after
// cudaStreamSynchronize the host sees it.
TEST(CudaShimStreams, WorkRunsWhenTheHostWaitsForItsStream) {
  DeviceBuf<float> y(64);
  y.put(std::vector<float>(64, 1.0f));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the legacy stream's uploads are done
  Stream st;
  twinkle_shim::launch_on(st.s, k_fill, 1, 64, 0, y.p, 7.0f, 64);
  EXPECT_EQ(y.get()[0], 1.0f) << "cudaMemcpy does not wait for a non-blocking stream";
  EXPECT_EQ(cudaStreamQuery(st.s), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(st.s), cudaSuccess) << "the query ran it";
  (void)cudaGetLastError();
  EXPECT_EQ(y.get()[0], 7.0f);
  twinkle_shim::launch_on(st.s, k_fill, 1, 64, 0, y.p, 9.0f, 64);
  EXPECT_EQ(cudaStreamSynchronize(st.s), cudaSuccess);
  for (float v : y.get()) EXPECT_EQ(v, 9.0f);
  // a device-to-host cudaMemcpyAsync into pageable memory waits for its stream
  twinkle_shim::launch_on(st.s, k_fill, 1, 64, 0, y.p, 3.0f, 64);
  std::vector<float> h(64);
  EXPECT_EQ(cudaMemcpyAsync(h.data(), y.p, 64 * sizeof(float), cudaMemcpyDeviceToHost, st.s), cudaSuccess);
  EXPECT_EQ(h[63], 3.0f);
}

// A stream waits for an event recorded on another: the consumer's copy sees the producer's kernel only
// with the wait; without it the copy runs before the kernel (the host drains the consumer first).
TEST(CudaShimStreams, StreamWaitEventOrdersWorkAcrossStreams) {
  for (bool with_wait : {true, false}) {
    DeviceBuf<float> a(32), b(32);
    a.put(std::vector<float>(32, 0.0f));
    b.put(std::vector<float>(32, 0.0f));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the legacy stream's uploads are done
    Stream producer, consumer;
    Event done;
    twinkle_shim::launch_on(producer.s, k_fill, 1, 32, 0, a.p, 5.0f, 32);
    ASSERT_EQ(cudaEventRecord(done.e, producer.s), cudaSuccess);
    twinkle_shim::launch_on(producer.s, k_fill, 1, 32, 0, a.p, 6.0f, 32);  // after the record: not waited for
    if (with_wait) {
      ASSERT_EQ(cudaStreamWaitEvent(consumer.s, done.e, 0), cudaSuccess);
    }
    ASSERT_EQ(cudaMemcpyAsync(b.p, a.p, 32 * sizeof(float), cudaMemcpyDeviceToDevice, consumer.s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(consumer.s), cudaSuccess);
    EXPECT_EQ(b.get()[0], with_wait ? 5.0f : 0.0f) << (with_wait ? "the wait" : "no wait");
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(a.get()[0], 6.0f);
  }
}

// An event query of unfinished work says cudaErrorNotReady once (a polling loop ends); synchronize runs the
// stream up to the record only; a host-to-device cudaMemcpyAsync takes its source when called.
TEST(CudaShimStreams, EventsCompleteAtTheirRecordAndAsyncUploadsTakeTheSourceAtOnce) {
  DeviceBuf<float> y(16), z(16);
  Stream st;
  Event ev;
  EXPECT_EQ(cudaEventQuery(ev.e), cudaSuccess) << "never recorded: complete";
  std::vector<float> h(16, 2.0f);
  ASSERT_EQ(cudaMemcpyAsync(y.p, h.data(), 16 * sizeof(float), cudaMemcpyHostToDevice, st.s), cudaSuccess);
  std::fill(h.begin(), h.end(), -1.0f);  // reusing the host buffer at once is allowed
  ASSERT_EQ(cudaEventRecord(ev.e, st.s), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(z.p, 0, 16 * sizeof(float), st.s), cudaSuccess);
  int polls = 0;
  while (cudaEventQuery(ev.e) == cudaErrorNotReady) ++polls;
  EXPECT_EQ(polls, 1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotReady) << "as the CUDA runtime, the query's answer is the last error";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "and cleared by reading it";
  EXPECT_EQ(y.get()[5], 2.0f);
  EXPECT_EQ(cudaStreamQuery(st.s), cudaErrorNotReady) << "the memset after the record is still queued";
  EXPECT_EQ(z.get()[0], 0.0f);
  cudaStream_t gone = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&gone, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(gone), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(gone), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
}

// cuBLAS runs on the handle's stream, like kernels.
TEST(CudaShimStreams, CublasWorkIsQueuedOnTheHandlesStream) {
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate_v2(&h), CUBLAS_STATUS_SUCCESS);
  Stream st;
  ASSERT_EQ(cublasSetStream_v2(h, st.s), CUBLAS_STATUS_SUCCESS);
  DeviceBuf<float> A(4), B(4), C(4);
  A.put({1, 0, 0, 1});
  B.put({1, 2, 3, 4});
  C.put({0, 0, 0, 0});
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the legacy stream's uploads are done
  float alpha = 1.0f, beta = 0.0f;
  ASSERT_EQ(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, A.p, 2, B.p, 2, &beta, C.p, 2),
            CUBLAS_STATUS_SUCCESS);
  alpha = 100.0f;  // read when called
  EXPECT_EQ(C.get(), std::vector<float>({0, 0, 0, 0})) << "queued on the non-blocking stream";
  ASSERT_EQ(cudaStreamSynchronize(st.s), cudaSuccess);
  EXPECT_EQ(C.get(), std::vector<float>({1, 2, 3, 4}));
  EXPECT_EQ(cublasDestroy_v2(h), CUBLAS_STATUS_SUCCESS);
}

// ---------------------------------------------------------------- pointer spaces

TEST(CudaShim, AHostPointerArgumentFailsTheLaunchNamingKernelAndArgument) {
  std::vector<float> host(256, 1.0f);
  DeviceBuf<float> y(256);
  y.put(std::vector<float>(256, 0.0f));
  launch(k_axpy, 1, 256, 0, y.p, static_cast<const float*>(host.data()), 1.0f, 256);
  const std::string e = last_error_text();
  EXPECT_NE(e.find("cudaErrorIllegalAddress"), std::string::npos) << e;
  EXPECT_NE(e.find("k_axpy"), std::string::npos) << e;
  EXPECT_NE(e.find("argument 2 of 4 (const float*)"), std::string::npos) << e;
  EXPECT_NE(e.find("a host pointer"), std::string::npos) << e;
  for (float v : y.get()) EXPECT_EQ(v, 0.0f) << "the refused kernel ran";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "not sticky";
}

TEST(CudaShim, FreedDeviceMemoryIsNotDeviceMemory) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  DeviceBuf<float> x(250);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  launch(k_axpy, 1, 256, 0, static_cast<float*>(p), static_cast<const float*>(x.p), 1.0f, 250);
  const std::string e = last_error_text();
  EXPECT_NE(e.find("argument 1 of 4 (float*)"), std::string::npos) << e;
  EXPECT_NE(e.find("no live allocation"), std::string::npos) << e;
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue) << "double free";
  (void)cudaGetLastError();
}

TEST(CudaShim, NullAndOnePastTheEndArgumentsAreAllowed) {
  DeviceBuf<float> x(256);
  launch(k_axpy, 1, 32, 0, static_cast<float*>(nullptr), static_cast<const float*>(x.p + 256), 1.0f, 0);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaShim, CopiesCheckTheirDirection) {
  DeviceBuf<float> d(64), d2(64);
  std::vector<float> h(64, 1.0f), h2(64);
  const size_t b = 64 * sizeof(float);
  EXPECT_EQ(cudaMemcpy(d.p, h.data(), b, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h2.data(), d.p, b, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d2.p, d.p, b, cudaMemcpyDeviceToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h2.data(), h.data(), b, cudaMemcpyHostToHost), cudaSuccess);
  EXPECT_EQ(h2, h);
  struct Bad {
    void* dst;
    const void* src;
    size_t bytes;
    cudaMemcpyKind kind;
    const char* says;
  };
  const Bad bad[] = {
      {h2.data(), h.data(), b, cudaMemcpyHostToDevice, "the destination"},     // dst not device
      {d.p, d2.p, b, cudaMemcpyHostToDevice, "the source"},                   // src not host
      {d.p, h.data(), b, cudaMemcpyDeviceToHost, "the destination"},         // swapped direction
      {h2.data(), h.data(), b, cudaMemcpyDeviceToHost, "the source"},        // src not device
      {d.p, h.data(), b, cudaMemcpyDeviceToDevice, "the source"},            // src host
      {d.p, h.data(), b + 4, cudaMemcpyHostToDevice, "past the end"},        // beyond the allocation
      {d.p, d2.p, b, cudaMemcpyHostToHost, "not a host pointer"},
  };
  for (const Bad& c : bad) {
    EXPECT_EQ(cudaMemcpyAsync(c.dst, c.src, c.bytes, c.kind, nullptr), cudaErrorInvalidValue) << c.says;
    const std::string e = last_error_text();
    EXPECT_NE(e.find("cudaErrorInvalidValue"), std::string::npos) << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << e;
  }
  EXPECT_EQ(cudaMemsetAsync(h2.data(), 0, b, nullptr), cudaErrorInvalidValue);
  EXPECT_NE(last_error_text().find("a host pointer"), std::string::npos);
  EXPECT_EQ(cudaMemset2DAsync(d.p, 64, 0, 32, 5, nullptr), cudaErrorInvalidValue);  // 4 * 64 + 32 > 256 B
  EXPECT_NE(last_error_text().find("past the end"), std::string::npos);
  EXPECT_EQ(cudaMemset2DAsync(d.p, 64, 0, 32, 4, nullptr), cudaSuccess);
}

// cudaMemcpy2DAsync (device to device): rows of `width` bytes between pitches; both ranges checked, the
// other directions refused (the backend uses none).
TEST(CudaShim, Copy2dMovesRowsBetweenPitchesOnTheDevice) {
  DeviceBuf<float> d(24), d2(24);
  std::vector<float> h(24), got(24, -1.0f);
  for (int i = 0; i < 24; ++i) h[static_cast<size_t>(i)] = static_cast<float>(i);
  ASSERT_EQ(cudaMemcpy(d.p, h.data(), sizeof(float) * 24, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d2.p, got.data(), sizeof(float) * 24, cudaMemcpyHostToDevice), cudaSuccess);
  // 4 rows of 2 floats: source pitch 6 floats (columns 1..2), destination pitch 3 floats
  ASSERT_EQ(cudaMemcpy2DAsync(d2.p, 3 * sizeof(float), d.p + 1, 6 * sizeof(float), 2 * sizeof(float), 4,
                              cudaMemcpyDeviceToDevice, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.data(), d2.p, sizeof(float) * 24, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(got[static_cast<size_t>(3 * r)], static_cast<float>(6 * r + 1));
    EXPECT_EQ(got[static_cast<size_t>(3 * r + 1)], static_cast<float>(6 * r + 2));
    EXPECT_EQ(got[static_cast<size_t>(3 * r + 2)], -1.0f);  // between the rows: untouched
  }
  EXPECT_EQ(cudaMemcpy2DAsync(d2.p, 3 * sizeof(float), h.data(), 6 * sizeof(float), 8, 4, cudaMemcpyDeviceToDevice,
                              nullptr),
            cudaErrorInvalidValue);  // a host source
  EXPECT_NE(last_error_text().find("source"), std::string::npos);
  EXPECT_EQ(cudaMemcpy2DAsync(d2.p, 8 * sizeof(float), d.p, 6 * sizeof(float), 8, 4, cudaMemcpyDeviceToDevice,
                              nullptr),
            cudaErrorInvalidValue);  // 3 * 32 + 8 bytes > the 96-byte destination
  EXPECT_NE(last_error_text().find("destination"), std::string::npos);
}

// cudaPointerGetAttributes (the process groups tell host from device buffers with it): a live device
// block, anywhere inside it, is device memory; host memory, null and freed device memory are not.
TEST(CudaShim, PointerAttributesTellLiveDeviceMemoryFromEverythingElse) {
  auto type_of = [](const void* p) {
    cudaPointerAttributes a{};
    EXPECT_EQ(cudaPointerGetAttributes(&a, p), cudaSuccess);
    return a.type;
  };
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 100), cudaSuccess);
  std::vector<char> h(100);
  EXPECT_EQ(type_of(d), cudaMemoryTypeDevice);
  EXPECT_EQ(type_of(static_cast<char*>(d) + 99), cudaMemoryTypeDevice);
  EXPECT_EQ(type_of(h.data()), cudaMemoryTypeUnregistered);
  EXPECT_EQ(type_of(nullptr), cudaMemoryTypeUnregistered);
  EXPECT_EQ(cudaMemset(d, 0, 100), cudaSuccess);
  EXPECT_EQ(cudaMemset(h.data(), 0, 100), cudaErrorInvalidValue);
  EXPECT_NE(last_error_text().find("a host pointer"), std::string::npos);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(type_of(d), cudaMemoryTypeUnregistered);
  int dev = -1;
  char bus[32] = {0};
  EXPECT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(cudaDeviceGetPCIBusId(bus, sizeof bus, 0), cudaSuccess);
  EXPECT_STREQ(bus, "0000:00:00.0");
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

// src/core/cuda_check.h, the one conversion of a CUDA status into twinkle::Error of the kernels and
// the process groups: the context, the call, the error's name and text (with the shim's detail), the
// file without its directories and the line; the last error cleared; success passes.
TEST(CudaCheck, AFailedCallNamesContextCallErrorAndPlaceAndClearsTheLastError) {
  std::vector<float> h(8, 1.0f);
  const cudaError_t e = cudaMemcpy(h.data(), h.data(), sizeof(float) * 8, cudaMemcpyHostToDevice);
  ASSERT_EQ(e, cudaErrorInvalidValue);
  std::string what;
  try {
    twinkle::cuda_check::check(e, "process group", "tp", "cudaMemcpy(dst, src)", "/some/dir/copies.cpp", 42);
  } catch (const twinkle::Error& err) {
    what = err.what();
  }
  EXPECT_EQ(what.rfind("process group 'tp': cudaMemcpy(dst, src) failed: cudaErrorInvalidValue: invalid argument", 0),
            0u)
      << what;
  EXPECT_NE(what.find("[cuda shim: "), std::string::npos) << what;
  EXPECT_NE(what.find("the destination"), std::string::npos) << what;
  EXPECT_EQ(what.substr(what.size() - 15), "(copies.cpp:42)") << what;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_NO_THROW(TWINKLE_CUDA_CHECK(cudaSuccess));
  EXPECT_THROW(TWINKLE_CUDA_CHECK_GROUP(cudaMemsetAsync(h.data(), 0, 4, nullptr), "dp"), twinkle::Error);
  try {
    TWINKLE_CUDA_CHECK(cudaMemsetAsync(h.data(), 0, 4, nullptr));
  } catch (const twinkle::Error& err) {
    what = err.what();
  }
  EXPECT_EQ(what.rfind("CUDA error: cudaMemsetAsync(h.data(), 0, 4, nullptr) failed: cudaErrorInvalidValue: ", 0), 0u) << what;
  EXPECT_NE(what.find("(test_cuda_shim.cpp:"), std::string::npos) << what;
}

// cublasSgemmGroupedBatched: two problems of different sizes in one call equal the two sgemm calls; the
// matrix pointer arrays are read by the device, so a host array is refused at the call, and a host matrix
// behind a device array fails the work when it runs (the next synchronize).
TEST(CudaShim, GroupedGemmRunsEveryProblemAndChecksItsPointerArrays) {
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate_v2(&h), CUBLAS_STATUS_SUCCESS);
  DeviceBuf<float> A0(2 * 3), B0(3 * 4), C0(2 * 4), A1(1 * 2), B1(2 * 2), C1(1 * 2);
  A0.put(std::vector<float>(6, 1.0f));
  B0.put(std::vector<float>(12, 2.0f));
  A1.put({1.0f, 3.0f});
  B1.put({1.0f, 2.0f, 3.0f, 4.0f});
  const cublasOperation_t op[2] = {CUBLAS_OP_N, CUBLAS_OP_N};
  const int m[2] = {2, 1}, n[2] = {4, 2}, k[2] = {3, 2}, lda[2] = {2, 1}, ldb[2] = {3, 2}, ldc[2] = {2, 1};
  const int size[2] = {1, 1};
  const float alpha[2] = {1.0f, 1.0f}, beta[2] = {0.0f, 0.0f};
  std::vector<void*> host_ptrs = {A0.p, A1.p, B0.p, B1.p, C0.p, C1.p};
  DeviceBuf<void*> ptrs(6);
  const auto in = [](void* const* p) { return reinterpret_cast<const float* const*>(p); };
  ASSERT_EQ(cudaMemcpy(ptrs.p, host_ptrs.data(), 6 * sizeof(void*), cudaMemcpyHostToDevice), cudaSuccess);
  auto* carr = reinterpret_cast<float* const*>(ptrs.p + 4);
  ASSERT_EQ(cublasSgemmGroupedBatched(h, op, op, m, n, k, alpha, in(ptrs.p), lda, in(ptrs.p + 2), ldb, beta, carr, ldc, 2, size),
            CUBLAS_STATUS_SUCCESS);
  for (float v : C0.get()) EXPECT_EQ(v, 6.0f);
  EXPECT_EQ(C1.get(), (std::vector<float>{1.0f + 3.0f * 2.0f, 3.0f + 3.0f * 4.0f}));
  // pointer arrays in host memory: refused at the call
  const cublasStatus_t s = cublasSgemmGroupedBatched(h, op, op, m, n, k, alpha, in(host_ptrs.data()), lda,
                                                     in(host_ptrs.data() + 2), ldb, beta,
                                                     reinterpret_cast<float* const*>(host_ptrs.data() + 4), ldc, 2, size);
  EXPECT_EQ(s, CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(std::string(cublasGetStatusString(s)).find("Aarray (read by the device)"), std::string::npos);
  // a host matrix behind a device pointer array: the work fails when it runs
  std::vector<float> hostB(12, 2.0f);
  host_ptrs[2] = hostB.data();
  ASSERT_EQ(cudaMemcpy(ptrs.p, host_ptrs.data(), 6 * sizeof(void*), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cublasSgemmGroupedBatched(h, op, op, m, n, k, alpha, in(ptrs.p), lda, in(ptrs.p + 2), ldb, beta, carr, ldc, 2, size),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_EQ(cublasDestroy_v2(h), CUBLAS_STATUS_SUCCESS);
}

// The shim's GEMM (4 x 4 blocks of C and the edges) against a double loop written here, for every
// transpose pair, leading dimensions larger than the rows, m, n and k not multiples of 4 or 8, beta != 0,
// fp32 (cublasSgemm) and bf16 inputs (cublasGemmEx).
TEST(CudaShim, GemmEqualsADoubleLoopForEveryTransposeAndEdge) {
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate_v2(&h), CUBLAS_STATUS_SUCCESS);
  const auto bf16_bits = [](float x) {  // truncation is enough: the inputs below are exact in bf16
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return static_cast<uint16_t>(u >> 16);
  };
  for (const bool bf16 : {false, true})
    for (const cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T})
      for (const cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
        const int m = 9, n = 11, k = 19;
        const int ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
        const int br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
        const int lda = ar + 3, ldb = br + 2, ldc = m + 1;
        std::vector<float> a(static_cast<size_t>(lda) * ac), b(static_cast<size_t>(ldb) * bc),
            c(static_cast<size_t>(ldc) * n);
        for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(static_cast<int>(i * 7 % 23) - 11) / 8.0f;
        for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(static_cast<int>(i * 5 % 19) - 9) / 4.0f;
        for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(i % 5);
        const float alpha = 0.5f, beta = bf16 ? 0.0f : 2.0f;
        std::vector<float> want = c;
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) {
            double s = 0.0;
            for (int p = 0; p < k; ++p) {
              const float x = ta == CUBLAS_OP_N ? a[i + static_cast<size_t>(p) * lda] : a[p + static_cast<size_t>(i) * lda];
              const float y = tb == CUBLAS_OP_N ? b[p + static_cast<size_t>(j) * ldb] : b[j + static_cast<size_t>(p) * ldb];
              s += static_cast<double>(x) * y;
            }
            float& w = want[i + static_cast<size_t>(j) * ldc];
            w = static_cast<float>(alpha * s + beta * static_cast<double>(w));
          }
        DeviceBuf<float> C(c.size());
        C.put(c);
        if (bf16) {
          std::vector<uint16_t> a16(a.size()), b16(b.size());
          for (size_t i = 0; i < a.size(); ++i) a16[i] = bf16_bits(a[i]);
          for (size_t i = 0; i < b.size(); ++i) b16[i] = bf16_bits(b[i]);
          DeviceBuf<uint16_t> A(a16.size()), B(b16.size());
          A.put(a16);
          B.put(b16);
          ASSERT_EQ(cublasGemmEx(h, ta, tb, m, n, k, &alpha, A.p, CUDA_R_16BF, lda, B.p, CUDA_R_16BF, ldb, &beta, C.p,
                                 CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    CUBLAS_STATUS_SUCCESS);
        } else {
          DeviceBuf<float> A(a.size()), B(b.size());
          A.put(a);
          B.put(b);
          ASSERT_EQ(cublasSgemm_v2(h, ta, tb, m, n, k, &alpha, A.p, lda, B.p, ldb, &beta, C.p, ldc),
                    CUBLAS_STATUS_SUCCESS);
        }
        const std::vector<float> got = C.get();
        for (size_t i = 0; i < got.size(); ++i)  // the inputs are multiples of 1/32: every sum is exact
          ASSERT_EQ(got[i], want[i]) << "bf16 " << bf16 << " op " << ta << tb << " element " << i;
      }
  EXPECT_EQ(cublasDestroy_v2(h), CUBLAS_STATUS_SUCCESS);
}

TEST(CudaShim, CublasChecksItsMatrixAndScalarPointers) {
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate_v2(&h), CUBLAS_STATUS_SUCCESS);
  const int m = 3, n = 4, k = 5;
  DeviceBuf<float> A(m * k), B(k * n), C(m * n), one(1);
  A.put(std::vector<float>(m * k, 1.0f));
  B.put(std::vector<float>(k * n, 2.0f));
  one.put({1.0f});
  std::vector<float> hostB(k * n, 2.0f);
  const float alpha = 1.0f, beta = 0.0f;
  EXPECT_EQ(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, A.p, m, B.p, k, &beta, C.p, m),
            CUBLAS_STATUS_SUCCESS);
  for (float v : C.get()) EXPECT_EQ(v, 10.0f);
  auto status = [](cublasStatus_t s) { return std::string(cublasGetStatusString(s)); };
  cublasStatus_t s =
      cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, A.p, m, hostB.data(), k, &beta, C.p, m);
  EXPECT_EQ(s, CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(status(s).find("B (argument 10"), std::string::npos) << status(s);
  EXPECT_NE(status(s).find("a host pointer"), std::string::npos) << status(s);
  s = cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, A.p, m + 1, B.p, k, &beta, C.p, m);  // lda too big
  EXPECT_EQ(s, CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(status(s).find("A (argument 8"), std::string::npos) << status(s);
  EXPECT_NE(status(s).find("past the end"), std::string::npos) << status(s);
  s = cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, one.p, A.p, m, B.p, k, &beta, C.p, m);
  EXPECT_EQ(s, CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(status(s).find("alpha (argument 7)"), std::string::npos) << status(s);
  EXPECT_EQ(cublasDestroy_v2(h), CUBLAS_STATUS_SUCCESS);
}

// ---------------------------------------------------------------- ASan sees the emulated device

__global__ void k_read_past(const float* x, float* out, int n) {
  if (threadIdx.x == 0) out[0] = x[n];  // one past the allocation
}

__global__ void k_stack_overflow(float* out, int i) {
  float local[8];
  for (int j = 0; j < 8; ++j) local[j] = static_cast<float>(j);
  __syncthreads();  // on a fiber that was switched away and back
  out[threadIdx.x] = local[i + static_cast<int>(threadIdx.x % 2)];
}

void read_past_an_allocation() {
  DeviceBuf<float> x(10), out(1);
  launch(k_read_past, 1, 32, 0, static_cast<const float*>(x.p), out.p, 10);
}
void overflow_a_fiber_stack() {
  DeviceBuf<float> out(64);
  launch(k_stack_overflow, 1, 64, 0, out.p, 7);
}

// Host code touching device memory outside a copy (a device buffer handed to host code as if it were
// host memory) faults, as with a GPU's memory; inside a launch, a copy or a memset it is open.
__attribute__((noinline)) float host_reads(const float* p) { return *static_cast<const volatile float*>(p); }
void read_device_memory_on_the_host() {
  DeviceBuf<float> x(4);
  std::printf("%f\n", host_reads(x.p));
}
TEST(CudaShimDeathTest, AHostReadOfDeviceMemoryFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(read_device_memory_on_the_host(), "SEGV");
  DeviceBuf<float> x(4);
  std::vector<float> h(4, 2.0f), back(4);
  EXPECT_EQ(cudaMemcpy(x.p, h.data(), 16, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(back.data(), x.p, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, h);
}

TEST(CudaShimDeathTest, AsanSeesReadsPastADeviceAllocation) {
#ifndef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "not built with AddressSanitizer";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(read_past_an_allocation(), "AddressSanitizer: use-after-poison");
}

TEST(CudaShimDeathTest, AsanSeesStackOverflowsOnFiberStacks) {
#ifndef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "not built with AddressSanitizer";
#endif
#if !defined(__x86_64__) || defined(TWINKLE_SHIM_UCONTEXT)
  GTEST_SKIP() << "ucontext switches: ASan's swapcontext interceptor clears a resumed stack's redzones";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // naming the variable needs ASan to know the fiber's stack: the switch annotations (without them the
  // report stops at the stack trace)
  EXPECT_DEATH(overflow_a_fiber_stack(), "AddressSanitizer: stack-buffer-overflow.*'local'.*overflows this variable");
}

// ---------------------------------------------------------------- warp matrix operations (wmma)

// One warp: D = A B + C on 16 x 16 x 16 bf16 tiles, A row-major or column-major (layout chosen by `acol`), B
// column-major, C loaded row-major; D stored column-major; every thread's accumulator elements scaled by 2
// (x[] use), then one more mma on top.
template <typename LA>
__global__ void k_wmma(const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c, float* d) {
  namespace wmma = nvcuda::wmma;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::load_matrix_sync(fa, a, 24);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::load_matrix_sync(acc, c, 20, wmma::mem_row_major);
  wmma::mma_sync(acc, fa, fb, acc);
  for (int i = 0; i < acc.num_elements; ++i) acc.x[i] *= 2.0f;
  wmma::store_matrix_sync(d, acc, 16, wmma::mem_col_major);
}

__nv_bfloat16 bf16_of(float v) {  // v is exactly representable (small integers / 4)
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return __nv_bfloat16{static_cast<uint16_t>(u >> 16)};
}

template <typename LA> void check_wmma(bool a_col_major) {
  std::vector<__nv_bfloat16> ha(16 * 24), hb(16 * 16);
  std::vector<float> va(16 * 16), vb(16 * 16), hc(16 * 20, 0.0f);
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 16; ++k) {
      va[r * 16 + k] = static_cast<float>((r * 7 + k * 3) % 11 - 5) / 4;
      ha[a_col_major ? k * 24 + r : r * 24 + k] = bf16_of(va[r * 16 + k]);
      vb[k * 16 + r] = static_cast<float>((k * 5 + r) % 9 - 4) / 2;  // B [k][col = r]
      hb[r * 16 + k] = bf16_of(vb[k * 16 + r]);                      // column-major: col r, row k
    }
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) hc[r * 20 + n] = static_cast<float>(r - n);
  DeviceBuf<__nv_bfloat16> a(ha.size()), b(hb.size());
  DeviceBuf<float> c(hc.size()), d(256);
  a.put(ha);
  b.put(hb);
  c.put(hc);
  launch(k_wmma<LA>, 1, 64, 0, a.p, b.p, c.p, d.p);  // two warps: both compute the same tile
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> hd = d.get();
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      double s = hc[r * 20 + n];
      for (int k = 0; k < 16; ++k) s += static_cast<double>(va[r * 16 + k]) * vb[k * 16 + n];
      ASSERT_EQ(hd[n * 16 + r], static_cast<float>(2 * s)) << "row " << r << " col " << n;
    }
}

TEST(CudaShim, WmmaProductOfOneWarpEqualsTheLoop) {
  check_wmma<nvcuda::wmma::row_major>(false);
  check_wmma<nvcuda::wmma::col_major>(true);
}

__global__ void k_wmma_misaligned(const __nv_bfloat16* a) {
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> fa;
  nvcuda::wmma::load_matrix_sync(fa, a + 8, 16);  // 16 bytes past a 32-byte boundary
}
void load_misaligned_fragment() {
  DeviceBuf<__nv_bfloat16> a(512);
  launch(k_wmma_misaligned, 1, 32, 0, a.p);
  (void)cudaDeviceSynchronize();
}
TEST(CudaShimDeathTest, WmmaRefusesAMisalignedFragmentPointer) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(load_misaligned_fragment(), "wmma::load_matrix_sync \\(matrix_a\\): pointer .* not 32-byte aligned");
}

}  // namespace
