// Test helper: a host-pointer KernelTable over a device KernelTable (device staging). Every wrapper copies
// its pointer arguments to device buffers from device_allocator(Device::CUDA), calls the device op, and
// copies the non-const (output / in-out) buffers back — so the CPU conformance runners
// (tests/unit/kernels/kernel_conformance.cpp) run unchanged against the CUDA implementations. Equal
// host pointers within one call share one device buffer, so the aliasing cases of the table (dx over
// dy, h over x) alias on the device too. Host-side arguments of the cuda contract (grouped_linear's
// counts, the RopeTable, the MoE ops' host statistics) are passed through. Header-only, test code.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "twinkle/core/device_allocator.h"
#include "twinkle/kernels/registry.h"

namespace staged {

using namespace twinkle;
using namespace twinkle::kernels;

inline KernelTable g_dev;  // the device table under test

class Stager {
 public:
  ~Stager() {
    for (auto& [h, b] : bufs_) device_allocator(Device::CUDA).free(b.dev);
  }
  template <typename T> T* in(const T* host, int64_t n) { return static_cast<T*>(get(host, n * sizeof(T), false)); }
  template <typename T> T* out(T* host, int64_t n) { return static_cast<T*>(get(host, n * sizeof(T), true)); }
  /// Copies every output buffer back to its host memory (synchronous).
  void finish() {
    for (auto& [h, b] : bufs_)
      if (b.out && b.bytes) device_allocator(Device::CUDA).copy(const_cast<void*>(h), b.dev, b.bytes, CopyKind::DeviceToHost);
  }

 private:
  struct Buf {
    void* dev;
    size_t bytes;
    bool out;
  };
  std::map<const void*, Buf> bufs_;
  void* get(const void* host, size_t bytes, bool out) {
    if (!host) return nullptr;
    auto it = bufs_.find(host);
    if (it != bufs_.end()) {
      if (bytes > it->second.bytes) throw Error("Stager: one host pointer staged with two sizes");
      it->second.out |= out;
      return it->second.dev;
    }
    DeviceAllocator& a = device_allocator(Device::CUDA);
    void* d = a.alloc(bytes);
    if (bytes) a.copy(d, host, bytes, CopyKind::HostToDevice);
    bufs_.emplace(host, Buf{d, bytes, out});
    return d;
  }
};

// ---------------------------------------------------------------- one wrapper per op function

inline void emb_fwd(const float* table, const int32_t* ids, float* out, int64_t T, int64_t H, int64_t vs, int64_t Vl) {
  Stager s;
  g_dev.embedding.forward(s.in(table, Vl * H), s.in(ids, T), s.out(out, T * H), T, H, vs, Vl);
  s.finish();
}
inline void emb_bwd(const float* dout, const int32_t* ids, float* dt, int64_t T, int64_t H, int64_t vs, int64_t Vl) {
  Stager s;
  g_dev.embedding.backward(s.in(dout, T * H), s.in(ids, T), s.out(dt, Vl * H), T, H, vs, Vl);
  s.finish();
}
inline void rms_fwd(const float* x, const float* w, float* y, float* rstd, int64_t rows, int64_t dim, float eps) {
  Stager s;
  g_dev.rms_norm.forward(s.in(x, rows * dim), s.in(w, dim), s.out(y, rows * dim), s.out(rstd, rows), rows, dim, eps);
  s.finish();
}
inline void rms_bwd(const float* x, const float* w, const float* rstd, const float* dy, float* dx, float* dw,
                    int64_t rows, int64_t dim) {
  Stager s;
  g_dev.rms_norm.backward(s.in(x, rows * dim), s.in(w, dim), s.in(rstd, rows), s.in(dy, rows * dim),
                          s.out(dx, rows * dim), s.out(dw, dim), rows, dim);
  s.finish();
}
inline void add_rms_fwd(const float* x, const float* r, float* h, const float* w, float* y, float* rstd, int64_t rows,
                        int64_t dim, float eps) {
  Stager s;
  const int64_t n = rows * dim;
  g_dev.add_rms_norm.forward(s.in(x, n), s.in(r, n), s.out(h, n), s.in(w, dim), s.out(y, n), s.out(rstd, rows), rows,
                             dim, eps);
  s.finish();
}
inline void add_rms_bwd(const float* h, const float* w, const float* rstd, const float* dy, const float* dres, float* dh,
                        float* dw, int64_t rows, int64_t dim) {
  Stager s;
  const int64_t n = rows * dim;
  g_dev.add_rms_norm.backward(s.in(h, n), s.in(w, dim), s.in(rstd, rows), s.in(dy, n), s.in(dres, n), s.out(dh, n),
                              s.out(dw, dim), rows, dim);
  s.finish();
}
inline void qkr_fwd(const float* x, const float* w, float* y, float* rstd, const int32_t* pos, const RopeTable& t,
                    int64_t tokens, int64_t heads, int64_t D, float eps) {
  Stager s;
  const int64_t n = tokens * heads * D;
  g_dev.qk_norm_rope.forward(s.in(x, n), s.in(w, D), s.out(y, n), s.out(rstd, tokens * heads), s.in(pos, tokens), t,
                             tokens, heads, D, eps);
  s.finish();
}
inline void qkr_bwd(const float* x, const float* w, const float* rstd, const int32_t* pos, const RopeTable& t,
                    const float* dy, float* dx, float* dw, int64_t tokens, int64_t heads, int64_t D) {
  Stager s;
  const int64_t n = tokens * heads * D;
  g_dev.qk_norm_rope.backward(s.in(x, n), s.in(w, D), s.in(rstd, tokens * heads), s.in(pos, tokens), t, s.in(dy, n),
                              s.out(dx, n), s.out(dw, D), tokens, heads, D);
  s.finish();
}
inline void rope_fwd(float* x, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads, int64_t D) {
  Stager s;
  g_dev.rope.forward(s.out(x, tokens * heads * D), s.in(pos, tokens), t, tokens, heads, D);
  s.finish();
}
inline void rope_bwd(float* x, const int32_t* pos, const RopeTable& t, int64_t tokens, int64_t heads, int64_t D) {
  Stager s;
  g_dev.rope.backward(s.out(x, tokens * heads * D), s.in(pos, tokens), t, tokens, heads, D);
  s.finish();
}
inline void swi_fwd(const float* g, const float* u, float* h, int64_t n) {
  Stager s;
  g_dev.swiglu.forward(s.in(g, n), s.in(u, n), s.out(h, n), n);
  s.finish();
}
inline void swi_bwd(const float* g, const float* u, const float* dh, float* dg, float* du, int64_t n) {
  Stager s;
  g_dev.swiglu.backward(s.in(g, n), s.in(u, n), s.in(dh, n), s.out(dg, n), s.out(du, n), n);
  s.finish();
}
inline void gus_fwd(const float* X, const float* W, float* gu, float* a, int64_t T, int64_t I, int64_t H) {
  Stager s;
  g_dev.gate_up_swiglu.forward(s.in(X, T * H), s.in(W, 2 * I * H), s.out(gu, T * 2 * I), s.out(a, T * I), T, I, H);
  s.finish();
}
inline void gus_bwd(const float* X, const float* W, const float* gu, const float* da, float* dgu, float* dX, float* dW,
                    int64_t T, int64_t I, int64_t H, bool acc) {
  Stager s;
  g_dev.gate_up_swiglu.backward(s.in(X, T * H), s.in(W, 2 * I * H), s.in(gu, T * 2 * I), s.in(da, T * I),
                                s.out(dgu, T * 2 * I), s.out(dX, T * H), s.out(dW, 2 * I * H), T, I, H, acc);
  s.finish();
}
inline int64_t tokens_of(const int32_t* cu, int64_t n_seqs) { return cu[n_seqs]; }
inline void attn_fwd(const float* q, const float* k, const float* v, float* out, float* lse, const int32_t* cu,
                     int64_t ns, int64_t Hq, int64_t Hkv, int64_t D, float scale, int64_t window) {
  Stager s;
  const int64_t T = tokens_of(cu, ns);
  g_dev.attention.forward(s.in(q, T * Hq * D), s.in(k, T * Hkv * D), s.in(v, T * Hkv * D), s.out(out, T * Hq * D),
                          s.out(lse, T * Hq), s.in(cu, ns + 1), ns, Hq, Hkv, D, scale, window);
  s.finish();
}
inline void attn_bwd(const float* q, const float* k, const float* v, const float* out, const float* lse,
                     const float* dout, float* dq, float* dk, float* dv, const int32_t* cu, int64_t ns, int64_t Hq,
                     int64_t Hkv, int64_t D, float scale, int64_t window) {
  Stager s;
  const int64_t T = tokens_of(cu, ns);
  g_dev.attention.backward(s.in(q, T * Hq * D), s.in(k, T * Hkv * D), s.in(v, T * Hkv * D), s.in(out, T * Hq * D),
                           s.in(lse, T * Hq), s.in(dout, T * Hq * D), s.out(dq, T * Hq * D), s.out(dk, T * Hkv * D),
                           s.out(dv, T * Hkv * D), s.in(cu, ns + 1), ns, Hq, Hkv, D, scale, window);
  s.finish();
}
inline void lin_fwd(const float* X, const float* W, float* Y, int64_t M, int64_t N, int64_t K, bool acc) {
  Stager s;
  g_dev.linear.forward(s.in(X, M * K), s.in(W, N * K), s.out(Y, M * N), M, N, K, acc);
  s.finish();
}
inline void lin_bwd(const float* X, const float* W, const float* dY, float* dX, float* dW, int64_t M, int64_t N,
                    int64_t K, bool acc) {
  Stager s;
  g_dev.linear.backward(s.in(X, M * K), s.in(W, N * K), s.in(dY, M * N), s.out(dX, M * K), s.out(dW, N * K), M, N, K,
                        acc);
  s.finish();
}
inline int64_t rows_of(const int64_t* counts, int64_t E) {
  int64_t r = 0;
  for (int64_t e = 0; e < E; ++e) r += std::max<int64_t>(counts[e], 0);
  return r;
}
inline int64_t wsize(int64_t E, int64_t ws, int64_t N, int64_t K) { return E > 0 ? (E - 1) * ws + N * K : 0; }
inline void glin_fwd(const float* X, const float* W, int64_t ws, const int64_t* counts, int64_t E, float* Y, int64_t N,
                     int64_t K, bool acc) {
  Stager s;
  const int64_t R = rows_of(counts, E);
  g_dev.grouped_linear.forward(s.in(X, R * K), s.in(W, wsize(E, ws, N, K)), ws, counts, E, s.out(Y, R * N), N, K, acc);
  s.finish();
}
inline void glin_bwd(const float* X, const float* W, int64_t ws, const int64_t* counts, int64_t E, const float* dY,
                     float* dX, float* dW, int64_t N, int64_t K, bool acc) {
  Stager s;
  const int64_t R = rows_of(counts, E);
  g_dev.grouped_linear.backward(s.in(X, R * K), s.in(W, wsize(E, ws, N, K)), ws, counts, E, s.in(dY, R * N),
                                s.out(dX, R * K), s.out(dW, wsize(E, ws, N, K)), N, K, acc);
  s.finish();
}
inline void ce_max(const float* logits, int64_t T, int64_t Vl, int64_t valid, float* mx) {
  Stager s;
  g_dev.cross_entropy.local_max(s.in(logits, T * Vl), T, Vl, valid, s.out(mx, T));
  s.finish();
}
inline void ce_sumexp(const float* logits, const int32_t* labels, const float* gmax, int64_t T, int64_t Vl,
                      int64_t valid, int64_t vstart, float* se, float* tg) {
  Stager s;
  g_dev.cross_entropy.local_sumexp_target(s.in(logits, T * Vl), s.in(labels, T), s.in(gmax, T), T, Vl, valid, vstart,
                                          s.out(se, T), s.out(tg, T));
  s.finish();
}
inline void ce_bwd(const float* logits, const int32_t* labels, const float* lse, int64_t T, int64_t Vl, int64_t valid,
                   int64_t vstart, const float* row_scale, float* d) {
  Stager s;
  g_dev.cross_entropy.backward(s.in(logits, T * Vl), s.in(labels, T), s.in(lse, T), T, Vl, valid, vstart,
                               s.in(row_scale, T), s.out(d, T * Vl));
  s.finish();
}
inline double ce_fwd(const float* logits, const int32_t* labels, int64_t T, int64_t V, float* lse) {
  Stager s;
  const double r = g_dev.cross_entropy.forward(s.in(logits, T * V), s.in(labels, T), T, V, s.out(lse, T));
  s.finish();
  return r;
}
inline double lce(const float* X, const float* W, const int32_t* labels, int64_t T, int64_t V, int64_t H, float gs,
                  float* lse, float* dX, float* dW, int64_t chunk) {
  Stager s;
  const double r = g_dev.linear_cross_entropy.forward_backward(s.in(X, T * H), s.in(W, V * H), s.in(labels, T), T, V,
                                                               H, gs, s.out(lse, T), s.out(dX, T * H),
                                                               s.out(dW, V * H), chunk);
  s.finish();
  return r;
}
inline void adam(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                 float wd, int64_t step, float gs) {
  Stager s;
  g_dev.adamw.step(s.out(p, n), s.in(g, n), s.out(m, n), s.out(v, n), n, lr, b1, b2, eps, wd, step, gs);
  s.finish();
}
inline double sumsq(const float* x, int64_t n) {
  Stager s;
  return g_dev.norms.sum_squares(s.in(x, n), n);
}
inline void scal(float* x, int64_t n, float a) {
  Stager s;
  g_dev.norms.scale(s.out(x, n), n, a);
  s.finish();
}
inline void add_in(float* y, const float* x, int64_t n) {
  Stager s;
  g_dev.add.add_inplace(s.out(y, n), s.in(x, n), n);
  s.finish();
}
inline void add_out(float* o, const float* a, const float* b, int64_t n) {
  Stager s;
  g_dev.add.add(s.out(o, n), s.in(a, n), s.in(b, n), n);
  s.finish();
}

inline void bias_add(float* y, const float* b, int64_t rows, int64_t cols) {
  Stager s;
  g_dev.add.add_bias_rows(s.out(y, rows * cols), s.in(b, cols), rows, cols);
  s.finish();
}
inline void bias_grad(const float* dy, float* db, int64_t rows, int64_t cols) {
  Stager s;
  g_dev.add.bias_grad_rows(s.in(dy, rows * cols), db ? s.out(db, cols) : nullptr, rows, cols);
  s.finish();
}

inline void lora_mask(const uint64_t* token_key, int64_t T, uint64_t seed, uint64_t module_key, int64_t feature0,
                      int64_t in_l, uint64_t threshold, uint8_t* m) {
  Stager s;
  g_dev.lora.dropout_mask(s.in(token_key, T), T, seed, module_key, feature0, in_l, threshold, s.out(m, T * in_l));
  s.finish();
}
inline void lora_apply(const float* x, const uint8_t* m, float keep_scale, float* xd, int64_t n) {
  Stager s;
  g_dev.lora.dropout_apply(s.in(x, n), s.in(m, n), keep_scale, s.out(xd, n), n);
  s.finish();
}
inline void lora_dbwd(const float* g, const uint8_t* m, float keep_scale, float* dx, int64_t n) {
  Stager s;
  g_dev.lora.dropout_backward(s.in(g, n), s.in(m, n), keep_scale, s.out(dx, n), n);
  s.finish();
}
inline void lora_fwd(const float* x, const float* A, const float* B, float* h, float* y, int64_t T, int64_t in,
                     int64_t out, int64_t r, float scaling) {
  Stager s;
  g_dev.lora.forward(s.in(x, T * in), s.in(A, r * in), s.in(B, out * r), s.out(h, T * r), s.out(y, T * out), T, in,
                     out, r, scaling);
  s.finish();
}
inline void lora_bwd(const float* x, const float* A, const float* B, const float* dy, float* h, float* dh, float* dx,
                     bool accumulate_dx, float* dA, float* dB, int64_t T, int64_t in, int64_t out, int64_t r,
                     float scaling) {
  Stager s;
  g_dev.lora.backward(s.in(x, T * in), s.in(A, r * in), s.in(B, out * r), s.in(dy, T * out), s.out(h, T * r),
                      s.out(dh, T * r), s.out(dx, T * in), accumulate_dx, dA ? s.out(dA, r * in) : nullptr,
                      dB ? s.out(dB, out * r) : nullptr, T, in, out, r, scaling);
  s.finish();
}

// The MoE ops. Host arrays of the contract (sort_by_expert's counts, routing_stats' prob_sum / counts,
// aux_loss_backward's counts) are passed through as host pointers; token_mask is staged (device memory).
inline void router_fwd(const float* logits, float* probs, int32_t* idx, float* w, int64_t T, int64_t E, int64_t k,
                       bool norm) {
  Stager s;
  g_dev.moe_router.forward(s.in(logits, T * E), s.out(probs, T * E), s.out(idx, T * k), s.out(w, T * k), T, E, k,
                           norm);
  s.finish();
}
inline void router_bwd(const float* probs, const int32_t* idx, const float* w, const float* dw, const float* dprobs,
                       const float* dextra, float* dlogits, int64_t T, int64_t E, int64_t k, bool norm) {
  Stager s;
  g_dev.moe_router.backward(s.in(probs, T * E), s.in(idx, T * k), s.in(w, T * k), s.in(dw, T * k),
                            s.in(dprobs, T * E), s.in(dextra, T * E), s.out(dlogits, T * E), T, E, k, norm);
  s.finish();
}
inline void moe_sort(const int32_t* idx, int64_t T, int64_t k, int64_t E, int64_t* counts, int32_t* row_of_slot,
                     int32_t* slot_of_row) {
  Stager s;
  g_dev.moe_permute.sort_by_expert(s.in(idx, T * k), T, k, E, counts, s.out(row_of_slot, T * k),
                                   s.out(slot_of_row, T * k));
  s.finish();
}
inline void moe_perm_fwd(const float* x, const int32_t* slot_of_row, float* out, int64_t rows, int64_t k, int64_t H) {
  Stager s;
  g_dev.moe_permute.permute_forward(s.in(x, rows / k * H), s.in(slot_of_row, rows), s.out(out, rows * H), rows, k, H);
  s.finish();
}
inline void moe_perm_bwd(const float* dout, const int32_t* row_of_slot, float* dx, int64_t T, int64_t k, int64_t H,
                         bool acc) {
  Stager s;
  g_dev.moe_permute.permute_backward(s.in(dout, T * k * H), s.in(row_of_slot, T * k), s.out(dx, T * H), T, k, H, acc);
  s.finish();
}
inline void moe_unperm_fwd(const float* y, const int32_t* row_of_slot, const float* w, float* out, int64_t T,
                           int64_t k, int64_t H) {
  Stager s;
  g_dev.moe_permute.unpermute_forward(s.in(y, T * k * H), s.in(row_of_slot, T * k), s.in(w, T * k),
                                      s.out(out, T * H), T, k, H);
  s.finish();
}
inline void moe_unperm_bwd(const float* y, const int32_t* row_of_slot, const float* w, const float* dout, float* dy,
                           float* dw, int64_t T, int64_t k, int64_t H) {
  Stager s;
  g_dev.moe_permute.unpermute_backward(s.in(y, T * k * H), s.in(row_of_slot, T * k), s.in(w, T * k),
                                       s.in(dout, T * H), s.out(dy, T * k * H), s.out(dw, T * k), T, k, H);
  s.finish();
}
inline void moe_keys(const uint64_t* key, const int32_t* slot_of_row, uint64_t* out, int64_t rows, int64_t k) {
  Stager s;
  g_dev.moe_permute.permute_keys(s.in(key, rows / k), s.in(slot_of_row, rows), s.out(out, rows), rows, k);
  s.finish();
}
inline int64_t moe_stats(const float* probs, const int32_t* idx, const uint8_t* mask, int64_t T, int64_t E, int64_t k,
                         double* prob_sum, int64_t* counts) {
  Stager s;
  return g_dev.moe_router_loss.routing_stats(s.in(probs, T * E), s.in(idx, T * k), s.in(mask, T), T, E, k, prob_sum,
                                             counts);
}
inline void moe_aux_bwd(const int64_t* counts, const uint8_t* mask, int64_t T, int64_t E, double cs, float* dprobs) {
  Stager s;
  g_dev.moe_router_loss.aux_loss_backward(counts, s.in(mask, T), T, E, cs, s.out(dprobs, T * E));
  s.finish();
}
inline double moe_z_fwd(const float* logits, const uint8_t* mask, int64_t T, int64_t E, float* lse) {
  Stager s;
  const double r = g_dev.moe_router_loss.z_loss_forward(s.in(logits, T * E), s.in(mask, T), T, E, s.out(lse, T));
  s.finish();
  return r;
}
inline void moe_z_bwd(const float* probs, const float* lse, const uint8_t* mask, int64_t T, int64_t E, double scale,
                      float* dlogits) {
  Stager s;
  g_dev.moe_router_loss.z_loss_backward(s.in(probs, T * E), s.in(lse, T), s.in(mask, T), T, E, scale,
                                        s.out(dlogits, T * E));
  s.finish();
}

inline void blk_fwd(const float* q, const int32_t* qs, const int32_t* qp, int64_t Tq, const float* k, const float* v,
                    const int32_t* ks, const int32_t* kp, int64_t Tk, float* out, float* lse, int64_t Hq, int64_t Hkv,
                    int64_t D, float scale, int64_t window) {
  Stager s;
  g_dev.attention_block.forward(s.in(q, Tq * Hq * D), s.in(qs, Tq), s.in(qp, Tq), Tq, s.in(k, Tk * Hkv * D),
                                s.in(v, Tk * Hkv * D), s.in(ks, Tk), s.in(kp, Tk), Tk, s.out(out, Tq * Hq * D),
                                s.out(lse, Tq * Hq), Hq, Hkv, D, scale, window);
  s.finish();
}
inline void blk_bwd(const float* q, const int32_t* qs, const int32_t* qp, int64_t Tq, const float* k, const float* v,
                    const int32_t* ks, const int32_t* kp, int64_t Tk, const float* lse, const float* delta,
                    const float* dout, float* dq, float* dk, float* dv, int64_t Hq, int64_t Hkv, int64_t D,
                    float scale, int64_t window) {
  Stager s;
  g_dev.attention_block.backward(s.in(q, Tq * Hq * D), s.in(qs, Tq), s.in(qp, Tq), Tq, s.in(k, Tk * Hkv * D),
                                 s.in(v, Tk * Hkv * D), s.in(ks, Tk), s.in(kp, Tk), Tk, s.in(lse, Tq * Hq),
                                 s.in(delta, Tq * Hq), s.in(dout, Tq * Hq * D), s.out(dq, Tq * Hq * D),
                                 s.out(dk, Tk * Hkv * D), s.out(dv, Tk * Hkv * D), Hq, Hkv, D, scale, window);
  s.finish();
}
inline void blk_merge(float* out, float* lse, const float* out_b, const float* lse_b, int64_t T, int64_t H, int64_t D) {
  Stager s;
  g_dev.attention_block.lse_merge(s.out(out, T * H * D), s.out(lse, T * H), s.in(out_b, T * H * D), s.in(lse_b, T * H),
                                  T, H, D);
  s.finish();
}
inline void blk_delta(const float* out, const float* dout, float* delta, int64_t T, int64_t H, int64_t D) {
  Stager s;
  g_dev.attention_block.softmax_delta(s.in(out, T * H * D), s.in(dout, T * H * D), s.out(delta, T * H), T, H, D);
  s.finish();
}

/// The host-pointer table over `dev` (kept in g_dev): same implementation names.
inline KernelTable staged_table(const KernelTable& dev) {
  g_dev = dev;
  KernelTable k;
  k.device = "cuda (staged)";
  k.embedding = {emb_fwd, emb_bwd};
  k.rms_norm = {rms_fwd, rms_bwd};
  k.add_rms_norm = {add_rms_fwd, add_rms_bwd};
  k.qk_norm_rope = {qkr_fwd, qkr_bwd};
  k.rope = {rope_fwd, rope_bwd};
  k.swiglu = {swi_fwd, swi_bwd};
  k.gate_up_swiglu = {gus_fwd, gus_bwd};
  k.attention = {attn_fwd, attn_bwd};
  k.linear = {lin_fwd, lin_bwd};
  k.grouped_linear = {glin_fwd, glin_bwd};
  k.cross_entropy = {ce_max, ce_sumexp, ce_bwd, ce_fwd};
  k.linear_cross_entropy = {lce};
  k.adamw = {adam};
  k.norms = {sumsq, scal};
  k.add = {add_in, add_out, bias_add, bias_grad};
  k.lora = {lora_mask, lora_apply, lora_dbwd, lora_fwd, lora_bwd};
  k.moe_router = {router_fwd, router_bwd};
  k.moe_permute = {moe_sort, moe_perm_fwd, moe_perm_bwd, moe_unperm_fwd, moe_unperm_bwd, moe_keys};
  k.moe_router_loss = {moe_stats, moe_aux_bwd, moe_z_fwd, moe_z_bwd};
  k.attention_block = {blk_fwd, blk_bwd, blk_merge, blk_delta};
  // cpu_only_ops(): the device set's refusals throw before touching an argument, so they take host pointers
  k.causal_conv1d = dev.causal_conv1d;
  k.gated_delta_rule = dev.gated_delta_rule;
  k.gated_rms_norm = dev.gated_rms_norm;
  k.impl_names = dev.impl_names;
  return k;
}

}  // namespace staged
