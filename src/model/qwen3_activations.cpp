#include "twinkle/model/qwen3_activations.h"

#include <string>

#include "twinkle/core/error.h"

namespace twinkle {

namespace {
// Visits the buffers of one decoder layer for T tokens: all of them, or (Full recompute) only
// `out`, or (Selective) all but the core attention's ctx / lse; `work_only` visits what a
// stage's RecomputeBuffers hold instead.
template <class F>
void layer_layout(DecoderLayerActivations& l, const ActivationDims& d, int64_t T, bool moe, Recompute mode,
                  bool work, F&& buf) {
  const int64_t Tl = d.sequence_parallel ? (T + d.tp - 1) / d.tp : T, H = d.hidden;
  if (work && mode == Recompute::Selective) {
    buf(l.attn.ctx, T * d.q_width);
    buf(l.attn.lse, T * d.q_heads);
    return;
  }
  if (!work && mode == Recompute::Full && !moe) {
    buf(l.out, Tl * H);
    return;
  }
  buf(l.ln1, Tl * H);
  buf(l.rstd1, Tl);
  if (d.sequence_parallel) buf(l.attn.x_full, T * H);
  buf(l.attn.q_pre, T * d.q_width);
  buf(l.attn.k_pre, T * d.kv_width);
  buf(l.attn.v, T * d.kv_width);
  buf(l.attn.q, T * d.q_width);
  buf(l.attn.k, T * d.kv_width);
  buf(l.attn.rstd_q, T * d.q_heads);
  buf(l.attn.rstd_k, T * d.kv_heads);
  if (work || mode != Recompute::Selective) {
    buf(l.attn.ctx, T * d.q_width);
    buf(l.attn.lse, T * d.q_heads);
  }
  buf(l.h, Tl * H);
  buf(l.ln2, Tl * H);
  buf(l.rstd2, Tl);
  if (!moe) {
    if (d.sequence_parallel) buf(l.mlp.x_full, T * H);
    buf(l.mlp.gu, 2 * T * d.intermediate);
    buf(l.mlp.act, T * d.intermediate);
  }
  buf(l.out, Tl * H);
}

// Visits every buffer of the stage with its size in floats for `T` tokens.
template <class F>
void layout(StageActivations& a, const ActivationDims& d, int64_t T, F&& buf) {
  const int64_t Tl = d.sequence_parallel ? (T + d.tp - 1) / d.tp : T, H = d.hidden;
  buf(a.x0, Tl * H);
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const bool moe = i < d.moe_layer.size() && d.moe_layer[i];
    layer_layout(a.layers[i], d, T, moe, d.recompute, false, buf);
  }
  if (d.last_stage) {
    buf(a.final_norm, Tl * H);
    buf(a.rstd_final, Tl);
    buf(a.d_final_norm, Tl * H);
  }
}
int64_t aligned(int64_t n) { return (n + 15) / 16 * 16; }  // 64-byte starts
}  // namespace

void StageActivations::reserve(const ActivationDims& d, int64_t T) {
  check(T > 0, "StageActivations::reserve: empty micro-batch");
  if (static_cast<int64_t>(layers.size()) != d.layers) {
    layers.assign(static_cast<size_t>(d.layers), DecoderLayerActivations{});
    capacity_ = 0;
  }
  if (T > capacity_) {
    const int64_t cap = T + T / 4 + 16;
    int64_t total = 0;
    layout(*this, d, cap, [&](float*&, int64_t n) { total += aligned(n); });
    storage_ = Tensor();  // release the old buffer before allocating the new one
    storage_ = Tensor::zeros({total}, DType::F32, d.device);
    float* base = storage_.f32();
    int64_t off = 0;
    layout(*this, d, cap, [&](float*& p, int64_t n) {
      p = base + off;
      off += aligned(n);
    });
    capacity_ = cap;
  }
  this->T = T;
}

int64_t stage_activation_floats(const ActivationDims& d, int64_t T) {
  StageActivations a;
  a.layers.assign(static_cast<size_t>(d.layers), DecoderLayerActivations{});
  int64_t total = 0;
  layout(a, d, T + T / 4 + 16, [&](float*&, int64_t n) { total += aligned(n); });
  return total;
}

int64_t recompute_buffer_floats(const ActivationDims& d, int64_t T) {
  if (d.recompute == Recompute::None) return 0;
  DecoderLayerActivations l;
  int64_t total = 0;
  layer_layout(l, d, T + T / 4 + 16, false, d.recompute, true, [&](float*&, int64_t n) { total += aligned(n); });
  return total;
}

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::None;
  if (name == "selective") return Recompute::Selective;
  if (name == "full") return Recompute::Full;
  throw Error("recompute_granularity must be \"full\", \"selective\" or \"none\", got \"" + name + "\"");
}

void RecomputeBuffers::reserve(const ActivationDims& d, int64_t T) {
  check(T > 0, "RecomputeBuffers::reserve: empty micro-batch");
  if (d.recompute == Recompute::None || T <= capacity_) return;
  const int64_t cap = T + T / 4 + 16;
  int64_t total = 0;
  layer_layout(layer, d, cap, false, d.recompute, true, [&](float*&, int64_t n) { total += aligned(n); });
  storage_ = Tensor();
  storage_ = Tensor::zeros({total}, DType::F32, d.device);  // where the slot's activations are
  float* base = storage_.f32();
  int64_t off = 0;
  layer_layout(layer, d, cap, false, d.recompute, true, [&](float*& p, int64_t n) {
    p = base + off;
    off += aligned(n);
  });
  capacity_ = cap;
}

void StageActivations::check_holds(int64_t tokens, int slot) const {
  check(T == tokens, "backward of micro-batch slot " + std::to_string(slot) + " with " + std::to_string(tokens) +
                         " tokens, but its forward saved " + std::to_string(T) + " tokens");
}

}  // namespace twinkle
