// bench/layout_bench.cpp — a parallel layout next to the single process, with its traffic.
//
//   twinkle-run --nproc_per_node=8 build/bench/layout_bench --tp 2 --pp 2 --dp 2 [--sp] [--ep 2] [--etp 2]
//        [--cp 2 [--cp-comm-type p2p|a2a]] [--device cpu|cuda] [--config tiny|small|moe|moe_wide] [--rows 16] [--mbs 1] [--steps 3] [--no-distopt] [--check-volume]
//        [--split even] [--recompute none|selective|full] [--seq N (fixed row length instead of 48-127)]
//        [--no-baseline] [--baseline-threads N]
//
// Per step it prints: the step time of the layout (max over ranks) and of one process on the
// same global batch (run by rank 0 first, while the others wait), the 1F1B bubble measured on
// each stage (time blocked in pipeline send/recv / compute time) against (p-1)/m, and the
// bytes each rank sent per process group next to the analytic volume of the layout
// (tensor/sequence-parallel collectives, pipeline activations and gradients, tied-embedding
// and data-parallel reductions, scalars). --check-volume exits 1 when any rank's counted bytes
// differ from that figure. That figure is the implementation's own byte model, so it is a
// bench readout, not a test: tests/volume.cmake counts the bytes at the MPI layer instead
// (tests/dist/mpi_count.cpp preloaded; the last step is bracketed by MPI_Pcontrol(1)/(0)) and
// compares them with Megatron's formulas (tests/reference/check_comm_volume.py).
// --no-baseline skips the single-process run. --baseline-threads N runs it with N OpenMP threads
// (default: the launch's OMP_NUM_THREADS, 1 under twinkle-run): the layout's ranks share the
// machine's cores, so with N = the core count the baseline gets the same cores as the layout.
// --cp N splits every micro-batch's sequence over N context-parallel ranks (each row padded to a
// multiple of 2·N, 2·N·tp under SP: parallel/cp_split.h); the cp group's volume is the ring's
// (--cp-comm-type p2p, parallel/ring_attention.h RingAttention::forward_bytes / backward_bytes) or
// Ulysses' (a2a, parallel/ulysses_attention.h) per attention layer and micro-batch, plus for a MoE
// model the router statistics summed over cp ((2E+2) fp64 per MoE layer and micro-batch).
// --device cuda runs the model on the CUDA device (a CUDA build; tests/cuda.cmake builds
// layout_bench_cuda_emu on the host emulation of CUDA, where the CUDA groups stage through the
// host MPI groups): the byte model and the counted bytes are the same as on the CPU.
// --config moe is a tiny Qwen3-MoE (8 experts top-2, layer 1 dense); with --ep N the expert
// all-to-all traffic of the ep group is checked against the volume of the routing that
// happened: per MoE layer and micro-batch the per-expert counts ((ep-1) * E/ep * 8 bytes), the
// rows this rank's tokens sent to other ep ranks (S) and the rows other ranks sent to its
// experts (R), each crossing twice (dispatch and combine in forward, their transposes in
// backward): 2 * (S + R) * hidden * 4 bytes. S comes from each micro-batch's top-k routing
// (kept in the model's activations; so --check-volume with --ep needs at most one micro-batch
// per pipeline slot), R from the other ranks' S (exchanged after the step, outside the count).
// With --etp N (expert tensor parallelism) the etp group carries, per MoE layer and micro-batch,
// the all-gather of the per-local-expert counts ((etp-1) * E/ep * 8 bytes) and four collectives
// of padded row blocks (all-gather of the expert input and reduce-scatter of the partial outputs
// in forward; all-gather of d(output) and reduce-scatter of d(input) in backward), each
// (etp-1) * B * hidden * 4 bytes, B = the most rows any etp rank of the group received over ep
// in that layer and micro-batch (from the same exchanged routing, maximised over etp).
// --config moe_wide is a MoE whose experts dominate the memory (16 experts of width 512 at
// hidden 256): tests/reference/check_plan.py compares `twinkle plan --etp` with its measured peak.
// Each rank line also gives its parameter elements (dense + expert region) and AdamW state
// elements, the figures the planner computes exactly, and with --ep (routing known) the rows its
// experts ran in the last step next to balanced routing's (its own routed slots, which is what
// `twinkle plan` counts the expert FLOPs of a rank with).
#include <mpi.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "twinkle/core/device_copy.h"
#include "twinkle/dist/runtime.h"
#include "twinkle/parallel/ring_attention.h"
#include "twinkle/parallel/ulysses_attention.h"
#include "twinkle/optim/distributed_optimizer.h"
#include "twinkle/model/qwen3_model.h"
#include "twinkle/train/engine.h"
#include "peak_rss.h"

using namespace twinkle;
using Clock = std::chrono::steady_clock;

namespace {

struct Opts {
  int tp = 1, pp = 1, dp = 1, ep = 1, etp = 1, vpp = 1, cp = 1;
  std::string cp_comm_type = "p2p";  // --cp-comm-type: p2p (ring) | a2a (Ulysses)
  std::string device = "cpu";        // --device: the model's device (cpu | cuda)
  int64_t layers = 0;  // --layers: num_hidden_layers of the config (0: the config's own)
  bool sp = false, distopt = true, check = false, baseline = true;
  bool overlap_grad = false, overlap_param = false;  // DistributedOptimizer overlap switches
  int64_t bucket_bytes = 4 << 20;
  int baseline_threads = 0;  // 0: the launch's OpenMP setting
  std::string config = "tiny";
  std::string split = "balanced";  // pipeline split: balanced | even
  std::string recompute = "none";  // activation recompute: none | selective | full
  int64_t rows = 16, mbs = 1, steps = 3, seq = 0;
};

ModelConfig make_config(const std::string& name) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.rope_theta = 1e6;
  c.max_position_embeddings = 1024;
  if (name == "tiny") {
    c.vocab_size = 1001; c.hidden_size = 64; c.intermediate_size = 96; c.num_hidden_layers = 4;
    c.num_attention_heads = 4; c.num_key_value_heads = 2; c.head_dim = 32; c.tie_word_embeddings = true;
  } else if (name == "moe") {  // models/qwen3-moe-tiny's block at the tiny config's size
    c.model_type = "qwen3_moe";
    c.vocab_size = 1001; c.hidden_size = 64; c.intermediate_size = 96; c.num_hidden_layers = 4;
    c.num_attention_heads = 4; c.num_key_value_heads = 2; c.head_dim = 32; c.tie_word_embeddings = false;
    c.num_experts = 8; c.num_experts_per_tok = 2; c.moe_intermediate_size = 48; c.norm_topk_prob = true;
    c.mlp_only_layers = {1};
  } else if (name == "moe_wide") {  // the experts hold most of the memory (etp / edp sharding shows)
    c.model_type = "qwen3_moe";
    c.vocab_size = 4096; c.hidden_size = 256; c.intermediate_size = 768; c.num_hidden_layers = 4;
    c.num_attention_heads = 8; c.num_key_value_heads = 4; c.head_dim = 32; c.tie_word_embeddings = false;
    c.num_experts = 16; c.num_experts_per_tok = 2; c.moe_intermediate_size = 512; c.norm_topk_prob = true;
    c.mlp_only_layers = {1};
  } else {
    c.vocab_size = 32000; c.hidden_size = 256; c.intermediate_size = 768; c.num_hidden_layers = 4;
    c.num_attention_heads = 8; c.num_key_value_heads = 4; c.head_dim = 32; c.tie_word_embeddings = true;
  }
  return c;
}

std::vector<EncodedRow> make_rows(int64_t n, int64_t vocab, int64_t seq) {
  std::mt19937_64 g(5);
  std::vector<EncodedRow> out;
  for (int64_t i = 0; i < n; ++i) {
    EncodedRow r;
    int64_t L = 48 + static_cast<int64_t>(g() % 80);
    if (seq > 0) L = seq;
    for (int64_t t = 0; t < L; ++t) {
      r.input_ids.push_back(static_cast<int32_t>(g() % static_cast<uint64_t>(vocab)));
      r.labels.push_back(t < 8 ? -100 : r.input_ids.back());
      r.position_ids.push_back(static_cast<int32_t>(t));
    }
    r.length = L;
    out.push_back(r);
  }
  return out;
}

std::vector<MicroBatch> split(const std::vector<EncodedRow>& rows, int64_t mbs) {
  std::vector<MicroBatch> out;
  for (size_t i = 0; i < rows.size(); i += static_cast<size_t>(mbs))
    out.push_back(collate_padded(std::vector<EncodedRow>(rows.begin() + static_cast<std::ptrdiff_t>(i),
                                                         rows.begin() + static_cast<std::ptrdiff_t>(std::min(rows.size(), i + mbs))),
                                 0));
  return out;
}

// Byte model of ProcessGroup::bytes_sent (process_group.h).
int64_t ar(int64_t n, int64_t elem, int g) { return g > 1 ? 2 * (g - 1) * (n * elem) / g : 0; }
int64_t ag(int64_t n, int g) { return g > 1 ? (g - 1) * n * 4 : 0; }  // n = per-rank floats
int64_t rs(int64_t n, int g) { return g > 1 ? (g - 1) * n * 4 : 0; }  // n = output floats

struct Volume {
  std::map<std::string, int64_t> by_group;
  bool routing_unknown = false;  // ep / etp volume not modelled (more micro-batches than pipeline slots)
  // ep > 1, routing known: rows this rank's experts received over ep in the last step (all MoE
  // layers and micro-batches) and this rank's own routed slots (what balanced routing gives each
  // rank's experts; `twinkle plan` counts the expert FLOPs of a rank with it).
  int64_t expert_rows = -1, own_slots = -1;
  int64_t total() const {
    int64_t s = 0;
    for (auto& [k, v] : by_group) s += v;
    return s;
  }
};

using twinkle::benchutil::reset_peak_rss;
using twinkle::benchutil::step_peak_rss_bytes;
double peak_rss_mib() { return static_cast<double>(step_peak_rss_bytes()) / 1048576.0; }

// Rows of this rank's routed slots per destination ep rank, per micro-batch and MoE layer of the
// last step (its activations: one micro-batch per pipeline slot): [ep rank][micro-batch][MoE layer].
std::vector<int64_t> routed_rows_per_ep_rank(Qwen3Model& model, const std::vector<MicroBatch>& mbs,
                                             const dist::ParallelState& ps, int64_t moe_layers) {
  const auto& c = model.config();
  const int ep = ps.ep->size(), p = ps.pp->size(), s = ps.pp->rank();
  const int64_t El = c.num_experts / ep, n = static_cast<int64_t>(mbs.size()) * moe_layers;
  std::vector<int64_t> rows(static_cast<size_t>(ep * n), 0);
  for (size_t mb = 0; mb < mbs.size(); ++mb) {
    const StageActivations& a = model.slot_activations(parallel::pipeline_slot(static_cast<int>(mb), s, p));
    int64_t j = static_cast<int64_t>(mb) * moe_layers;
    for (size_t i = 0; i < a.layers.size(); ++i) {
      if (!c.is_moe_layer(model.first_layer() + static_cast<int64_t>(i))) continue;
      const MoeActivations& m = a.layers[i].moe;  // on the model's device: copied to the host
      std::vector<int32_t> idx(static_cast<size_t>(m.T * c.num_experts_per_tok));
      download_bytes(model.device(), idx.data(), m.topk_idx, idx.size() * sizeof(int32_t));
      for (int32_t e : idx) ++rows[static_cast<size_t>((e / El) * n + j)];
      ++j;
    }
  }
  return rows;
}

Volume analytic(Qwen3Model& model, const std::vector<MicroBatch>& mbs, const dist::ParallelState& ps, bool distopt,
                const std::string& cp_comm_type) {
  Volume v;
  const auto& c = model.config();
  const int t = ps.tp->size(), p = ps.pp->size(), d = ps.dp_cp->size(), w = ps.world->size();
  const bool moe = c.is_moe();
  const bool sp = (ps.sequence_parallel() || moe) && t > 1;  // switched on for MoE
  const bool first = ps.is_first_stage(), last = ps.is_last_stage();
  const int64_t H = c.hidden_size, L = model.num_rank_layers();  // over this rank's chunks (vpp)
  const int v_chunks = model.num_chunks();
  int64_t Lmoe = 0;
  for (int k = 0; k < v_chunks; ++k) {
    const Qwen3Chunk& ch = model.chunk(k);
    for (int64_t l = ch.first_layer(); l < ch.first_layer() + ch.num_layers(); ++l) Lmoe += moe && c.is_moe_layer(l) ? 1 : 0;
  }
  const int64_t E = c.num_experts;
  int64_t tpv = 0, ppv = 0, cpv = 0;
  const int cp = ps.cp->size();
  const int64_t D = c.head_dim, Hq = c.num_attention_heads / t, Hkv = c.num_key_value_heads / t;  // per tp rank
  for (const auto& mb : mbs) {
    StageBatch b = model.prepare(mb);
    const int64_t T = b.T, Tl = model.hidden_rows(b);
    if (cp > 1) {
      // every attention layer of this rank, forward and backward, on the cp-local tokens T (all of them
      // under SP: the attention runs after the sequence all-gather), this rank's tp heads
      const int64_t per_layer =
          cp_comm_type == "a2a"
              ? parallel::UlyssesAttention::forward_bytes(cp, T, Hq, Hkv, D) +
                    parallel::UlyssesAttention::backward_bytes(cp, T, Hq, Hkv, D)
              : parallel::RingAttention::forward_bytes(cp, T, Hkv, D) + parallel::RingAttention::backward_bytes(cp, T, Hkv, D);
      cpv += L * per_layer;
      if (Lmoe > 0) cpv += ar((2 * E + 2) * Lmoe, 8, cp);  // router statistics over the cp shards
    }
    if (first) tpv += sp ? rs(Tl * H, t) + ag(Tl * H, t) : ar(T * H, 4, t);
    // a dense layer: attention and MLP each gather/scatter (or all-reduce) forward and backward;
    // an MoE layer only its attention (each tp rank routes its own SP shard)
    tpv += (L - Lmoe) * (sp ? 4 * (ag(Tl * H, t) + rs(Tl * H, t)) : 4 * ar(T * H, 4, t));
    tpv += Lmoe * 2 * (ag(Tl * H, t) + rs(Tl * H, t));
    if (sp && Lmoe > 0) tpv += ar((2 * E + 2) * Lmoe, 8, t);  // router statistics over the tp shards
    if (last) {
      if (sp) tpv += ag(Tl * H, t);
      const int64_t chunk = std::min<int64_t>(1024, T);
      for (int64_t c0 = 0; c0 < T; c0 += chunk) tpv += 3 * ar(std::min(chunk, T - c0), 4, t);
      tpv += sp ? rs(Tl * H, t) : ar(T * H, 4, t);
    }
    // every chunk boundary: sent forward by all chunks but the model's last, backward by all but its first
    ppv += (v_chunks - (last ? 1 : 0) + v_chunks - (first ? 1 : 0)) * Tl * H * 4;
  }
  for (const auto& prm : model.store().params())
    if (prm.tp_grad_allreduce) tpv += ar(prm.grad.numel(), 4, t);
  if (p > 1 && last) ppv += 8;  // loss broadcast from the last stage
  const int64_t m = static_cast<int64_t>(mbs.size());
  if (moe && p > 1) ppv += ar((2 * E + 3) * m, 8, p);  // each micro-batch's router statistics over the stages
  v.by_group["tp"] = tpv;
  v.by_group["pp"] = ppv;
  v.by_group["cp"] = cpv;
  int64_t emb = 0;
  if (c.tie_word_embeddings && p > 1 && (first || last))
    emb = ar(model.vocab_shard().local * H, 4, 2);
  v.by_group["embedding"] = emb;
  const int64_t N = model.store().expert_offset(), X = model.store().numel() - N;  // dense, expert regions
  // the Engine's counts (labelled tokens, tokens, sequences, their real tokens, ranks that refused their
  // micro-batches: 5 int64) and the loss (1 fp64)
  v.by_group["dp-cp"] = ar(5, 8, d) + ar(1, 8, d) + (distopt ? 2 * (d - 1) * 4 * N / d : ar(N, 4, d));
  v.by_group["world"] = ar(2, 8, w);  // the grad norm: dense and expert sums of squares (always both)
  if (w > d) v.by_group["world"] += ar(1, 8, w);  // ranks that refused their micro-batches, over the world
  if (moe) {
    const int dpn = ps.dp->size(), ep = ps.ep->size(), e = ps.edp->size();
    v.by_group["dp"] = ar(1, 8, dpn) + ar(E + 3, 8, dpn);  // micro-batch count, router totals
    const int etp = ps.etp ? ps.etp->size() : 1;
    if ((ep > 1 || etp > 1) && w > 1) v.by_group["world"] += ar(1, 8, w);  // the most micro-batches of any replica
    v.by_group["edp"] = distopt ? 2 * (e - 1) * 4 * X / e : ar(X, 4, e);
    const int stage = ps.pp->rank();
    if ((ep > 1 || etp > 1) && static_cast<int>(mbs.size()) > ps.pp->size() - stage) {
      // the routing of the micro-batches before the last pipeline slot's is gone
      v.routing_unknown = true;
    } else if (ep > 1 || etp > 1) {
      // the routing that happened (see the header): sent[r][j] rows of this rank's slots to ep
      // rank r in (micro-batch, MoE layer) j, got[r][j] rows ep rank r sent to this rank's experts
      const int64_t n = m * Lmoe;
      std::vector<int64_t> sent = routed_rows_per_ep_rank(model, mbs, ps, Lmoe), got(sent.size());
      std::vector<int64_t> counts(static_cast<size_t>(ep), n), displ(static_cast<size_t>(ep));
      for (int r = 0; r < ep; ++r) displ[static_cast<size_t>(r)] = r * n;
      ps.ep->all_to_all_v(sent.data(), counts, displ, got.data(), counts, displ, DType::I64);
      const int me = ps.ep->rank();
      int64_t rows = 0;
      std::vector<int64_t> block(static_cast<size_t>(n), 0);  // rows this rank's experts got over ep, per j
      for (int r = 0; r < ep; ++r)
        for (int64_t j = 0; j < n; ++j) {
          const size_t i = static_cast<size_t>(r * n + j);
          if (r != me) rows += sent[i] + got[i];
          block[static_cast<size_t>(j)] += got[i];
        }
      if (ep > 1) {
        v.expert_rows = v.own_slots = 0;
        for (size_t i = 0; i < sent.size(); ++i) v.own_slots += sent[i], v.expert_rows += got[i];
      }
      if (ep > 1) v.by_group["ep"] = Lmoe * m * (ep - 1) * (E / ep) * 8 + 2 * rows * H * 4;
      if (etp > 1) {
        // the padded etp block: the most rows any etp rank of the group holds, per j
        ps.etp->all_reduce(block.data(), n, dist::ReduceOp::Max);
        int64_t etpv = n * (etp - 1) * (E / ep) * 8;  // the per-local-expert counts
        for (int64_t b : block) etpv += 4 * (etp - 1) * b * H * 4;
        v.by_group["etp"] = etpv;
      }
    }
  }
  return v;
}

int bench(int argc, char** argv) {
  Opts o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() { return std::string(i + 1 < argc ? argv[++i] : ""); };
    // a whole positive integer, or an error naming the option (std::stoll alone said "stoll")
    auto num = [&]() {
      const std::string v = next();
      size_t used = 0;
      long long x = 0;
      try {
        x = std::stoll(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (v.empty() || used != v.size() || x < 1)
        throw Error("layout_bench: " + a + " needs a positive integer, got '" + v + "'");
      return static_cast<int64_t>(x);
    };
    if (a == "--tp") o.tp = static_cast<int>(num());
    else if (a == "--pp") o.pp = static_cast<int>(num());
    else if (a == "--vpp") o.vpp = static_cast<int>(num());
    else if (a == "--layers") o.layers = num();
    else if (a == "--dp") o.dp = static_cast<int>(num());
    else if (a == "--ep") o.ep = static_cast<int>(num());
    else if (a == "--etp") o.etp = static_cast<int>(num());
    else if (a == "--cp") o.cp = static_cast<int>(num());
    else if (a == "--cp-comm-type") o.cp_comm_type = next();
    else if (a == "--device") o.device = next();
    else if (a == "--sp") o.sp = true;
    else if (a == "--no-distopt") o.distopt = false;
    else if (a == "--overlap") o.overlap_grad = o.overlap_param = true;
    else if (a == "--overlap-grad-reduce") o.overlap_grad = true;
    else if (a == "--overlap-param-gather") o.overlap_param = true;
    else if (a == "--bucket-bytes") o.bucket_bytes = num();
    else if (a == "--check-volume") o.check = true;
    else if (a == "--no-baseline") o.baseline = false;
    else if (a == "--baseline-threads") o.baseline_threads = static_cast<int>(num());
    else if (a == "--config") o.config = next();
    else if (a == "--split") o.split = next();
    else if (a == "--recompute") o.recompute = next();
    else if (a == "--seq") o.seq = num();
    else if (a == "--rows") o.rows = num();
    else if (a == "--mbs") o.mbs = num();
    else if (a == "--steps") o.steps = num();
    else throw Error("layout_bench: unknown option " + a);
  }
  parallel::parse_cp_comm_type(o.cp_comm_type);  // p2p | a2a, else an error naming the value
  check(o.device == "cpu" || o.device == "cuda", "layout_bench: --device needs cpu or cuda, got '" + o.device + "'");
  MeshSizes ms;
  ms.tp = o.tp;
  ms.pp = o.pp;
  ms.vpp = o.vpp;
  ms.dp = o.dp;
  ms.ep = o.ep;
  ms.etp = o.etp;
  ms.cp = o.cp;
  ms.device_type = o.device;
  ms.sequence_parallel = o.sp;
  initialize({.global_device_mesh = DeviceMesh::from_sizes(ms)});
  auto& state = parallel_state();
  auto ps = std::shared_ptr<dist::ParallelState>(&state, [](dist::ParallelState*) {});
  ModelConfig cfg = make_config(o.config);
  if (o.layers > 0) cfg.num_hidden_layers = o.layers;
  const auto all_rows = make_rows(o.rows, cfg.vocab_size, o.seq);
  OptimizerConfig oc;
  oc.use_distributed_optimizer = o.distopt;
  oc.bucket_bytes = o.bucket_bytes;
  auto& world = *state.world;
  const bool root = world.rank() == 0;

  // Single-process baseline on the whole global batch (rank 0; the others wait).
  double single_s = 0;
  int single_threads = omp_get_max_threads();
  if (root && o.baseline) {
    const int launch_threads = omp_get_max_threads();
    if (o.baseline_threads > 0) omp_set_num_threads(o.baseline_threads);
    single_threads = omp_get_max_threads();
    auto ls = dist::make_single_process_state();
    Qwen3Model m1(cfg, ls);
    m1.init_random(1);
    Engine e1(m1);
    DistributedOptimizer opt1(m1.store(), ls, oc);
    auto mbs = split(all_rows, o.mbs);
    for (int64_t s = 0; s <= o.steps; ++s) {
      auto t0 = Clock::now();
      e1.forward_backward(mbs);
      opt1.step(1e-4);
      if (s > 0) single_s += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    single_s /= static_cast<double>(o.steps);
    omp_set_num_threads(launch_threads);
  }
  world.barrier();

  Qwen3ModelOptions mopts;
  mopts.pipeline_split = o.split;
  mopts.recompute_granularity = o.recompute;
  mopts.cp_comm_type = o.cp_comm_type;
  Qwen3Model model(cfg, ps, mopts);
  model.init_random(1);
  Engine eng(model);
  OptimizerConfig loc = oc;
  loc.overlap_grad_reduce = o.overlap_grad;
  loc.overlap_param_gather = o.overlap_param;
  DistributedOptimizer opt(model.store(), ps, loc);
  opt.set_kernels(model.kernels());  // AdamW and the norms on the model's device
  eng.set_optimizer(&opt);
  reset_peak_rss();  // the per-rank peak RSS printed covers the steps, not the model's init
  const int64_t dpn = state.mesh.dp_size(), k = state.coord.dp, B = o.rows;
  std::vector<EncodedRow> mine(all_rows.begin() + k * B / dpn, all_rows.begin() + (k + 1) * B / dpn);
  auto mbs = split(mine, o.mbs);
  std::vector<std::pair<std::string, dist::ProcessGroup*>> groups = {
      {"tp", state.tp.get()},   {"pp", state.pp.get()},       {"dp-cp", state.dp_cp.get()}, {"world", state.world.get()},
      {"dp", state.dp.get()},   {"cp", state.cp.get()},       {"tp-pp", state.tp_pp.get()}, {"embedding", state.embedding.get()},
      {"ep", state.ep.get()},   {"edp", state.edp.get()},     {"etp", state.etp.get()}};
  double layout_s = 0, bubble = 0;
  bool mismatch = false;
  Volume counted;
  for (int64_t s = 0; s <= o.steps; ++s) {
    for (auto& [n, g] : groups)
      if (g) g->reset_bytes_sent();
    world.barrier();
    auto t0 = Clock::now();
    // The last step is bracketed for an MPI profiling library (MPI_Pcontrol is a no-op without
    // one): tests/dist/mpi_count.cpp counts exactly this step's MPI traffic.
    if (s == o.steps) MPI_Pcontrol(1);
    StepResult r = eng.forward_backward(mbs);
    opt.step(1e-4);
    if (s == o.steps) MPI_Pcontrol(0);
    double el = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s == 0) {  // warm-up
      opt.reset_comm_stats();
      continue;
    }
    layout_s += el;
    bubble += r.times.compute_s > 0 ? r.times.comm_s / r.times.compute_s : 0;
    counted = Volume{};
    for (auto& [n, g] : groups)
      if (g) counted.by_group[n] += g->bytes_sent();
  }
  layout_s /= static_cast<double>(o.steps);
  bubble /= static_cast<double>(o.steps);
  Volume want = analytic(model, mbs, state, o.distopt, o.cp_comm_type);
  // groups not in the model must carry nothing
  for (auto& [n, b] : counted.by_group)
    if (!want.by_group.count(n)) want.by_group[n] = 0;
  std::string diff;
  for (auto& [n, b] : want.by_group)
    if (counted.by_group[n] != b && !(want.routing_unknown && (n == "ep" || n == "etp")))
      diff += " " + n + ": counted " + std::to_string(counted.by_group[n]) + " analytic " + std::to_string(b) + ";";
  mismatch = !diff.empty();
  if (want.routing_unknown) {
    if (o.check) diff += " ep/etp: not modelled (more micro-batches than pipeline slots; use a larger --mbs);";
    mismatch = o.check;
  }
  // one line per rank, printed in rank order
  double mx = layout_s;
  world.all_reduce_f64(&mx, 1, dist::ReduceOp::Max);
  // Time this rank spent blocked on the dp / expert-dp bucket collectives per step (gradient
  // reduction in finish_grad_sync, parameter all-gathers, MPI_Test progress): with the overlap
  // switches off this is the blocking communication time; on, what the passes did not hide.
  const CommOverlapStats& cs = opt.comm_stats();
  const double nst = static_cast<double>(o.steps);
  double wait[2] = {cs.total_s() / nst, cs.total_s() / nst};  // mean, max over ranks
  world.all_reduce_f64(&wait[0], 1, dist::ReduceOp::Sum);
  world.all_reduce_f64(&wait[1], 1, dist::ReduceOp::Max);
  wait[0] /= world.size();
  // Expert rows of this rank vs balanced routing (its own slots): the ratio of its expert GEMM
  // FLOPs to what `twinkle plan` counts (plan assumes balanced routing; etp 1).
  const double routed = want.own_slots > 0 ? static_cast<double>(want.expert_rows) / want.own_slots : 0;
  double routed_range[2] = {want.own_slots > 0 ? -routed : -1e300, routed};  // -min, max over ranks with experts
  world.all_reduce_f64(routed_range, 2, dist::ReduceOp::Max);
  std::string routed_note;
  if (want.own_slots > 0)
    routed_note = " | expert rows " + std::to_string(want.expert_rows) + " (balanced routing " +
                  std::to_string(want.own_slots) + ")";
  char line[2048];
  std::snprintf(line, sizeof line,
                "rank %d (tp %d pp %d cp %d dp %d ep %d etp %d): bytes/step %lld (tp %lld, pp %lld, cp %lld, embedding %lld, "
                "dp-cp %lld, world %lld, ep %lld, etp %lld, edp %lld) analytic %lld %s| stage bubble %.3f | step peak RSS %.1f MiB, "
                "saved activations %.2f MiB | params %lld elements (expert region %lld), AdamW state %lld elements"
                " | dp comm wait %.2f ms/step (grad %.2f, param %.2f, test %.2f; buckets early %lld/%lld, "
                "gathers in forward %lld/%lld)%s",
                world.rank(), state.coord.tp, state.coord.pp, state.coord.cp, state.coord.dp, state.coord.ep,
                state.coord.etp, static_cast<long long>(counted.total()), static_cast<long long>(counted.by_group["tp"]),
                static_cast<long long>(counted.by_group["pp"]), static_cast<long long>(counted.by_group["cp"]),
                static_cast<long long>(counted.by_group["embedding"]),
                static_cast<long long>(counted.by_group["dp-cp"]), static_cast<long long>(counted.by_group["world"]),
                static_cast<long long>(counted.by_group["ep"]),
                static_cast<long long>(counted.by_group["etp"]), static_cast<long long>(counted.by_group["edp"]),
                static_cast<long long>(want.total()),
                mismatch                ? ("MISMATCH:" + diff + " ").c_str()
                : want.routing_unknown ? "ok but ep/etp not modelled (more micro-batches than pipeline slots) "
                                       : "ok ",
                bubble, peak_rss_mib(),
                static_cast<double>(model.saved_activation_bytes()) / 1048576.0,
                static_cast<long long>(model.store().numel()),
                static_cast<long long>(model.store().numel() - model.store().expert_offset()),
                static_cast<long long>(opt.state_elements()), 1e3 * cs.total_s() / nst,
                1e3 * cs.grad_wait_s / nst, 1e3 * cs.param_wait_s / nst, 1e3 * cs.progress_s / nst,
                static_cast<long long>(cs.grad_buckets_early), static_cast<long long>(cs.grad_buckets),
                static_cast<long long>(cs.param_buckets_forward), static_cast<long long>(cs.param_buckets),
                routed_note.c_str());
  std::fflush(stdout);
  for (int r = 0; r < world.size(); ++r) {
    if (world.rank() == r) std::printf("%s\n", line), std::fflush(stdout);
    world.barrier();
  }
  int64_t nbad = mismatch ? 1 : 0;
  world.all_reduce(&nbad, 1);
  if (root) {
    const int p = state.pp->size();
    const double m = static_cast<double>(mbs.size());
    std::string counts;
    for (auto n : model.layer_split().count) counts += (counts.empty() ? "" : ",") + std::to_string(n);
    std::printf("layout tp=%d pp=%d vpp=%d cp=%d%s dp=%d ep=%d etp=%d%s device %s, config %s, %lld rows, micro-batch %lld, %s split [%s]: step %.4f s "
                "vs single process %.4f s at %d thread(s) (%.2fx); bubble theory (p-1)/(v*m) = %.3f\n",
                o.tp, o.pp, o.vpp, o.cp, o.cp > 1 ? (" (" + o.cp_comm_type + ")").c_str() : "", o.dp, o.ep, o.etp,
                o.sp ? " sp" : "", o.device.c_str(), o.config.c_str(), static_cast<long long>(o.rows),
                static_cast<long long>(o.mbs), o.split.c_str(), counts.c_str(), mx, single_s,
                single_threads, single_s > 0 ? mx / single_s : 0, (p - 1) / (static_cast<double>(o.vpp) * m));
    std::printf("dp communication %s: blocked %.2f ms/step mean over ranks, %.2f ms max (overlap_grad_reduce %s, "
                "overlap_param_gather %s, bucket %lld bytes)\n",
                o.overlap_grad || o.overlap_param ? "overlapped" : "synchronous", 1e3 * wait[0], 1e3 * wait[1],
                o.overlap_grad ? "on" : "off", o.overlap_param ? "on" : "off", static_cast<long long>(o.bucket_bytes));
    if (routed_range[1] > 0)
      std::printf("expert rows per rank / balanced routing (the expert GEMM FLOPs `twinkle plan` counts): %.3f .. %.3f\n",
                  -routed_range[0], routed_range[1]);
    if (o.check) std::printf("volume check: %s\n", nbad ? "FAILED" : "all ranks match the analytic volume");
  }
  return (o.check && nbad) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, bench); }
