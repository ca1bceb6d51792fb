#include "twinkle/parallel/tp_comm.h"

#include <cstring>

namespace twinkle::parallel {

void all_gather_rows(dist::ProcessGroup& tp, const float* local, float* full, int64_t local_rows, int64_t cols) {
  if (tp.size() == 1) {
    if (full != local) std::memcpy(full, local, static_cast<size_t>(local_rows * cols) * 4);
    return;
  }
  tp.all_gather(local, full, local_rows * cols, DType::F32);
}

void reduce_scatter_rows(dist::ProcessGroup& tp, const float* full, float* local, int64_t local_rows, int64_t cols) {
  if (tp.size() == 1) {
    if (full != local) std::memcpy(local, full, static_cast<size_t>(local_rows * cols) * 4);
    return;
  }
  tp.reduce_scatter(full, local, local_rows * cols);
}

void all_reduce_sum(dist::ProcessGroup& g, float* buf, int64_t n) {
  if (g.size() == 1 || n == 0) return;
  g.all_reduce(buf, n, DType::F32, dist::ReduceOp::Sum);
}

const float* sp_gather_rows(const TensorParallel& tp, const float* local, float* full, int64_t T, int64_t cols) {
  if (!tp.sequence_parallel) return local;
  all_gather_rows(*tp.group, local, full, T / tp.size, cols);
  return full;
}

float* tp_reduce_rows(const TensorParallel& tp, float* full, float* local, int64_t T, int64_t cols) {
  if (!tp.sequence_parallel) {
    all_reduce_sum(*tp.group, full, T * cols);
    return full;
  }
  reduce_scatter_rows(*tp.group, full, local, T / tp.size, cols);
  return local;
}

}  // namespace twinkle::parallel
