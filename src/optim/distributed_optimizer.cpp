#include "twinkle/optim/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "twinkle/core/device_copy.h"
#include "twinkle/core/error.h"

namespace twinkle {


const kernels::KernelTable& DistributedOptimizer::kernels() const { return kt_ ? *kt_ : kernels::default_cpu_kernels(); }

DistributedOptimizer::DistributedOptimizer(ParamStore& store, std::shared_ptr<dist::ParallelState> ps,
                                           const OptimizerConfig& cfg)
    : store_(store), ps_(std::move(ps)), cfg_(cfg) {
  validate(cfg_);
  auto& g = *ps_->dp_cp;
  const int64_t n = g.size(), r = g.rank(), N = store_.numel();
  check(N % n == 0, "DistributedOptimizer: flat parameter buffer (" + std::to_string(N) +
                        ") is not divisible by the dp-cp size " + std::to_string(n));
  const bool dist = cfg_.use_distributed_optimizer && n > 1;
  // Buckets: multiples of 16*n elements, ~bucket_bytes each.
  int64_t be = std::max<int64_t>(cfg_.bucket_bytes / 4 / (16 * n), 1) * 16 * n;
  for (int64_t s = 0; s < N; s += be) buckets_.push_back({s, std::min(be, N - s)});
  // Owned ranges.
  std::vector<std::pair<int64_t, int64_t>> owned;
  if (dist) {
    for (auto [s, len] : buckets_) owned.push_back({s + r * (len / n), len / n});
  } else {
    owned.push_back({0, N});
  }
  // Split at parameter boundaries.
  std::vector<const Param*> ps_sorted;
  for (auto& p : store_.params()) ps_sorted.push_back(&p);
  std::sort(ps_sorted.begin(), ps_sorted.end(),
            [](const Param* a, const Param* b) { return a->flat_offset < b->flat_offset; });
  const bool count_here = dist || r == 0;
  const int tp_rank = ps_->tp_rank();
  int64_t state = 0;
  for (auto [a, len] : owned) {
    int64_t pos = a, end = a + len;
    while (pos < end) {
      // find the param containing pos (or the next one)
      const Param* hit = nullptr;
      int64_t next_start = end;
      for (const Param* p : ps_sorted) {
        int64_t ps0 = p->flat_offset, ps1 = p->flat_offset + p->data.numel();
        if (pos >= ps0 && pos < ps1) {
          hit = p;
          break;
        }
        if (ps0 > pos) {
          next_start = std::min(next_start, ps0);
          break;
        }
      }
      Segment seg{};
      seg.start = pos;
      if (hit) {
        int64_t stop = std::min(end, hit->flat_offset + hit->data.numel());
        seg.len = stop - pos;
        seg.decay = hit->weight_decay;
        seg.counts = count_here && !hit->tied_copy && !(hit->tp_duplicate && tp_rank != 0);
      } else {
        seg.len = next_start - pos;
        seg.decay = false;
        seg.counts = false;
      }
      seg.state_off = state;
      state += seg.len;
      segments_.push_back(seg);
      pos += seg.len;
    }
  }
  state_n_ = state;
  if (store_.device() == Device::CPU) {
    m_.assign(static_cast<size_t>(state), 0.0f);
    v_.assign(static_cast<size_t>(state), 0.0f);
  } else {  // AdamW state next to the parameters, on the GPU (zero-filled)
    dm_ = Tensor::zeros({std::max<int64_t>(state, 1)}, DType::F32, store_.device());
    dv_ = Tensor::zeros({std::max<int64_t>(state, 1)}, DType::F32, store_.device());
  }
}

float* DistributedOptimizer::bucket_scratch(int64_t n) {
  if (store_.device() == Device::CPU) {
    if (static_cast<int64_t>(scratch_.size()) < n) scratch_.resize(static_cast<size_t>(n));
    return scratch_.data();
  }
  if (!dscratch_.defined() || dscratch_.numel() < n) dscratch_ = Tensor::zeros({n}, DType::F32, store_.device());
  return dscratch_.f32();
}

void DistributedOptimizer::reduce_gradients() {
  auto& g = *ps_->dp_cp;
  const int64_t n = g.size();
  if (n == 1) {
    reduced_ = true;
    return;
  }
  float* grads = store_.flat_grads().f32();
  if (cfg_.use_distributed_optimizer) {
    for (auto [s, len] : buckets_) {
      const int64_t shard = len / n;
      float* scratch = bucket_scratch(shard);
      g.reduce_scatter(grads + s, scratch, shard);
      copy_bytes(store_.device(), grads + s + g.rank() * shard, scratch, static_cast<size_t>(shard) * 4);
    }
  } else {
    for (auto [s, len] : buckets_) g.all_reduce(grads + s, len, DType::F32, dist::ReduceOp::Sum);
  }
  reduced_ = true;
}

double DistributedOptimizer::grad_norm() {
  const float* grads = store_.flat_grads().f32();
  double ss = 0;
  for (const auto& seg : segments_)
    if (seg.counts) ss += kernels().norms.sum_squares(grads + seg.start, seg.len);
  if (ps_->world->size() > 1) ps_->world->all_reduce_f64(&ss, 1, dist::ReduceOp::Sum);
  return std::sqrt(ss);
}

StepStats DistributedOptimizer::step(double lr, double max_norm) {
  auto& g = *ps_->dp_cp;
  if (store_.device() != Device::CPU)
    check(kernels().device == device_name(store_.device()),
          "DistributedOptimizer: the parameters live on device '" + device_name(store_.device()) +
              "' but the optimizer's kernels are '" + kernels().device + "' (call set_kernels with the model's table)");
  const int64_t bytes0 = g.bytes_sent() + ps_->world->bytes_sent();
  if (!reduced_) reduce_gradients();
  StepStats st;
  st.grad_norm = grad_norm();
  st.lr = lr;
  if (!std::isfinite(st.grad_norm)) {
    // Never apply a non-finite update (failure class B26): the norm is a world all-reduce,
    // so every rank takes this branch and no collective below is left half-entered.
    discard_gradients();
    st.skipped = true;
    st.step = step_;
    last_bytes_ = g.bytes_sent() + ps_->world->bytes_sent() - bytes0;
    return st;
  }
  const double clip = max_norm >= 0 ? max_norm : cfg_.clip_grad;
  float* grads = store_.flat_grads().f32();
  float* params = store_.flat_params().f32();
  if (clip > 0) {
    const double coef = clip / (st.grad_norm + 1e-6);
    if (coef < 1.0) {
      st.clip_coef = coef;
      for (const auto& seg : segments_) kernels().norms.scale(grads + seg.start, seg.len, static_cast<float>(coef));
    }
  }
  ++step_;
  for (const auto& seg : segments_) {
    kernels().adamw.step(params + seg.start, grads + seg.start, m_state() + seg.state_off, v_state() + seg.state_off,
                         seg.len, static_cast<float>(lr), static_cast<float>(cfg_.adam_beta1),
                         static_cast<float>(cfg_.adam_beta2), static_cast<float>(cfg_.adam_eps),
                         seg.decay ? static_cast<float>(cfg_.weight_decay) : 0.0f, step_);
  }
  const int64_t n = g.size();
  if (cfg_.use_distributed_optimizer && n > 1) {
    for (auto [s, len] : buckets_) {
      const int64_t shard = len / n;
      float* scratch = bucket_scratch(shard);
      copy_bytes(store_.device(), scratch, params + s + g.rank() * shard, static_cast<size_t>(shard) * 4);
      g.all_gather(scratch, params + s, shard, DType::F32);
    }
  }
  store_.zero_grad();
  reduced_ = false;
  st.step = step_;
  last_bytes_ = g.bytes_sent() + ps_->world->bytes_sent() - bytes0;
  return st;
}

}  // namespace twinkle
