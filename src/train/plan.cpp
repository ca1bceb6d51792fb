// `twinkle plan`: per-rank memory and FLOPs of a layout (see twinkle/train/plan.h).
#include "twinkle/train/plan.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "twinkle/core/error.h"
#include "twinkle/dist/device_mesh.h"
#include "twinkle/kernels/cpu/attention.h"
#include "twinkle/kernels/cpu/gemm_bf16.h"
#include "twinkle/kernels/cpu/linear_cross_entropy.h"
#include "twinkle/model/qwen3_activations.h"
#include "twinkle/model/qwen3_flops.h"
#include "twinkle/parallel/expert_layout.h"
#include "twinkle/parallel/pipeline_interleaved.h"
#include "twinkle/parallel/pipeline_split.h"

namespace twinkle {

namespace {
int64_t align16(int64_t n) { return (n + 15) / 16 * 16; }
double ws(int64_t n) { return static_cast<double>(n + n / 4 + 16) * 4.0; }  // Workspace::get headroom
double bytes64(int64_t n) { return static_cast<double>((n + 63) / 64 * 64); }

// OpenMP threads a rank of a `world`-rank job runs with, by twinkle-run's rule (tools/twinkle_run.cpp):
// OMP_NUM_THREADS when set, else cores / ranks, at least 1.
int rank_threads(int64_t world) {
  if (std::getenv("OMP_NUM_THREADS")) return omp_get_max_threads();
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  return static_cast<int>(std::max<int64_t>(1, cores / std::max<int64_t>(1, world)));
}

// One linear of the stage: Y[M, N] = X[M, K] W[N, K]^T (LinearOp's shapes).
struct Gemm {
  int64_t M, N, K;
};

// ---- The bf16 memory model (mixed_precision "bf16"): the one place that says what the CPU bf16
// kernel set keeps beyond the fp32 step. Update it with kernels/cpu/gemm_bf16.cpp and
// kernels/cpu/bf16_set.cpp. What it models today (those files, read 2026-11-30):
//  * master weights, gradients, Adam state and saved activations stay fp32 (the other items of
//    the plan do not change);
//  * each bf16 GEMM rounds its operands into thread-local grow-only scratch of the calling (main)
//    thread, one buffer per operand kind, each as large as the largest use on the stage:
//    Input bf16(X) [M, K], Weight bf16(W) [N, K], Grad bf16(dY) [M, N] (2 bytes, 64-byte rounded);
//    the bf16 copy of a weight is made at each use, not kept per parameter;
//  * the fused lm head + cross entropy (tp 1) runs half the fp32 kernel's rows per chunk: an fp32
//    [chunk/2, vocab] logits buffer (reused in place for the bf16 gradient) and a [chunk/2] scale,
//    W rounded in blocks of 4096 vocab rows (through the Weight scratch), X through the Input
//    scratch; it replaces the fp32 kernel's [chunk, vocab] logits. With tp > 1 the head is the
//    fp32 Workspace logits plus a bf16 LinearOp call (whole [vocab/tp, H] shard through Weight);
//  * the forward's weight is rounded straight into oneDNN's blocked layout (pack_bt_bf16) through
//    the same Weight scratch (K rounded up to 32 and N to 64: the same bytes for the model's shapes);
//  * the attention backward in bf16 (kernels/cpu/attention_bf16.cpp) keeps its own per-call packed
//    operands next to the fp32 forward's (attention.cpp): Q and dO as bf16 rows and as token pairs,
//    K and V as rows, column pairs and K's token pairs ([heads, Tp, Dp] each, Tp = tokens with every
//    sequence padded to 64, Dp = head_dim rounded up to 16), an fp32 dQ accumulator [T, hq, Dp] and
//    the row statistics [2, T, hq] (bf16_attention_backward_scratch);
//  * on a CPU without bf16 instructions (kernels::cpu::bf16_gemm_native() false: the plan is for the
//    machine it runs on) each bf16 GEMM widens its two operands' rows x cols into dense fp32 copies
//    (gemm_bf16.cpp bgemm, two more grow-only buffers: A = the largest of X, dY; B = the largest of W, X;
//    the head's 4096-column blocks) and runs an fp32 GEMM;
//  * oneDNN's matmul scratchpad (user mode, one grow-only buffer) and JIT code are small and in
//    the runtime constant.
// MoE experts: a local expert's GEMM (its etp slice) is bounded by T·etp rows (one rank's tokens,
// all-gathered over etp; rows received over ep are not counted).
struct Bf16Workspace {
  double gemm_scratch = 0;  ///< the Input + Weight + Grad bf16 scratch (+ the emulation's fp32 copies)
  double fused_head = 0;    ///< the bf16 fused head's logits + scale (replaces the fp32 kernel's logits)
  double attention = 0;     ///< the bf16 attention backward's packed operands (bf16_attention_backward_scratch)
};
// flash_attention_backward_bf16's grow-only scratch for one call over T tokens (Tp padded), hq / hkv
// local heads of head_dim D: the exact vector / Scratch sizes of attention_bf16.cpp (the per-thread
// 64-token tiles, ~60 KB a thread, are left to the runtime constant). With ring cp the kernel runs the
// fp32 attention_block_backward instead, so there this over-counts (conservative).
double bf16_attention_backward_scratch(int64_t T, int64_t Tp, int64_t hq, int64_t hkv, int64_t D) {
  const int64_t Dp = (D + 15) / 16 * 16;
  const double rows_q = 2.0 * static_cast<double>(hq * Tp * Dp), rows_kv = 2.0 * static_cast<double>(hkv * Tp * Dp);
  return 4 * rows_q                                           // Q, dO rows; Q, dO token pairs (transposed)
         + 5 * rows_kv                                        // K, V rows; K, V column pairs; K token pairs
         + 2.0 * static_cast<double>(Tp * Dp)                 // the pairs' transpose buffer
         + bytes64(4 * std::max<int64_t>(T * hq * Dp, 16))    // dQ accumulator (fp32)
         + bytes64(4 * std::max<int64_t>(2 * T * hq, 16));    // delta and lse rows (fp32)
}
Bf16Workspace bf16_workspace(const std::vector<Gemm>& gemms, bool fused_head, int64_t chunk_rows, int64_t T, int64_t V,
                             int64_t H) {
  int64_t x = 0, w = 0, dy = 0;  // elements
  for (const Gemm& g : gemms) {
    x = std::max(x, g.M * g.K);
    w = std::max(w, g.N * g.K);
    dy = std::max(dy, g.M * g.N);
  }
  Bf16Workspace b;
  int64_t fa = std::max(x, dy), fb = std::max(w, x);  // the emulation's fp32 operand copies (elements)
  if (fused_head) {
    const int64_t c2 = std::max<int64_t>(1, std::min(chunk_rows / 2, T));  // linear_cross_entropy_bf16's chunk
    const int64_t vb = std::min<int64_t>(V, 4096);
    x = std::max(x, c2 * H);
    w = std::max(w, vb * H);
    fa = std::max({fa, c2 * H, c2 * vb});
    fb = std::max({fb, vb * H, c2 * H});
    b.fused_head = 4.0 * static_cast<double>(c2 * V + c2);  // exact std::vector sizes
  }
  b.gemm_scratch = bytes64(2 * x) + bytes64(2 * w) + bytes64(2 * dy);
  if (!kernels::cpu::bf16_gemm_native()) b.gemm_scratch += bytes64(4 * fa) + bytes64(4 * fb);
  return b;
}
}  // namespace

std::string StagePlan::biggest() const {
  const std::pair<const char*, double> items[] = {{"parameters", params},   {"gradients", grads},
                                                  {"optimizer state", optimizer}, {"activations", activations},
                                                  {"workspace", workspace}, {"runtime", runtime},
                                                  {"async save staging", save_staging}};
  auto it = std::max_element(std::begin(items), std::end(items),
                             [](const auto& a, const auto& b) { return a.second < b.second; });
  return it->first;
}

const StagePlan& Plan::worst() const {
  return *std::max_element(stages.begin(), stages.end(),
                           [](const StagePlan& a, const StagePlan& b) { return a.peak < b.peak; });
}

Plan plan_layout(const ModelConfig& c, const PlanOptions& o) {
  const int t = o.tp, p = o.pp, d = o.dp, cp = o.cp, ep = o.ep, etp = o.etp;
  auto need = [](bool ok, const std::string& m) {
    if (!ok) throw Error("twinkle plan: " + m);
  };
  need(t >= 1 && p >= 1 && d >= 1 && cp >= 1 && ep >= 1 && etp >= 1, "--tp, --pp, --dp, --cp, --ep, --etp must be >= 1");
  // The expert grid with training's own checks (and messages): the mesh, the model's experts,
  // the etp split of every expert, LoRA under etp.
  const int v = o.vpp;
  const DeviceMesh mesh = DeviceMesh::from_sizes({.dp = d, .tp = t, .pp = p, .cp = cp, .ep = ep, .etp = etp, .vpp = v});
  need(p * v <= c.num_hidden_layers, "pp " + std::to_string(p) + " x vpp " + std::to_string(v) +
                                         " virtual pipeline stages is more than num_hidden_layers " +
                                         std::to_string(c.num_hidden_layers));
  parallel::check_expert_layout(mesh, c.is_moe(), c.num_experts, c.source.empty() ? "the model" : c.source);
  if (c.is_moe()) parallel::check_expert_tensor_split(c.moe_intermediate_size, etp);
  if (c.is_moe() && o.lora_rank > 0) parallel::check_lora_expert_tensor_parallel(etp);
  need(o.micro_batch_size >= 1 && o.seq_length >= 1, "--micro-batch-size and --seq-length must be >= 1");
  need(c.num_attention_heads % t == 0, "num_attention_heads " + std::to_string(c.num_attention_heads) +
                                           " is not divisible by tp " + std::to_string(t));
  need(c.num_key_value_heads % t == 0, "num_key_value_heads " + std::to_string(c.num_key_value_heads) +
                                           " is not divisible by tp " + std::to_string(t));
  need(c.intermediate_size % t == 0, "intermediate_size is not divisible by tp " + std::to_string(t));
  // sequence parallelism: asked for, or switched on for a MoE model with tp > 1 (as training does)
  const bool sp = (o.sequence_parallel || c.is_moe()) && t > 1;
  // Under cp every row is right-padded to a multiple of 2·cp (2·cp·tp with SP) before the
  // load-balanced split, as training does (parallel/cp_split.h); the rows are held padded.
  const int64_t pad_multiple = cp > 1 ? 2 * cp * (sp ? t : 1) : 1;
  const int64_t S = (o.seq_length + pad_multiple - 1) / pad_multiple * pad_multiple;
  const int64_t gbs = o.global_batch_size > 0 ? o.global_batch_size : o.micro_batch_size * d;
  need(gbs % (o.micro_batch_size * d) == 0, "the global batch " + std::to_string(gbs) +
                                                " is not divisible by micro-batch size x dp");
  int64_t m = gbs / (o.micro_batch_size * d);
  if (v > 1 && m % p) m += p - m % p;  // the engine pads a step with empty micro-batches to a multiple of pp
  const Recompute rc = parse_recompute(o.recompute_granularity);
  need(o.mixed_precision == "fp32" || o.mixed_precision == "bf16",
       "mixed_precision must be fp32 or bf16, got '" + o.mixed_precision + "'");
  const bool bf16 = o.mixed_precision == "bf16";
  const parallel::LayerSplit split =
      !o.layers_per_stage.empty() || !parallel::is_balanced_split_mode(o.pipeline_split)
          ? parallel::split_layers(c.num_hidden_layers, p * v, o.layers_per_stage)
          : parallel::balanced_split(qwen3_stage_costs(c), p * v);

  const int64_t H = c.hidden_size, D = c.head_dim;
  const int64_t nq = c.num_attention_heads / t * D, nkv = c.num_key_value_heads / t * D, I = c.intermediate_size / t;
  const int64_t hq = c.num_attention_heads / t;
  const int64_t mdiv = 128 * t, Vp = (c.vocab_size + mdiv - 1) / mdiv * mdiv, Vl = Vp / t;
  const int64_t T = o.micro_batch_size * S / cp;  // tokens of a micro-batch on a rank
  const int64_t Tl = sp ? (T + t - 1) / t : T;
  const int64_t E = c.num_experts, K = c.num_experts_per_tok, Im = c.moe_intermediate_size;
  const int64_t Iml = c.is_moe() ? Im / etp : 0;  // each expert's gate/up rows, down columns on this etp rank
  // expert-data-parallel group: world / (etp·ep·pp) = tp·cp·dp / (etp·ep) (Megatron's expert grid)
  const int64_t edp = static_cast<int64_t>(t) * cp * d / (static_cast<int64_t>(ep) * etp);

  Plan plan;
  plan.micro_batches = m;
  plan.padded_seq_length = S;
  const double tokens_global = static_cast<double>(gbs * o.seq_length);
  for (int s = 0; s < p; ++s) {
    StagePlan st;
    st.stage = s;
    // this rank's layers: chunk k holds virtual stage k*p + s
    std::vector<std::vector<int64_t>> chunk_layers(static_cast<size_t>(v));
    std::vector<int64_t> layers;
    for (int k = 0; k < v; ++k) {
      const size_t vs = static_cast<size_t>(k * p + s);
      for (int64_t l = split.first[vs]; l < split.first[vs] + split.count[vs]; ++l) {
        chunk_layers[static_cast<size_t>(k)].push_back(l);
        layers.push_back(l);
      }
    }
    const int64_t nl = static_cast<int64_t>(layers.size());
    st.layers = nl;
    const bool first = s == 0, last = s == p - 1;
    // parameters: the flat buffer, tensor by tensor in table order
    int64_t n = 0, na = 0, ne = 0, nae = 0;  // dense, adapter, expert, expert-adapter elements
    auto add = [&](int64_t k) { n += align16(k); };
    const int64_t r = o.lora_rank;
    // LoRA pair of a column-parallel (A [r, in] replicated, B [out/t, r]) or row-parallel
    // (A [r, in/t], B [out, r] replicated) part; local sizes are passed
    auto lora = [&](int64_t a_numel, int64_t b_numel) {
      if (r > 0) na += align16(a_numel) + align16(b_numel);
    };
    if (first) add(Vl * H);
    bool any_moe = false;
    for (int64_t l : layers) {
      add(H);  // input_layernorm
      add(nq * H), add(nkv * H), add(nkv * H);
      if (c.attention_bias) add(nq), add(nkv), add(nkv);
      add(H * nq);
      lora(r * H, nq * r), lora(r * H, nkv * r), lora(r * H, nkv * r), lora(r * nq, H * r);
      if (c.attention_bias) add(H);
      add(D), add(D);  // q_norm, k_norm
      add(H);          // post_attention_layernorm
      if (c.is_moe() && c.is_moe_layer(l)) {
        any_moe = true;
        add(E * H);
        for (int64_t e = 0; e < E / ep; ++e) {
          ne += align16(Iml * H) * 2 + align16(H * Iml);
          // one unsplit LoRA pair per expert and projection, in the adapter store's expert region
          if (r > 0) nae += 2 * (align16(r * H) + align16(Im * r)) + align16(r * Im) + align16(H * r);
        }
      } else {
        add(I * H), add(I * H), add(H * I);
        lora(r * H, I * r), lora(r * H, I * r), lora(r * I, H * r);
      }
    }
    if (last) {
      add(H);
      if (!c.tie_word_embeddings || p > 1) add(Vl * H);
    }
    const int64_t align = 64 * d * cp;
    n = (n + align - 1) / align * align;
    // experts: their own region, ZeRO-sharded over expert-dp
    if (ne > 0) ne = (ne + 64 * edp - 1) / (64 * edp) * (64 * edp);
    if (na > 0) na = (na + align - 1) / align * align;
    if (nae > 0) nae = (nae + 64 * edp - 1) / (64 * edp) * (64 * edp);
    st.param_numel = n;
    st.expert_numel = ne;
    st.adapter_numel = na + nae;
    st.params = 4.0 * static_cast<double>(n + ne + na + nae);
    const int64_t trained = r > 0 ? na : n;  // a frozen base drops its gradient buffer
    const int64_t trained_experts = r > 0 ? nae : ne;
    st.grads = 4.0 * static_cast<double>(trained + trained_experts);
    const int64_t shards = d * cp;
    const bool sharded = o.use_distributed_optimizer && shards > 1;
    const int64_t be =
        std::min<int64_t>(std::max<int64_t>(o.bucket_bytes / 4 / (16 * shards), 1) * 16 * shards, trained);
    st.state_numel = (sharded ? trained / shards : trained) +
                     (o.use_distributed_optimizer ? trained_experts / edp : trained_experts);
    st.optimizer = 2.0 * 4.0 * static_cast<double>(st.state_numel) +
                   (shards > 1 && o.use_distributed_optimizer ? 4.0 * static_cast<double>(be / shards) : 0.0);
    // MoE layers route their own tokens: the sequence-parallel shard when tp > 1.
    const int64_t Tm = sp ? Tl : T;
    const int64_t R = Tm * K;    // this rank's routed slots; its experts' rows over ep when balanced
    const int64_t Rg = R * etp;  // the etp group's rows its expert slices run (all-gathered over etp)
    const bool dispatched = ep > 1 || etp > 1;
    // activations of the micro-batches in flight, chunk by chunk
    const std::vector<int> peak_slots =
        v > 1 ? parallel::interleaved_peak_slots(p, s, static_cast<int>(m), v)
              : std::vector<int>{static_cast<int>(std::min<int64_t>(p - s, m))};
    st.activations = 0;
    st.slots = 0;
    ActivationDims dims;  // the last chunk's (recompute buffers: the same for every chunk)
    for (int k = 0; k < v; ++k) {
      const std::vector<int64_t>& cl = chunk_layers[static_cast<size_t>(k)];
      bool chunk_moe = false;
      for (int64_t l : cl) chunk_moe = chunk_moe || (c.is_moe() && c.is_moe_layer(l));
      dims = ActivationDims();
      dims.hidden = H;
      dims.q_heads = hq;
      dims.kv_heads = c.num_key_value_heads / t;
      dims.q_width = nq;
      dims.kv_width = nkv;
      dims.intermediate = I;
      dims.layers = static_cast<int64_t>(cl.size());
      for (int64_t l : cl) dims.moe_layer.push_back(c.is_moe() && c.is_moe_layer(l));
      dims.tp = t;
      dims.sequence_parallel = sp;
      dims.last_stage = last && k == v - 1;
      dims.recompute = rc;
      double act = 4.0 * static_cast<double>(stage_activation_floats(dims, T));
      if (chunk_moe) {  // MoeActivations buffers per MoE layer, and the dispatcher of each (layer, slot)
        for (int64_t l : cl) {
          if (!(c.is_moe() && c.is_moe_layer(l))) continue;
          // router: logits, probs, lse, combine weights and indices; gate, up, act; expert outputs y
          double f = static_cast<double>(3 * Tm * E + Tm + 2 * Tm * K + 3 * Rg * Iml + Rg * H);
          if (!dispatched)
            f += static_cast<double>(2 * R + R * H);  // row_of_slot, slot_of_row, the permuted input xp
          else  // parallel/moe_dispatcher.h, saved for the backward: slot maps, y_perm, the expert input
            f += static_cast<double>(2 * R + R * H + Rg * H);
          act += 4.0 * f + 8.0 * static_cast<double>(3 * E);
        }
      }
      st.activations += act * static_cast<double>(peak_slots[static_cast<size_t>(k)]);
      st.slots += peak_slots[static_cast<size_t>(k)];
    }
    st.activations += 4.0 * static_cast<double>(recompute_buffer_floats(dims, T));
    // pipeline receive buffers (exact size); under vpp an estimate of one per chunk and direction
    if (!first || v > 1) st.activations += static_cast<double>(v) * ws(Tl * H) / 1.25;
    if (!last || v > 1) st.activations += static_cast<double>(v) * ws(Tl * H) / 1.25;
    // workspace: one layer's backward scratch + the stage's own buffers
    double w = 2 * ws(Tl * H) + ws(T * H);  // stage.dA, stage.dB; tp.dx_full (layers' and the head's)
    if (nl > 0) {
      w += ws(Tl * H);                                 // layer.dh
      w += 2 * ws(T * nq) + 2 * ws(T * nkv);           // attn.dctx, dq, dk, dv
      w += ws(T * I);                                  // mlp.dact
      // the fp32 gate|up gradient (tp.dgu, mlp.dgu unfused): the bf16 set's fused backward rounds it
      // straight into its GEMM operand (GateUpSwigluOp::uses_dgu false), so without LoRA it is never made
      if (!bf16 || o.lora_rank > 0) w += ws(2 * T * I);
      w += ws(T * H);                                  // tp.y_full
      if (sp) w += 3 * ws(Tl * H) + ws(T * H);         // tp.y_local, tp.dx_local, tp.dy_full
    }
    if (any_moe)  // moe.out, dx, dtopk_w, dlogits; dy, dxp over the expert rows; dact, dgate, dup
      w += 2 * ws(Tm * H) + ws(Tm * K) + ws(Tm * E) + 2 * ws(Rg * H) + 3 * ws(Rg * Iml);
    if (any_moe && dispatched)  // the dispatchers' transient rows, one set per rank: moe.a2a.send, recv
      w += 2 * ws(R * H) + (etp > 1 ? ws(R * H) + ws(etp * R * H) : 0.0);  // etp: moe.a2a.own, etp
    if (first && t > 1) w += ws(T * H);                // tp.emb_full
    std::vector<Gemm> gemms;  // the stage's linears, for the bf16 scratch
    for (int64_t l : layers) {
      gemms.push_back({T, nq, H}), gemms.push_back({T, nkv, H}), gemms.push_back({T, H, nq});
      if (c.is_moe() && c.is_moe_layer(l))
        gemms.push_back({T, E, H}), gemms.push_back({T * etp, Iml, H}), gemms.push_back({T * etp, H, Iml});
      else
        gemms.push_back({T, 2 * I, H}), gemms.push_back({T, H, I});
    }
    const int64_t chunk = std::min(o.lm_head_chunk_tokens, T);
    if (last && t > 1) gemms.push_back({chunk, Vl, H});
    if (last) {
      if (t == 1 && !bf16)  // the fused linear_cross_entropy kernel: its own buffers (logits...), lse in scratch
        w += static_cast<double>(kernels::cpu::linear_cross_entropy_scratch_bytes(
                 T, c.vocab_size, H, o.lm_head_chunk_tokens, true, /*with_dw=*/o.lora_rank == 0,
                 rank_threads(static_cast<int64_t>(t) * p * d * cp))) +
             ws(T);
      else if (t == 1)      // its bf16 twin: see bf16_workspace; lse in scratch
        w += ws(T);
      else                  // head.logits, lse, rmax/tgt/rscale
        w += ws(chunk * Vl) + 4 * ws(chunk);
    }
    // the attention kernels' packed operands (kernels/cpu/attention.h): the fp32 forward's always, the
    // fp32 backward's without bf16 (with bf16 the backward's own, below). Under ring cp the block
    // kernels keep buffers of their own instead (attention_block.cpp): this is then an estimate.
    if (nl > 0)
      w += static_cast<double>(
          kernels::cpu::flash_attention_scratch_bytes(T, hq, c.num_key_value_heads / t, D, /*backward=*/!bf16));
    if (bf16) {
      Bf16Workspace b = bf16_workspace(gemms, last && t == 1, o.lm_head_chunk_tokens, T, c.vocab_size, H);
      if (nl > 0) {
        const int64_t Tp = o.micro_batch_size * ((S / cp + 63) / 64 * 64);  // rows padded to 64
        b.attention = bf16_attention_backward_scratch(T, Tp, hq, c.num_key_value_heads / t, D);
      }
      w += b.gemm_scratch + b.fused_head + b.attention;
    }
    st.workspace = w;
    st.runtime = static_cast<double>(o.runtime_bytes);
    // the asynchronous save's copy of the rank's slices: master weight + exp_avg + exp_avg_sq (fp32)
    // of its ZeRO-1 ranges (megatron_resume.cpp save_sharded), kept from the first asynchronous save on
    st.save_staging = o.async_save ? 3.0 * 4.0 * static_cast<double>(st.state_numel) : 0.0;
    st.peak = st.params + st.grads + st.optimizer + st.activations + st.workspace + st.runtime + st.save_staging;
    // FLOPs: this stage's share of the replica's tokens, split over tp and cp
    double per_token = 0, recompute_fwd = 0;
    const double attn = qwen3_attention_flops(c, static_cast<double>(o.seq_length));
    for (int64_t l : layers) {
      const double layer = static_cast<double>(qwen3_layer_matmul_flops(c, l)) + attn;
      per_token += 3.0 * layer;
      if (rc == Recompute::Full && !(c.is_moe() && c.is_moe_layer(l))) recompute_fwd += layer;
      if (rc == Recompute::Selective) recompute_fwd += attn;
    }
    if (last) per_token += 3.0 * static_cast<double>(qwen3_head_matmul_flops(c));
    const double rank_tokens = tokens_global / static_cast<double>(d) / static_cast<double>(t * cp);
    st.model_flops = per_token * rank_tokens;
    st.executed_flops = (per_token + recompute_fwd) * rank_tokens;
    plan.job_model_flops += per_token * tokens_global;
    plan.stages.push_back(st);
  }
  return plan;
}

}  // namespace twinkle
