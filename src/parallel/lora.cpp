#include "twinkle/parallel/lora.h"

#include <cstdio>
#include <vector>

#include "twinkle/core/error.h"

#include "twinkle/kernels/cpu/gemm.h"
#include "twinkle/parallel/lora_dropout.h"

namespace twinkle::parallel {

namespace k = kernels::cpu;

namespace {
// Grow-only [T, r] scratch reused across calls (one per thread; layers run one at a time).
float* scratch(int which, int64_t n) {
  static thread_local std::vector<float> buf[3];
  auto& b = buf[which];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}
std::vector<uint8_t>& mask_buf() {
  static thread_local std::vector<uint8_t> m;
  return m;
}

// The LoRA input under the current dropout: x itself (no dropout) or x * mask / (1 - p) in
// scratch 2, the mask left in mask_buf() for the backward's d(x). Writes the mask file of the
// test hook (lora_dropout.h) in forward.
const float* lora_input(const TensorTable& t, const LoraPair& p, const float* x, int64_t T, int64_t in_l,
                        bool forward) {
  const LoraDropout* d = current_lora_dropout();
  if (d == nullptr || d->p <= 0.0f) return x;
  check(d->T == T, "LoRA dropout: the call has " + std::to_string(T) + " tokens but its dropout context " +
                       std::to_string(d->T));
  auto& m = mask_buf();
  if (m.size() < static_cast<size_t>(T * in_l)) m.resize(static_cast<size_t>(T * in_l));
  lora_dropout_mask(*d, p.key, p.feature0, in_l, m.data());
  float* xd = scratch(2, T * in_l);
  const float s = 1.0f / (1.0f - d->p);
  const uint8_t* mk = m.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < T * in_l; ++i) xd[i] = mk[i] ? x[i] * s : 0.0f;
  if (forward && !d->dump_dir.empty()) {
    std::string module = t[p.a].name;
    module = module.substr(0, module.size() - std::string(".lora_A.weight").size());
    const std::string path = d->dump_dir + "/" + d->dump_tag + "." + module + ".mask";
    std::FILE* f = std::fopen(path.c_str(), "wb");
    check(f != nullptr, "LoRA dropout test hook: cannot write " + path);
    const size_t n = static_cast<size_t>(T * in_l);
    const bool ok = std::fwrite(mk, 1, n, f) == n;
    check(std::fclose(f) == 0 && ok, "LoRA dropout test hook: writing " + path + " failed");
  }
  return xd;
}

// dx [T, in_l] += (dh A) masked and scaled like the forward's input (dropout's backward), or
// dh A without dropout.
void lora_dx(const LoraPair& p, const float* dh, const float* A, float* dx, int64_t T, int64_t in_l) {
  const LoraDropout* d = current_lora_dropout();
  if (d == nullptr || d->p <= 0.0f) {
    k::sgemm(false, false, T, in_l, p.r, 1.0f, dh, p.r, A, in_l, 1.0f, dx, in_l);
    return;
  }
  float* g = scratch(2, T * in_l);  // the dropped-out input is no longer needed
  k::sgemm(false, false, T, in_l, p.r, 1.0f, dh, p.r, A, in_l, 0.0f, g, in_l);
  const float s = 1.0f / (1.0f - d->p);
  const uint8_t* mk = mask_buf().data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < T * in_l; ++i)
    if (mk[i]) dx[i] += g[i] * s;
}
}  // namespace

LoraPair add_lora_entries(TensorTable& table, const TensorParallel& tp, const std::string& module, int64_t in,
                          int64_t out, LoraBase base, int64_t r, float scaling) {
  if (base == LoraBase::Replicated) {
    TensorEntry a = replicated_entry(module + ".lora_A.weight", {r, in}, ParamInit::Zeros);
    TensorEntry b = replicated_entry(module + ".lora_B.weight", {out, r}, ParamInit::Zeros);
    for (TensorEntry* e : {&a, &b}) {
      e->tp_duplicate = true;
      e->tp_grad_allreduce = tp.size > 1;  // each tp rank's gradient covers its own SP tokens
      e->adapter = true;
      e->load_names = {"base_model.model." + e->name, e->name};
    }
    LoraPair p;
    p.r = r;
    p.scaling = scaling;
    p.key = lora_module_key(module);
    p.a = table.add(std::move(a));
    p.b = table.add(std::move(b));
    return p;
  }
  TensorEntry a = base == LoraBase::Column ? replicated_entry(module + ".lora_A.weight", {r, in}, ParamInit::Zeros)
                                           : split_entry(module + ".lora_A.weight", {r, in}, 1, tp.rank, tp.size,
                                                         ParamInit::Zeros);
  TensorEntry b = base == LoraBase::Column ? split_entry(module + ".lora_B.weight", {out, r}, 0, tp.rank, tp.size,
                                                         ParamInit::Zeros)
                                           : replicated_entry(module + ".lora_B.weight", {out, r}, ParamInit::Zeros);
  TensorEntry& rep = base == LoraBase::Column ? a : b;
  rep.tp_duplicate = true;
  rep.tp_grad_allreduce = tp.size > 1;  // its gradient is a tp-partial sum (with or without SP)
  a.adapter = b.adapter = true;
  for (TensorEntry* e : {&a, &b}) e->load_names = {"base_model.model." + e->name, e->name};  // PEFT's key first
  LoraPair p;
  p.r = r;
  p.scaling = scaling;
  p.key = lora_module_key(module);
  p.feature0 = base == LoraBase::Row ? tp.rank * (in / tp.size) : 0;
  p.a = table.add(std::move(a));
  p.b = table.add(std::move(b));
  return p;
}

std::vector<LoraPair> add_expert_lora_entries(TensorTable& table, const std::vector<std::string>& modules, int64_t in,
                                              int64_t out, int64_t experts_per_rank, int64_t r, float scaling) {
  check(experts_per_rank > 0, "add_expert_lora_entries: experts_per_rank must be > 0");
  std::vector<LoraPair> pairs(modules.size());
  for (int which = 0; which < 2; ++which)
    for (size_t e = 0; e < modules.size(); ++e) {
      if (modules[e].empty()) continue;  // not a target: no pair
      TensorEntry t = which == 0 ? replicated_entry(modules[e] + ".lora_A.weight", {r, in}, ParamInit::Zeros)
                                 : replicated_entry(modules[e] + ".lora_B.weight", {out, r}, ParamInit::Zeros);
      t.adapter = true;
      t.expert = true;  // reduced over expert-dp (which folds tp and dp for etp = 1), counted once there
      t.ep_owner = static_cast<int>(static_cast<int64_t>(e) / experts_per_rank);
      t.load_names = {"base_model.model." + t.name, t.name};
      (which == 0 ? pairs[e].a : pairs[e].b) = table.add(std::move(t));
      pairs[e].r = r;
      pairs[e].scaling = scaling;
      pairs[e].key = lora_module_key(modules[e]);
    }
  return pairs;
}

void lora_column_forward(const TensorTable& t, const LoraPair& p, const float* x, float* y, int64_t T, int64_t in,
                         int64_t out_l) {
  float* h = scratch(0, T * p.r);
  x = lora_input(t, p, x, T, in, true);                                             // dropout(x)
  k::linear_forward(x, t.data(p.a), h, T, p.r, in);                                 // h = x A^T
  k::sgemm(false, true, T, out_l, p.r, p.scaling, h, p.r, t.data(p.b), p.r, 1.0f, y, out_l);  // y += s h B^T
}

void lora_column_backward(const TensorTable& t, const LoraPair& p, const float* x, const float* dy, float* dx,
                          int64_t T, int64_t in, int64_t out_l) {
  float* h = scratch(0, T * p.r);
  float* dh = scratch(1, T * p.r);
  const float* A = t.data(p.a);
  const float* B = t.data(p.b);
  const float* xd = lora_input(t, p, x, T, in, false);
  k::linear_forward(xd, A, h, T, p.r, in);
  if (float* dB = t.grad(p.b)) k::sgemm(true, false, out_l, p.r, T, p.scaling, dy, out_l, h, p.r, 1.0f, dB, p.r);
  k::sgemm(false, false, T, p.r, out_l, p.scaling, dy, out_l, B, p.r, 0.0f, dh, p.r);  // dh = s dy B
  if (float* dA = t.grad(p.a)) k::sgemm(true, false, p.r, in, T, 1.0f, dh, p.r, xd, in, 1.0f, dA, in);
  lora_dx(p, dh, A, dx, T, in);  // dx += dropout'(dh A)
}

void lora_row_forward(const TensorTable& t, const LoraPair& p, const float* x, float* y_partial, int64_t T,
                      int64_t in_l, int64_t out) {
  float* h = scratch(0, T * p.r);
  x = lora_input(t, p, x, T, in_l, true);
  k::linear_forward(x, t.data(p.a), h, T, p.r, in_l);  // x_s A_s^T: tp-partial
  k::sgemm(false, true, T, out, p.r, p.scaling, h, p.r, t.data(p.b), p.r, 1.0f, y_partial, out);
}

void lora_row_backward(const TensorTable& t, const LoraPair& p, const float* x, const float* dy, float* dx, int64_t T,
                       int64_t in_l, int64_t out) {
  float* h = scratch(0, T * p.r);
  float* dh = scratch(1, T * p.r);
  const float* A = t.data(p.a);
  const float* B = t.data(p.b);
  const float* xd = lora_input(t, p, x, T, in_l, false);
  k::linear_forward(xd, A, h, T, p.r, in_l);
  if (float* dB = t.grad(p.b)) k::sgemm(true, false, out, p.r, T, p.scaling, dy, out, h, p.r, 1.0f, dB, p.r);
  k::sgemm(false, false, T, p.r, out, p.scaling, dy, out, B, p.r, 0.0f, dh, p.r);  // exact (dy full rows)
  if (float* dA = t.grad(p.a)) k::sgemm(true, false, p.r, in_l, T, 1.0f, dh, p.r, xd, in_l, 1.0f, dA, in_l);
  lora_dx(p, dh, A, dx, T, in_l);
}

}  // namespace twinkle::parallel
