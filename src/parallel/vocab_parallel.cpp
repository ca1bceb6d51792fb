#include "twinkle/parallel/vocab_parallel.h"

#include <algorithm>
#include <cmath>

#include <vector>

#include "twinkle/core/device_copy.h"
#include "twinkle/core/error.h"
#include "twinkle/kernels/cpu/cross_entropy.h"

namespace twinkle::parallel {

VocabShard make_vocab_shard(int64_t vocab, int tp_rank, int tp_size, int64_t divisible_by) {
  check(vocab > 0, "vocab_size must be positive");
  VocabShard s;
  s.vocab = vocab;
  int64_t m = divisible_by * tp_size;
  s.padded = (vocab + m - 1) / m * m;
  s.local = s.padded / tp_size;
  s.start = s.local * tp_rank;
  s.valid = std::clamp<int64_t>(vocab - s.start, 0, s.local);
  return s;
}

double vocab_parallel_ce_forward(dist::ProcessGroup& tp, const VocabShard& shard, const float* logits,
                                 const int32_t* targets, int64_t T, float* lse, float* row_max, float* target_logit) {
  namespace k = twinkle::kernels::cpu;
  const kernels::CrossEntropyOp ce{k::ce_local_max, k::ce_local_sumexp_target, k::ce_backward,
                                   k::cross_entropy_forward};
  return vocab_parallel_ce_forward(tp, shard, logits, targets, T, lse, row_max, target_logit, ce);
}

double vocab_parallel_ce_forward(dist::ProcessGroup& tp, const VocabShard& shard, const float* logits,
                                 const int32_t* targets, int64_t T, float* lse, float* row_max, float* target_logit,
                                 const kernels::CrossEntropyOp& ce, Device dev) {
  ce.local_max(logits, T, shard.local, shard.valid, row_max);
  if (tp.size() > 1) tp.all_reduce(row_max, T, DType::F32, dist::ReduceOp::Max);
  // lse is used as the sum-exp scratch
  ce.local_sumexp_target(logits, targets, row_max, T, shard.local, shard.valid, shard.start, lse, target_logit);
  if (tp.size() > 1) {
    tp.all_reduce(lse, T, DType::F32, dist::ReduceOp::Sum);
    tp.all_reduce(target_logit, T, DType::F32, dist::ReduceOp::Sum);
  }
  auto combine = [](float* l, const float* m, const int32_t* tg, const float* tl, int64_t n) {
    double total = 0;
    for (int64_t t = 0; t < n; ++t) {
      l[t] = m[t] + std::log(l[t]);
      if (tg[t] != -100) total += static_cast<double>(l[t]) - static_cast<double>(tl[t]);
    }
    return total;
  };
  if (dev == Device::CPU) return combine(lse, row_max, targets, target_logit, T);
  const size_t n = static_cast<size_t>(T);
  std::vector<float> hl(n), hm(n), ht(n);
  std::vector<int32_t> hg(n);
  download_bytes(dev, hl.data(), lse, n * 4);
  download_bytes(dev, hm.data(), row_max, n * 4);
  download_bytes(dev, ht.data(), target_logit, n * 4);
  download_bytes(dev, hg.data(), targets, n * 4);
  const double total = combine(hl.data(), hm.data(), hg.data(), ht.data(), T);
  upload_bytes(dev, lse, hl.data(), n * 4);
  return total;
}

}  // namespace twinkle::parallel
