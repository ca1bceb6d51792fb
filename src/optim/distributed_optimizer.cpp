#include "twinkle/optim/distributed_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "twinkle/core/device_copy.h"
#include "twinkle/core/error.h"

namespace twinkle {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

const kernels::KernelTable& DistributedOptimizer::kernels() const { return kt_ ? *kt_ : kernels::default_cpu_kernels(); }

DistributedOptimizer::DistributedOptimizer(ParamStore& store, std::shared_ptr<dist::ParallelState> ps,
                                           const OptimizerConfig& cfg)
    : store_(store), ps_(std::move(ps)), cfg_(cfg) {
  validate(cfg_);
  // Two regions of the flat buffer (ParamStore::finalize): dense parameters, reduced and
  // sharded over dp-cp, then expert parameters, reduced and sharded over the expert-data-
  // parallel group (Megatron-core: expert_data_parallel_group).
  const int64_t N = store_.numel(), X = store_.expert_offset();
  regions_.push_back(Region{ps_->dp_cp.get(), 0, X, false, {}});
  if (X < N) {
    check(ps_->edp != nullptr, "DistributedOptimizer: the store has expert parameters but no expert-dp group");
    regions_.push_back(Region{ps_->edp.get(), X, N - X, true, {}});
  }
  // Split at parameter boundaries.
  std::vector<const Param*> ps_sorted;
  for (auto& p : store_.params()) ps_sorted.push_back(&p);
  std::sort(ps_sorted.begin(), ps_sorted.end(),
            [](const Param* a, const Param* b) { return a->flat_offset < b->flat_offset; });
  const int tp_rank = ps_->tp_rank();
  int64_t state = 0;
  for (Region& rg : regions_) {
    auto& g = *rg.group;
    const int64_t n = g.size(), r = g.rank();
    check(rg.len % n == 0, std::string("DistributedOptimizer: ") + (rg.expert ? "expert" : "dense") +
                               " region of the flat parameter buffer (" + std::to_string(rg.len) +
                               ") is not divisible by the " + (rg.expert ? "expert-dp" : "dp-cp") + " size " +
                               std::to_string(n));
    const bool dist = cfg_.use_distributed_optimizer && n > 1;
    // Buckets: multiples of 16*n elements, ~bucket_bytes each.
    const int64_t be = std::max<int64_t>(cfg_.bucket_bytes / 4 / (16 * n), 1) * 16 * n;
    for (int64_t s = rg.start; s < rg.start + rg.len; s += be)
      rg.buckets.push_back({s, std::min(be, rg.start + rg.len - s)});
    // Owned ranges.
    std::vector<std::pair<int64_t, int64_t>> owned;
    if (dist) {
      for (auto [s, len] : rg.buckets) owned.push_back({s + r * (len / n), len / n});
    } else {
      owned.push_back({rg.start, rg.len});
    }
    // Each element counts once in the grad norm: on its ZeRO owner, else on the group's rank 0;
    // a tied copy never, a tp-replicated dense parameter on tp rank 0 only (Megatron's get_grad_norm_fp32).
    const bool count_here = dist || r == 0;
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
          seg.counts = count_here && !hit->tied_copy && !(hit->tp_duplicate && tp_rank != 0 && !hit->expert);
        } else {
          seg.len = next_start - pos;
          seg.decay = false;
          seg.counts = false;
        }
        seg.expert = rg.expert;
        seg.state_off = state;
        state += seg.len;
        segments_.push_back(seg);
        pos += seg.len;
      }
    }
  }
  state_n_ = state;
  // Communication buckets in the reverse order of use (Megatron builds them from the last
  // parameter backwards): the backward makes high flat offsets final first.
  for (size_t ri = 0; ri < regions_.size(); ++ri) {
    const Region& rg = regions_[ri];
    if (rg.group->size() == 1) continue;
    for (size_t k = rg.buckets.size(); k-- > 0;) {
      Bucket b;
      b.region = ri;
      b.start = rg.buckets[k].first;
      b.len = rg.buckets[k].second;
      for (const Param* p : ps_sorted) {
        const int64_t lo = std::max(b.start, p->flat_offset), hi = std::min(b.start + b.len, p->flat_offset + p->data.numel());
        if (hi > lo) b.param_elems += hi - lo;
      }
      buckets_.push_back(std::move(b));
    }
  }
  if (store_.device() == Device::CPU) {
    m_.assign(static_cast<size_t>(state), 0.0f);
    v_.assign(static_cast<size_t>(state), 0.0f);
  } else {  // AdamW state next to the parameters, on the GPU (zero-filled)
    dm_ = Tensor::zeros({std::max<int64_t>(state, 1)}, DType::F32, store_.device());
    dv_ = Tensor::zeros({std::max<int64_t>(state, 1)}, DType::F32, store_.device());
  }
}

bool DistributedOptimizer::in_store(const Param& p) const {
  const auto& v = store_.params();
  return !v.empty() && &p >= v.data() && &p < v.data() + v.size();
}

// Starts bucket b's gradient collective (in place on the gradient buffer; on a device store in the
// backend's stream order, ProcessGroup::iall_reduce's contract).
void DistributedOptimizer::launch_grad(Bucket& b) {
  const Region& rg = regions_[b.region];
  auto& g = *rg.group;
  const int64_t n = g.size();
  float* grads = store_.flat_grads().f32();
  b.launched = true;
  ++stats_.grad_buckets;
  b.grad_work = cfg_.use_distributed_optimizer ? g.ireduce_scatter(grads + b.start, b.len / n)
                                               : g.iall_reduce(grads + b.start, b.len);
}

// Waits for bucket b's collective and moves this rank's reduced shard from the bucket's start
// (where MPI_IN_PLACE reduce-scatter leaves it) to its owned place.
void DistributedOptimizer::complete_grad(Bucket& b) {
  if (b.done) return;
  if (b.grad_work) {
    b.grad_work->wait();
    b.grad_work.reset();
  }
  const auto& g = *regions_[b.region].group;
  if (cfg_.use_distributed_optimizer && g.rank() > 0) {
    const int64_t shard = b.len / g.size();
    float* grads = store_.flat_grads().f32();
    // disjoint: [r * shard, (r + 1) * shard) and [0, shard) for r >= 1 (on the device: stream-ordered)
    copy_bytes(store_.device(), grads + b.start + g.rank() * shard, grads + b.start, static_cast<size_t>(shard) * 4);
  }
  b.done = true;
}

void DistributedOptimizer::grad_ready(const Param& p) {
  if (!cfg_.overlap_grad_reduce || reduced_ || !in_store(p)) return;
  const int64_t lo = p.flat_offset, hi = p.flat_offset + p.data.numel();
  for (Bucket& b : buckets_) {
    const int64_t a = std::max(lo, b.start), e = std::min(hi, b.start + b.len);
    if (e <= a) continue;
    check(!b.launched && b.ready_elems + (e - a) <= b.param_elems,
          "DistributedOptimizer: the gradient of '" + p.name +
              "' was reported final twice in one step (overlap_grad_reduce needs exactly one forward_backward per "
              "optimizer step; accumulate micro-batches inside one call or switch overlap_grad_reduce off)");
    b.ready_elems += e - a;
    if (b.ready_elems == b.param_elems) {
      launch_grad(b);
      ++stats_.grad_buckets_early;
    }
  }
}

void DistributedOptimizer::check_backward_allowed() const {
  check(!reduced_, "forward_backward: the gradients of this step were already reduced over data parallel "
                   "(reduce_gradients); a further backward pass would add gradients that are never reduced: call "
                   "step() (clip_grad_and_step) or discard_gradients() first");
  check(!(cfg_.overlap_grad_reduce && backward_ran_),
        "forward_backward: a second forward_backward before the optimizer step with overlap_grad_reduce on (the "
        "first call's backward already started its gradient buckets' reductions): overlap_grad_reduce needs exactly "
        "one forward_backward per optimizer step; call clip_grad_and_step in between, accumulate micro-batches "
        "inside one call, or switch overlap_grad_reduce off (refused on every rank before any communication; the "
        "first call's gradients are kept for the step)");
}

void DistributedOptimizer::progress() {
  // One MPI_Test drives OpenMPI's progress engine for every collective in flight; completed
  // ones are dropped in order until the first that is still running.
  const auto t0 = Clock::now();
  bool any = false;
  for (Bucket& b : buckets_) {
    for (auto* w : {&b.grad_work, &b.param_work}) {
      if (!*w) continue;
      any = true;
      if (!(*w)->test()) {
        stats_.progress_s += since(t0);
        return;
      }
      w->reset();  // complete (complete_grad then only moves the shard)
    }
  }
  if (any) stats_.progress_s += since(t0);
}

void DistributedOptimizer::finish_grad_sync() {
  if (reduced_) return;
  const auto t0 = Clock::now();
  for (Bucket& b : buckets_) {
    if (!b.launched) launch_grad(b);
    if (!cfg_.overlap_grad_reduce) complete_grad(b);  // the synchronous path: one bucket at a time
  }
  for (Bucket& b : buckets_) {
    complete_grad(b);
    b.ready_elems = 0;
    b.launched = b.done = false;
  }
  stats_.grad_wait_s += since(t0);
  reduced_ = true;
}

void DistributedOptimizer::discard_gradients() {
  // Collectives already started this step must finish on every rank before the buffer is reused.
  for (Bucket& b : buckets_) {
    if (b.grad_work) b.grad_work->wait();
    b.grad_work.reset();
    b.ready_elems = 0;
    b.launched = b.done = false;
  }
  store_.zero_grad();
  reduced_ = false;
  backward_ran_ = false;
}

// Starts the parameter all-gather of every bucket (ZeRO-1), in the order the forward first reads
// them (lowest offsets first); waits for each at once unless overlap_param_gather.
void DistributedOptimizer::start_param_sync() {
  if (!cfg_.use_distributed_optimizer) return;
  const auto t0 = Clock::now();
  float* params = store_.flat_params().f32();
  for (size_t k = buckets_.size(); k-- > 0;) {
    Bucket& b = buckets_[k];
    auto& g = *regions_[b.region].group;
    const int64_t n = g.size(), shard = b.len / n;
    ++stats_.param_buckets;
    b.param_work = g.iall_gather(params + b.start, shard);
    if (!cfg_.overlap_param_gather) {
      b.param_work->wait();
      b.param_work.reset();
    } else {
      param_pending_ = true;
    }
  }
  stats_.param_wait_s += since(t0);
}

void DistributedOptimizer::param_use(const Param& p) {
  if (!param_pending_ || !in_store(p)) return;
  const auto t0 = Clock::now();
  const int64_t lo = p.flat_offset, hi = p.flat_offset + p.data.numel();
  bool pending = false;
  for (Bucket& b : buckets_) {
    if (!b.param_work) continue;
    if (std::min(hi, b.start + b.len) > std::max(lo, b.start)) {
      b.param_work->wait();
      b.param_work.reset();
      ++stats_.param_buckets_forward;
    } else {
      pending = true;
    }
  }
  param_pending_ = pending;
  stats_.param_wait_s += since(t0);
}

void DistributedOptimizer::finish_param_sync() {
  if (!param_pending_) return;
  const auto t0 = Clock::now();
  for (Bucket& b : buckets_) {
    if (b.param_work) b.param_work->wait();
    b.param_work.reset();
  }
  param_pending_ = false;
  stats_.param_wait_s += since(t0);
}

double DistributedOptimizer::grad_norm() {
  const float* grads = store_.flat_grads().f32();
  double ss[2] = {0, 0};  // dense, expert sums of squares
  for (const auto& seg : segments_)
    if (seg.counts) ss[seg.expert ? 1 : 0] += kernels().norms.sum_squares(grads + seg.start, seg.len);
  // One fp64 all-reduce over the world of both sums, always two doubles: a pipeline stage without
  // expert tensors (a dense model, or Qwen3-MoE's mlp_only_layers / decoder_sparse_step covering
  // the stage) adds 0 to the expert sum and still sends it, so the count never depends on what
  // this stage holds (docs/architecture.md, "Collectives follow the config and the mesh").
  if (ps_->world->size() > 1) ps_->world->all_reduce_f64(ss, 2, dist::ReduceOp::Sum);
  last_dense_sq_ = ss[0];
  last_expert_sq_ = ss[1];
  return std::sqrt(ss[0] + ss[1]);  // sqrt(dense^2 + expert^2)
}

StepStats DistributedOptimizer::step(double lr, double max_norm) {
  if (store_.device() != Device::CPU)
    check(kernels().device == device_name(store_.device()),
          "DistributedOptimizer: the parameters live on device '" + device_name(store_.device()) +
              "' but the optimizer's kernels are '" + kernels().device + "' (call set_kernels with the model's table)");
  const int64_t bytes0 = comm_bytes();
  finish_param_sync();  // the last step's all-gathers, when no forward ran since
  finish_grad_sync();
  StepStats st;
  st.grad_norm = grad_norm();
  st.expert_grad_norm = last_expert_norm();
  st.lr = lr;
  if (!std::isfinite(st.grad_norm)) {
    // Never apply a non-finite update: the norm is a world all-reduce,
    // so every rank takes this branch and no collective below is left half-entered.
    discard_gradients();
    st.skipped = true;
    st.step = step_;
    last_bytes_ = comm_bytes() - bytes0;
    return st;
  }
  const double clip = max_norm >= 0 ? max_norm : cfg_.clip_grad;
  float* grads = store_.flat_grads().f32();
  float* params = store_.flat_params().f32();
  // clip_grad_norm_: the gradients times clip / (norm + 1e-6) when that is below 1. The AdamW kernel
  // applies the coefficient as it reads each gradient (bit-identical to scaling them in place first,
  // one pass over the gradients fewer); the gradients are zeroed right after.
  float grad_scale = 1.0f;
  if (clip > 0) {
    const double coef = clip / (st.grad_norm + 1e-6);
    if (coef < 1.0) {
      st.clip_coef = coef;
      grad_scale = static_cast<float>(coef);
    }
  }
  ++step_;
  for (const auto& seg : segments_) {
    kernels().adamw.step(params + seg.start, grads + seg.start, m_state() + seg.state_off, v_state() + seg.state_off,
                         seg.len, static_cast<float>(lr), static_cast<float>(cfg_.adam_beta1),
                         static_cast<float>(cfg_.adam_beta2), static_cast<float>(cfg_.adam_eps),
                         seg.decay ? static_cast<float>(cfg_.weight_decay) : 0.0f, step_, grad_scale);
  }
  start_param_sync();
  store_.zero_grad();
  reduced_ = false;
  backward_ran_ = false;
  st.step = step_;
  last_bytes_ = comm_bytes() - bytes0;
  return st;
}

void DistributedOptimizer::gather_state(std::vector<float>& m, std::vector<float>& v) {
  finish_param_sync();
  // a device store's state comes to the host first (the gathers below then run on host buffers)
  std::vector<float> hm, hv;
  const float* sm = m_.data();
  const float* sv = v_.data();
  if (dm_.defined()) {
    hm.resize(static_cast<size_t>(state_n_));
    hv.resize(static_cast<size_t>(state_n_));
    download_bytes(store_.device(), hm.data(), dm_.f32(), static_cast<size_t>(state_n_) * 4);
    download_bytes(store_.device(), hv.data(), dv_.f32(), static_cast<size_t>(state_n_) * 4);
    sm = hm.data();
    sv = hv.data();
  }
  const int64_t N = store_.numel();
  m.assign(static_cast<size_t>(N), 0.0f);
  v.assign(static_cast<size_t>(N), 0.0f);
  // Each region's state is contiguous in m_/v_ (the constructor's segments, region by region):
  // sharded, it is this rank's shard [s + r*len/n, len/n) of every bucket in bucket order, which
  // is all-gathered over the region's group (dp-cp, or expert-dp) into the bucket's place.
  int64_t off = 0;
  for (const Region& rg : regions_) {
    auto& g = *rg.group;
    const int64_t n = g.size();
    if (cfg_.use_distributed_optimizer && n > 1) {
      for (auto [s, len] : rg.buckets) {
        const int64_t shard = len / n;
        g.all_gather(sm + off, m.data() + s, shard, DType::F32);
        g.all_gather(sv + off, v.data() + s, shard, DType::F32);
        off += shard;
      }
    } else {
      std::memcpy(m.data() + rg.start, sm + off, static_cast<size_t>(rg.len) * 4);
      std::memcpy(v.data() + rg.start, sv + off, static_cast<size_t>(rg.len) * 4);
      off += rg.len;
    }
  }
}

std::vector<DistributedOptimizer::OwnedRange> DistributedOptimizer::owned_ranges() const {
  std::vector<OwnedRange> out;
  out.reserve(segments_.size());
  for (const auto& seg : segments_) {
    const Region* rg = nullptr;
    for (const Region& r : regions_)
      if (seg.start >= r.start && seg.start < r.start + r.len) rg = &r;
    const bool sharded = rg && cfg_.use_distributed_optimizer && rg->group->size() > 1;
    out.push_back({seg.start, seg.len, seg.state_off, seg.expert, sharded || !rg || rg->group->rank() == 0});
  }
  return out;
}

void DistributedOptimizer::read_state(bool second_moment, int64_t state_off, int64_t n, float* dst) const {
  check(state_off >= 0 && n >= 0 && state_off <= state_n_ - n,
        "DistributedOptimizer::read_state: range [" + std::to_string(state_off) + ", " + std::to_string(state_off + n) +
            ") outside this rank's " + std::to_string(state_n_) + " state elements");
  if (n == 0) return;
  if (dm_.defined()) {
    const Tensor& t = second_moment ? dv_ : dm_;
    download_bytes(store_.device(), dst, t.f32() + state_off, static_cast<size_t>(n) * 4);
  } else {
    std::memcpy(dst, (second_moment ? v_ : m_).data() + state_off, static_cast<size_t>(n) * 4);
  }
}

void DistributedOptimizer::load_state(const float* m, const float* v, int64_t steps) {
  check(steps >= 0, "DistributedOptimizer::load_state: negative step count " + std::to_string(steps));
  finish_param_sync();
  std::vector<float> hm, hv;  // a device store's state is assembled on the host, then uploaded
  float* tm = m_.data();
  float* tv = v_.data();
  if (dm_.defined()) {
    hm.assign(static_cast<size_t>(state_n_), 0.0f);
    hv.assign(static_cast<size_t>(state_n_), 0.0f);
    tm = hm.data();
    tv = hv.data();
  }
  for (const auto& seg : segments_) {
    std::memcpy(tm + seg.state_off, m + seg.start, static_cast<size_t>(seg.len) * 4);
    std::memcpy(tv + seg.state_off, v + seg.start, static_cast<size_t>(seg.len) * 4);
  }
  if (dm_.defined() && state_n_ > 0) {
    upload_bytes(store_.device(), dm_.f32(), hm.data(), static_cast<size_t>(state_n_) * 4);
    upload_bytes(store_.device(), dv_.f32(), hv.data(), static_cast<size_t>(state_n_) * 4);
  }
  step_ = steps;
  store_.zero_grad();
  reduced_ = false;
  backward_ran_ = false;
}

int64_t DistributedOptimizer::comm_bytes() const {
  int64_t b = ps_->world->bytes_sent();
  for (const Region& rg : regions_) b += rg.group->bytes_sent();
  return b;
}

}  // namespace twinkle
