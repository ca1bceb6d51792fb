#include "twinkle/parallel/lora.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "twinkle/core/device_copy.h"
#include "twinkle/core/error.h"
#include "twinkle/parallel/lora_dropout.h"

namespace twinkle::parallel {

namespace {

// What one LoRA call of a layer needs: the table's LoraOp and, under lora_dropout, the mask and the
// dropped-out input, in the caller's workspace (on the table's device; layers run one at a time, so the
// "lora.*" buffers are reused by every module).
struct LoraCall {
  const kernels::LoraOp& op;
  Workspace& ws;
  const LoraDropout* d;
  int64_t T, in_l;
  uint8_t* mask = nullptr;

  LoraCall(const TensorTable& t, Workspace& scratch, int64_t T_, int64_t in_l_)
      : op(t.kernels().lora), ws(scratch), d(current_lora_dropout()), T(T_), in_l(in_l_) {
    if (d != nullptr && d->p <= 0.0f) d = nullptr;
    if (d)
      check(d->T == T, "LoRA dropout: the call has " + std::to_string(T) + " tokens but its dropout context " +
                           std::to_string(d->T));
  }
  float keep_scale() const { return 1.0f / (1.0f - d->p); }
  float* buf(const char* key, int64_t n) { return ws.get(key, {n}).f32(); }

  // The LoRA input: x itself (no dropout) or dropout(x) = x * mask / (1 - p) in "lora.xd", the mask in
  // "lora.mask" for the backward's d(x). The forward writes the test hook's mask file (lora_dropout.h).
  const float* input(const TensorTable& t, const LoraPair& p, const float* x, bool forward) {
    if (!d) return x;
    const int64_t n = T * in_l;
    // Workspace holds f32 buffers only: the mask (uint8) and the keys (u64) live in f32 buffers of their byte size
    mask = reinterpret_cast<uint8_t*>(buf("lora.mask", (n + 3) / 4));
    const uint64_t* keys = d->token_key;  // host memory unless token_key_on_device; the device gets a copy
    const Device dev = ws.device();
    if (dev != Device::CPU && !d->token_key_on_device) {
      uint64_t* k = reinterpret_cast<uint64_t*>(buf("lora.keys", 2 * T));
      upload_bytes(dev, k, d->token_key, static_cast<size_t>(T) * sizeof(uint64_t));
      keys = k;
    }
    op.dropout_mask(keys, T, d->seed, p.key, p.feature0, in_l, lora_dropout_threshold(d->p), mask);
    float* xd = buf("lora.xd", n);
    op.dropout_apply(x, mask, keep_scale(), xd, n);
    if (forward && !d->dump_dir.empty()) {
      std::vector<uint8_t> host(static_cast<size_t>(n));
      download_bytes(dev, host.data(), mask, host.size());
      std::string module = t[p.a].name;
      module = module.substr(0, module.size() - std::string(".lora_A.weight").size());
      const std::string path = d->dump_dir + "/" + d->dump_tag + "." + module + ".mask";
      std::FILE* f = std::fopen(path.c_str(), "wb");
      check(f != nullptr, "LoRA dropout test hook: cannot write " + path);
      const bool ok = std::fwrite(host.data(), 1, host.size(), f) == host.size();
      check(std::fclose(f) == 0 && ok, "LoRA dropout test hook: writing " + path + " failed");
    }
    return xd;
  }

  void forward(const TensorTable& t, const LoraPair& p, const float* x, float* y, int64_t out) {
    x = input(t, p, x, true);
    op.forward(x, t.data(p.a), t.data(p.b), buf("lora.h", T * p.r), y, T, in_l, out, p.r, p.scaling);
  }

  // dA, dB accumulate (when not frozen); dx [T, in_l] += dropout'(s dy B A).
  void backward(const TensorTable& t, const LoraPair& p, const float* x, const float* dy, float* dx, int64_t out) {
    const float* xd = input(t, p, x, false);
    float* h = buf("lora.h", T * p.r);
    float* dh = buf("lora.dh", T * p.r);
    if (!d) {
      op.backward(xd, t.data(p.a), t.data(p.b), dy, h, dh, dx, true, t.grad(p.a), t.grad(p.b), T, in_l, out, p.r,
                  p.scaling);
      return;
    }
    float* g = buf("lora.g", T * in_l);
    op.backward(xd, t.data(p.a), t.data(p.b), dy, h, dh, g, false, t.grad(p.a), t.grad(p.b), T, in_l, out, p.r,
                p.scaling);
    op.dropout_backward(g, mask, keep_scale(), dx, T * in_l);
  }
};

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
                         int64_t out_l, Workspace& scratch) {
  LoraCall(t, scratch, T, in).forward(t, p, x, y, out_l);
}

void lora_column_backward(const TensorTable& t, const LoraPair& p, const float* x, const float* dy, float* dx,
                          int64_t T, int64_t in, int64_t out_l, Workspace& scratch) {
  LoraCall(t, scratch, T, in).backward(t, p, x, dy, dx, out_l);
}

void lora_row_forward(const TensorTable& t, const LoraPair& p, const float* x, float* y_partial, int64_t T,
                      int64_t in_l, int64_t out, Workspace& scratch) {
  LoraCall(t, scratch, T, in_l).forward(t, p, x, y_partial, out);  // x_s A_s^T: tp-partial
}

void lora_row_backward(const TensorTable& t, const LoraPair& p, const float* x, const float* dy, float* dx, int64_t T,
                       int64_t in_l, int64_t out, Workspace& scratch) {
  LoraCall(t, scratch, T, in_l).backward(t, p, x, dy, dx, out);  // dy: full token rows
}

}  // namespace twinkle::parallel
