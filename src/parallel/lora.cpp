#include "twinkle/parallel/lora.h"

#include <vector>

#include "twinkle/kernels/cpu/gemm.h"

namespace twinkle::parallel {

namespace k = kernels::cpu;

namespace {
// Grow-only [T, r] scratch reused across calls (one per thread; layers run one at a time).
float* scratch(int which, int64_t n) {
  static thread_local std::vector<float> buf[2];
  auto& b = buf[which];
  if (b.size() < static_cast<size_t>(n)) b.resize(static_cast<size_t>(n));
  return b.data();
}
}  // namespace

LoraPair add_lora_entries(TensorTable& table, const TensorParallel& tp, const std::string& module, int64_t in,
                          int64_t out, LoraBase base, int64_t r, float scaling) {
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
  p.a = table.add(std::move(a));
  p.b = table.add(std::move(b));
  return p;
}

void lora_column_forward(const TensorTable& t, const LoraPair& p, const float* x, float* y, int64_t T, int64_t in,
                         int64_t out_l) {
  float* h = scratch(0, T * p.r);
  k::linear_forward(x, t.data(p.a), h, T, p.r, in);                                 // h = x A^T
  k::sgemm(false, true, T, out_l, p.r, p.scaling, h, p.r, t.data(p.b), p.r, 1.0f, y, out_l);  // y += s h B^T
}

void lora_column_backward(const TensorTable& t, const LoraPair& p, const float* x, const float* dy, float* dx,
                          int64_t T, int64_t in, int64_t out_l) {
  float* h = scratch(0, T * p.r);
  float* dh = scratch(1, T * p.r);
  const float* A = t.data(p.a);
  const float* B = t.data(p.b);
  k::linear_forward(x, A, h, T, p.r, in);
  if (float* dB = t.grad(p.b)) k::sgemm(true, false, out_l, p.r, T, p.scaling, dy, out_l, h, p.r, 1.0f, dB, p.r);
  k::sgemm(false, false, T, p.r, out_l, p.scaling, dy, out_l, B, p.r, 0.0f, dh, p.r);  // dh = s dy B
  if (float* dA = t.grad(p.a)) k::sgemm(true, false, p.r, in, T, 1.0f, dh, p.r, x, in, 1.0f, dA, in);
  k::sgemm(false, false, T, in, p.r, 1.0f, dh, p.r, A, in, 1.0f, dx, in);  // dx += dh A
}

void lora_row_forward(const TensorTable& t, const LoraPair& p, const float* x, float* y_partial, int64_t T,
                      int64_t in_l, int64_t out) {
  float* h = scratch(0, T * p.r);
  k::linear_forward(x, t.data(p.a), h, T, p.r, in_l);  // x_s A_s^T: tp-partial
  k::sgemm(false, true, T, out, p.r, p.scaling, h, p.r, t.data(p.b), p.r, 1.0f, y_partial, out);
}

void lora_row_backward(const TensorTable& t, const LoraPair& p, const float* x, const float* dy, float* dx, int64_t T,
                       int64_t in_l, int64_t out) {
  float* h = scratch(0, T * p.r);
  float* dh = scratch(1, T * p.r);
  const float* A = t.data(p.a);
  const float* B = t.data(p.b);
  k::linear_forward(x, A, h, T, p.r, in_l);
  if (float* dB = t.grad(p.b)) k::sgemm(true, false, out, p.r, T, p.scaling, dy, out, h, p.r, 1.0f, dB, p.r);
  k::sgemm(false, false, T, p.r, out, p.scaling, dy, out, B, p.r, 0.0f, dh, p.r);  // exact (dy full rows)
  if (float* dA = t.grad(p.a)) k::sgemm(true, false, p.r, in_l, T, 1.0f, dh, p.r, x, in_l, 1.0f, dA, in_l);
  k::sgemm(false, false, T, in_l, p.r, 1.0f, dh, p.r, A, in_l, 1.0f, dx, in_l);
}

}  // namespace twinkle::parallel
