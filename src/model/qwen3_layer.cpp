// Qwen3 decoder layer: explicit forward and backward (HF Qwen3DecoderLayer semantics).
//
// Activations saved per micro-batch slot for backward (workspace keys "l<i>.<name>"):
//   ln1      input_layernorm output      [Tl, H]   rstd1 [Tl]
//   ln1f     ln1 all-gathered under SP   [T, H]    (alias of ln1 otherwise)
//   qp, kp   q/k projections before q_norm/k_norm  [T, hq*D], [T, hkv*D]
//   q, k     after q_norm/k_norm and RoPE          rstdq [T*hq], rstdk [T*hkv]
//   v        value projection            [T, hkv*D]
//   attn     attention output            [T, hq*D]  lse [T, hq]
//   h        residual after attention    [Tl, H]
//   ln2, ln2f, rstd2                     (as ln1)
//   g, u     gate / up projections       [T, I/tp]
//   a        silu(g) * u                 [T, I/tp]
// The layer input x is the previous layer's output (kept by the caller).
#include <cstring>
#include <vector>

#include "twinkle/kernels/cpu/attention.h"
#include "twinkle/kernels/cpu/gemm.h"
#include "twinkle/kernels/cpu/reduce.h"
#include "twinkle/kernels/cpu/rmsnorm.h"
#include "twinkle/kernels/cpu/rope.h"
#include "twinkle/kernels/cpu/swiglu.h"
#include "twinkle/model/qwen3_model.h"
#include "twinkle/parallel/tp_comm.h"

namespace twinkle {

namespace k = kernels::cpu;

namespace {
void add_bias_rows(float* y, const float* b, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * cols;
    for (int64_t c = 0; c < cols; ++c) yr[c] += b[c];
  }
}
// db[c] += sum_r dy[r, c], accumulated in double (bias gradients are sums of many terms that
// largely cancel, e.g. k_proj.bias under q/k norms).
void bias_grad(const float* dy, float* db, int64_t rows, int64_t cols) {
  std::vector<double> acc(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* d = dy + r * cols;
    for (int64_t c = 0; c < cols; ++c) acc[static_cast<size_t>(c)] += d[c];
  }
  for (int64_t c = 0; c < cols; ++c) db[c] += static_cast<float>(acc[static_cast<size_t>(c)]);
}
// Workspace key "<prefix><name>" (built with append: GCC 12 warns falsely on operator+ here).
std::string key(const std::string& prefix, const char* name) {
  std::string s;
  s.reserve(prefix.size() + 16);
  s.append(prefix);
  s.append(name);
  return s;
}
void add3(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
}  // namespace

const float* Qwen3Model::sp_all_gather(Workspace& ws, const std::string& full_key, const float* local, int64_t T,
                                       int64_t Tl) {
  if (!sp_) return local;
  float* full = ws.get(full_key, {T, H_}).f32();
  parallel::all_gather_rows(*ps_->tp, local, full, Tl, H_);
  return full;
}

float* Qwen3Model::tp_reduce_rows(float* full, const char* local_key, int64_t T, int64_t Tl) {
  if (!sp_) {
    parallel::all_reduce_sum(*ps_->tp, full, T * H_);
    return full;
  }
  float* local = scratch_.get(local_key, {Tl, H_}).f32();
  parallel::reduce_scatter_rows(*ps_->tp, full, local, Tl, H_);
  return local;
}

void Qwen3Model::layer_forward(int slot, int64_t li, const StageBatch& b, const float* x, float* y) {
  Workspace& ws = slot_ws(slot);
  const LayerParams& lp = layers_[static_cast<size_t>(li)];
  const std::string p = "l" + std::to_string(li) + ".";
  const int64_t T = b.T, Tl = hidden_rows(b), H = H_, D = D_;
  const int64_t nq = hq_ * D, nkv = hkv_ * D;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const int64_t nseg = static_cast<int64_t>(b.cu_seqlens.size()) - 1;

  // --- attention block ---
  float* ln1 = ws.get(key(p, "ln1"), {Tl, H}).f32();
  float* rstd1 = ws.get(key(p, "rstd1"), {Tl}).f32();
  k::rmsnorm_forward(x, P(lp.ln1), ln1, rstd1, Tl, H, eps);
  const float* ln1f = sp_all_gather(ws, key(p, "ln1f"), ln1, T, Tl);
  float* qp = ws.get(key(p, "qp"), {T, nq}).f32();
  float* kp = ws.get(key(p, "kp"), {T, nkv}).f32();
  float* v = ws.get(key(p, "v"), {T, nkv}).f32();
  k::linear_forward(ln1f, P(lp.q), qp, T, nq, H);
  k::linear_forward(ln1f, P(lp.k), kp, T, nkv, H);
  k::linear_forward(ln1f, P(lp.v), v, T, nkv, H);
  if (lp.qb != SIZE_MAX) {
    add_bias_rows(qp, P(lp.qb), T, nq);
    add_bias_rows(kp, P(lp.kb), T, nkv);
    add_bias_rows(v, P(lp.vb), T, nkv);
  }
  float* q = ws.get(key(p, "q"), {T, nq}).f32();
  float* kk = ws.get(key(p, "k"), {T, nkv}).f32();
  float* rstdq = ws.get(key(p, "rstdq"), {T * hq_}).f32();
  float* rstdk = ws.get(key(p, "rstdk"), {T * hkv_}).f32();
  k::rmsnorm_forward(qp, P(lp.qn), q, rstdq, T * hq_, D, eps);
  k::rmsnorm_forward(kp, P(lp.kn), kk, rstdk, T * hkv_, D, eps);
  k::rope_forward(q, b.positions.data(), rope_, T, hq_, D);
  k::rope_forward(kk, b.positions.data(), rope_, T, hkv_, D);
  float* attn = ws.get(key(p, "attn"), {T, nq}).f32();
  float* lse = ws.get(key(p, "lse"), {T, hq_}).f32();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  k::flash_attention_forward(q, kk, v, attn, lse, b.cu_seqlens.data(), nseg, hq_, hkv_, D, scale,
                             cfg_.attention_window(layer0_ + li));
  // o_proj (row-parallel): partial sums, reduced over tp, bias added once after the reduction
  float* ofull = scratch_.get("ofull", {T, H}).f32();
  k::linear_forward(attn, P(lp.o), ofull, T, H, nq);
  float* h = ws.get(key(p, "h"), {Tl, H}).f32();
  add3(h, x, tp_reduce_rows(ofull, "olocal", T, Tl), Tl * H);
  if (lp.ob != SIZE_MAX) add_bias_rows(h, P(lp.ob), Tl, H);

  // --- MLP block ---
  float* ln2 = ws.get(key(p, "ln2"), {Tl, H}).f32();
  float* rstd2 = ws.get(key(p, "rstd2"), {Tl}).f32();
  k::rmsnorm_forward(h, P(lp.ln2), ln2, rstd2, Tl, H, eps);
  const float* ln2f = sp_all_gather(ws, key(p, "ln2f"), ln2, T, Tl);
  float* g = ws.get(key(p, "g"), {T, I_}).f32();
  float* u = ws.get(key(p, "u"), {T, I_}).f32();
  float* a = ws.get(key(p, "a"), {T, I_}).f32();
  k::linear_forward(ln2f, P(lp.gate), g, T, I_, H);
  k::linear_forward(ln2f, P(lp.up), u, T, I_, H);
  k::swiglu_forward(g, u, a, T * I_);
  float* dfull = scratch_.get("ofull", {T, H}).f32();
  k::linear_forward(a, P(lp.down), dfull, T, H, I_);
  add3(y, h, tp_reduce_rows(dfull, "olocal", T, Tl), Tl * H);
}

void Qwen3Model::layer_backward(int slot, int64_t li, const StageBatch& b, const float* x, const float* dy,
                                float* dx) {
  Workspace& ws = slot_ws(slot);
  const LayerParams& lp = layers_[static_cast<size_t>(li)];
  const std::string p = "l" + std::to_string(li) + ".";
  const int64_t T = b.T, Tl = hidden_rows(b), H = H_, D = D_;
  const int64_t nq = hq_ * D, nkv = hkv_ * D;
  const int64_t nseg = static_cast<int64_t>(b.cu_seqlens.size()) - 1;
  auto get = [&](const char* n, const Shape& s) { return ws.get(key(p, n), s).f32(); };
  const float* ln1f = sp_ ? get("ln1f", {T, H}) : get("ln1", {Tl, H});  // saved by layer_forward
  const float* ln2f = sp_ ? get("ln2f", {T, H}) : get("ln2", {Tl, H});
  const float* h = get("h", {Tl, H});

  // --- MLP block ---
  const float* dyf = sp_all_gather(scratch_, "gfull", dy, T, Tl);
  float* da = scratch_.get("da", {T, I_}).f32();
  k::linear_backward(get("a", {T, I_}), P(lp.down), dyf, da, G(lp.down), T, H, I_);
  float* dg = scratch_.get("dg", {T, I_}).f32();
  float* du = scratch_.get("du", {T, I_}).f32();
  k::swiglu_backward(get("g", {T, I_}), get("u", {T, I_}), da, dg, du, T * I_);
  float* dln2f = scratch_.get("dlnf", {T, H}).f32();
  k::linear_backward(ln2f, P(lp.gate), dg, dln2f, G(lp.gate), T, I_, H);
  k::linear_backward(ln2f, P(lp.up), du, dln2f, G(lp.up), T, I_, H, /*accumulate_dx=*/true);
  const float* dln2 = tp_reduce_rows(dln2f, "dln", T, Tl);
  float* dh = scratch_.get("dh", {Tl, H}).f32();
  k::rmsnorm_backward(h, P(lp.ln2), get("rstd2", {Tl}), dln2, dh, G(lp.ln2), Tl, H);
  k::add_inplace(dh, dy, Tl * H);

  // --- attention block ---
  if (lp.ob != SIZE_MAX) bias_grad(dh, G(lp.ob), Tl, H);
  const float* dhf = sp_all_gather(scratch_, "gfull", dh, T, Tl);
  float* dattn = scratch_.get("dattn", {T, nq}).f32();
  k::linear_backward(get("attn", {T, nq}), P(lp.o), dhf, dattn, G(lp.o), T, H, nq);
  float* dq = scratch_.get("dq", {T, nq}).f32();
  float* dk = scratch_.get("dk", {T, nkv}).f32();
  float* dv = scratch_.get("dv", {T, nkv}).f32();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  k::flash_attention_backward(get("q", {T, nq}), get("k", {T, nkv}), get("v", {T, nkv}), get("attn", {T, nq}),
                              get("lse", {T, hq_}), dattn, dq, dk, dv, b.cu_seqlens.data(), nseg, hq_, hkv_, D, scale,
                              cfg_.attention_window(layer0_ + li));
  k::rope_backward(dq, b.positions.data(), rope_, T, hq_, D);
  k::rope_backward(dk, b.positions.data(), rope_, T, hkv_, D);
  k::rmsnorm_backward(get("qp", {T, nq}), P(lp.qn), get("rstdq", {T * hq_}), dq, dq, G(lp.qn), T * hq_, D);
  k::rmsnorm_backward(get("kp", {T, nkv}), P(lp.kn), get("rstdk", {T * hkv_}), dk, dk, G(lp.kn), T * hkv_, D);
  if (lp.qb != SIZE_MAX) {
    bias_grad(dq, G(lp.qb), T, nq);
    bias_grad(dk, G(lp.kb), T, nkv);
    bias_grad(dv, G(lp.vb), T, nkv);
  }
  float* dln1f = scratch_.get("dlnf", {T, H}).f32();
  k::linear_backward(ln1f, P(lp.q), dq, dln1f, G(lp.q), T, nq, H);
  k::linear_backward(ln1f, P(lp.k), dk, dln1f, G(lp.k), T, nkv, H, true);
  k::linear_backward(ln1f, P(lp.v), dv, dln1f, G(lp.v), T, nkv, H, true);
  const float* dln1 = tp_reduce_rows(dln1f, "dln", T, Tl);
  k::rmsnorm_backward(x, P(lp.ln1), get("rstd1", {Tl}), dln1, dx, G(lp.ln1), Tl, H);
  k::add_inplace(dx, dh, Tl * H);
}

}  // namespace twinkle
