// The tensor table (parallel/tensor_table.h, built by Qwen3Model from its layer types) against a
// tiny Hugging Face checkpoint whose tensor names are written out here from transformers'
// modeling_qwen3.py: loading it on every rank of a layout and putting each rank's shards back
// together with the table's shard specs gives every checkpoint tensor back bit for bit, for
// tp 1/2 (with and without sequence parallelism) x pp 1/2/3, tied and untied heads, with and
// without attention biases; single-process gather_state_dict returns the checkpoint in HF
// order; seeded init is the same full tensor for every layout; the optimizer flags follow
// Megatron's rules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/io/safetensors.h"
#include "twinkle/model/qwen3_flops.h"
#include "twinkle/model/qwen3_model.h"

using namespace twinkle;
namespace fs = std::filesystem;

namespace {

// A group that only knows its rank and size: building a model and loading a checkpoint
// communicate nothing, so every rank of a layout can be built in this one process.
class FakeGroup : public dist::ProcessGroup {
 public:
  FakeGroup(int rank, int size) : rank_(rank), size_(size), ranks_(static_cast<size_t>(size)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& global_ranks() const override { return ranks_; }
  const std::string& name() const override { return name_; }
  void all_reduce(void*, int64_t, DType, dist::ReduceOp) override { fail(); }
  void all_reduce_f64(double*, int64_t, dist::ReduceOp) override { fail(); }
  void all_gather(const void*, void*, int64_t, DType) override { fail(); }
  void reduce_scatter(const float*, float*, int64_t) override { fail(); }
  void all_to_all_v(const void*, const std::vector<int64_t>&, const std::vector<int64_t>&, void*,
                    const std::vector<int64_t>&, const std::vector<int64_t>&, DType) override {
    fail();
  }
  void broadcast(void*, int64_t, DType, int) override { fail(); }
  void send(const void*, int64_t, DType, int, int) override { fail(); }
  void recv(void*, int64_t, DType, int, int) override { fail(); }
  void barrier() override { fail(); }

 private:
  [[noreturn]] static void fail() { throw Error("FakeGroup: no communication expected"); }
  int rank_, size_;
  std::vector<int> ranks_;
  std::string name_ = "fake";
};

std::shared_ptr<dist::ParallelState> rank_state(int tp, int pp, bool sp, int tp_rank, int pp_rank) {
  MeshSizes ms;
  ms.tp = tp;
  ms.pp = pp;
  ms.sequence_parallel = sp;
  auto s = std::make_shared<dist::ParallelState>();
  s->mesh = DeviceMesh::from_sizes(ms);
  s->coord.tp = tp_rank;
  s->coord.pp = pp_rank;
  s->global_rank = s->mesh.rank_of(tp_rank, 0, 0, pp_rank);
  auto one = std::make_shared<FakeGroup>(0, 1);
  s->world = std::make_shared<FakeGroup>(s->global_rank, tp * pp);
  s->tp = std::make_shared<FakeGroup>(tp_rank, tp);
  s->pp = std::make_shared<FakeGroup>(pp_rank, pp);
  s->tp_pp = std::make_shared<FakeGroup>(s->global_rank, tp * pp);
  s->cp = s->dp = s->dp_cp = s->etp = s->ep = s->edp = one;
  if (pp_rank == 0 || pp_rank == pp - 1) s->embedding = std::make_shared<FakeGroup>(pp_rank == 0 ? 0 : 1, pp > 1 ? 2 : 1);
  return s;
}

ModelConfig tiny(bool tied, bool bias) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 300;  // padded to 512 under tp 2: rank 1 holds 44 real rows and 212 padding rows
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  c.attention_bias = bias;
  return c;
}

// The HF state dict of Qwen3ForCausalLM (transformers models/qwen3/modeling_qwen3.py), in order.
std::vector<std::pair<std::string, Shape>> hf_tensors(const ModelConfig& c) {
  const int64_t H = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim,
                I = c.intermediate_size, D = c.head_dim;
  std::vector<std::pair<std::string, Shape>> t;
  t.push_back({"model.embed_tokens.weight", {c.vocab_size, H}});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {H}});
    t.push_back({p + "self_attn.q_proj.weight", {q, H}});
    if (c.attention_bias) t.push_back({p + "self_attn.q_proj.bias", {q}});
    t.push_back({p + "self_attn.k_proj.weight", {kv, H}});
    if (c.attention_bias) t.push_back({p + "self_attn.k_proj.bias", {kv}});
    t.push_back({p + "self_attn.v_proj.weight", {kv, H}});
    if (c.attention_bias) t.push_back({p + "self_attn.v_proj.bias", {kv}});
    t.push_back({p + "self_attn.o_proj.weight", {H, q}});
    if (c.attention_bias) t.push_back({p + "self_attn.o_proj.bias", {H}});
    t.push_back({p + "self_attn.q_norm.weight", {D}});
    t.push_back({p + "self_attn.k_norm.weight", {D}});
    t.push_back({p + "post_attention_layernorm.weight", {H}});
    t.push_back({p + "mlp.gate_proj.weight", {I, H}});
    t.push_back({p + "mlp.up_proj.weight", {I, H}});
    t.push_back({p + "mlp.down_proj.weight", {H, I}});
  }
  t.push_back({"model.norm.weight", {H}});
  if (!c.tie_word_embeddings) t.push_back({"lm_head.weight", {c.vocab_size, H}});
  return t;
}

// Writes a checkpoint of distinct random values (several shards); returns the tensors.
std::vector<std::pair<std::string, Tensor>> write_checkpoint(const ModelConfig& c, const std::string& dir) {
  std::mt19937 g(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, shape] : hf_tensors(c)) {
    Tensor t = Tensor::zeros(shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(g);
    out.emplace_back(name, t);
  }
  fs::remove_all(dir);
  save_checkpoint_dir(dir, out, /*max_shard_bytes=*/20000);
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.f32(), b.f32(), a.nbytes()) == 0;
}

struct Layout {
  int tp, pp;
  bool sp;
};

// Loads (or inits) every rank of a layout and reassembles the full HF tensors from the shards.
std::map<std::string, Tensor> reassemble(const ModelConfig& c, Layout L, const CheckpointReader* ck, uint64_t seed,
                                         std::set<std::string>* tied_copies = nullptr) {
  std::map<std::string, Tensor> full;
  for (int s = 0; s < L.pp; ++s)
    for (int r = 0; r < L.tp; ++r) {
      Qwen3Model m(c, rank_state(L.tp, L.pp, L.sp, r, s));
      if (ck) m.load_checkpoint(*ck);
      else m.init_random(seed);
      for (const auto& e : m.table().entries()) {
        if (e.param == parallel::kNoParam) continue;
        EXPECT_EQ(e.stage, s) << e.name;
        const Param& p = m.store().params()[e.param];
        EXPECT_EQ(p.shape, e.local) << e.name;
        if (!e.saved) {  // the last stage's tied copy: the same values as the embedding
          if (tied_copies) tied_copies->insert(e.name);
          continue;
        }
        auto it = full.find(e.name);
        if (it == full.end()) it = full.emplace(e.name, Tensor::full(e.full, std::nanf(""))).first;
        shard_into_full(e.shard, e.local, p.data.f32(), it->second.f32());
        // vocab padding rows are zero and never loaded
        if (e.shard.split_dim == 0 && e.shard.valid < e.local[0]) {
          const int64_t cols = e.local.size() > 1 ? e.local[1] : 1;
          for (int64_t i = e.shard.valid * cols; i < p.data.numel(); ++i) EXPECT_EQ(p.data.f32()[i], 0.0f) << e.name;
        }
      }
    }
  return full;
}

}  // namespace

TEST(TensorTable, CheckpointRoundTripsOnEveryLayout) {
  const std::string dir = (fs::temp_directory_path() / ("twinkle_table_" + std::to_string(::getpid()))).string();
  for (bool tied : {true, false})
    for (bool bias : {false, true}) {
      const ModelConfig c = tiny(tied, bias);
      auto ref = write_checkpoint(c, dir);
      CheckpointReader ck = CheckpointReader::open_dir(dir);
      for (Layout L : {Layout{1, 1, false}, Layout{2, 1, false}, Layout{2, 1, true}, Layout{1, 2, false},
                       Layout{2, 2, true}, Layout{1, 3, false}, Layout{2, 3, false}}) {
        SCOPED_TRACE("tied " + std::to_string(tied) + " bias " + std::to_string(bias) + " tp " + std::to_string(L.tp) +
                     " pp " + std::to_string(L.pp) + " sp " + std::to_string(L.sp));
        std::set<std::string> copies;
        auto full = reassemble(c, L, &ck, 0, &copies);
        ASSERT_EQ(full.size(), ref.size());  // every checkpoint tensor, nothing else
        for (const auto& [name, t] : ref) {
          ASSERT_TRUE(full.count(name)) << name;
          EXPECT_TRUE(same_bits(full.at(name), t)) << name;
        }
        // a tied head on its own stage is a copy of embed_tokens (pp > 1), else shared
        EXPECT_EQ(copies.size(), tied && L.pp > 1 ? 1u : 0u);
      }
    }
  fs::remove_all(dir);
}

TEST(TensorTable, TiedModelLoadsFromLmHeadName) {
  // A tied checkpoint written by a tool that kept only lm_head.weight.
  const std::string dir = (fs::temp_directory_path() / ("twinkle_table_lm_" + std::to_string(::getpid()))).string();
  ModelConfig c = tiny(true, false);
  auto ref = write_checkpoint(c, dir);
  for (auto& [n, t] : ref)
    if (n == "model.embed_tokens.weight") n = "lm_head.weight";
  fs::remove_all(dir);
  save_checkpoint_dir(dir, ref, 1 << 30);
  CheckpointReader ck = CheckpointReader::open_dir(dir);
  auto full = reassemble(c, Layout{2, 2, false}, &ck, 0);
  EXPECT_TRUE(same_bits(full.at("model.embed_tokens.weight"), ref.front().second));
  fs::remove_all(dir);
}

// A config.json that describes fewer layers than the checkpoint holds used to load silently,
// dropping the extra layers (and the next save wrote the truncated model); transformers names the
// unused tensors. Zero-element filler and a tied model's lm_head copy are not "unused".
TEST(TensorTable, UnusedCheckpointTensorsAreListed) {
  const std::string dir = (fs::temp_directory_path() / ("twinkle_table_u_" + std::to_string(::getpid()))).string();
  for (bool tied : {true, false}) {
    const ModelConfig c = tiny(tied, false);  // 3 layers
    auto ref = write_checkpoint(c, dir);
    ModelConfig two = c;
    two.num_hidden_layers = 2;
    Qwen3Model full_model(c, dist::make_single_process_state());
    Qwen3Model short_model(two, dist::make_single_process_state());
    CheckpointReader ck = CheckpointReader::open_dir(dir);
    EXPECT_TRUE(full_model.unused_checkpoint_tensors(ck).empty());
    std::vector<std::string> want;
    for (const auto& [name, t] : ref)
      if (name.rfind("model.layers.2.", 0) == 0) want.push_back(name);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(short_model.unused_checkpoint_tensors(ck), want);
    // on a pp 2 layout every rank sees the same list (the table holds every stage's tensors)
    for (int s = 0; s < 2; ++s)
      EXPECT_EQ(Qwen3Model(two, rank_state(2, 2, false, 1, s)).unused_checkpoint_tensors(ck), want) << s;
    // extras: a renamed tensor is listed; an empty tensor and (tied) a copy of the embedding are not
    ref.emplace_back("model.layers.0.mlp.gate_proj.weight_renamed", Tensor::zeros({2, 2}));
    ref.emplace_back("model.empty_filler", Tensor::zeros({4, 0}));
    if (tied) ref.emplace_back("lm_head.weight", ref.front().second);
    fs::remove_all(dir);
    save_checkpoint_dir(dir, ref, 1 << 30);
    EXPECT_EQ(full_model.unused_checkpoint_tensors(CheckpointReader::open_dir(dir)),
              std::vector<std::string>{"model.layers.0.mlp.gate_proj.weight_renamed"});
  }
  fs::remove_all(dir);
}

TEST(TensorTable, GatherStateDictReturnsTheCheckpointInHfOrder) {
  const std::string dir = (fs::temp_directory_path() / ("twinkle_table_g_" + std::to_string(::getpid()))).string();
  for (bool tied : {true, false}) {
    const ModelConfig c = tiny(tied, true);
    auto ref = write_checkpoint(c, dir);
    Qwen3Model m(c, dist::make_single_process_state());
    m.load_checkpoint(CheckpointReader::open_dir(dir));
    auto got = m.gather_state_dict();
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(got[i].first, ref[i].first);
      EXPECT_TRUE(same_bits(got[i].second, ref[i].second)) << ref[i].first;
    }
    int64_t n = 0;
    for (auto& [name, t] : ref) n += t.numel();
    EXPECT_EQ(m.num_parameters(), n);
  }
  fs::remove_all(dir);
}

TEST(TensorTable, SeededInitIsTheSameOnEveryLayout) {
  const ModelConfig c = tiny(false, true);
  auto one = reassemble(c, Layout{1, 1, false}, nullptr, 17);
  auto split = reassemble(c, Layout{2, 3, true}, nullptr, 17);
  ASSERT_EQ(one.size(), split.size());
  for (const auto& [name, t] : one) EXPECT_TRUE(same_bits(split.at(name), t)) << name;
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(one.at("model.norm.weight").f32()[i], 1.0f);                     // norms: ones
    EXPECT_EQ(one.at("model.layers.0.self_attn.o_proj.bias").f32()[i], 0.0f);  // biases: zeros
  }
}

TEST(TensorTable, OptimizerFlagsFollowMegatron) {
  const ModelConfig c = tiny(true, true);
  Qwen3Model m(c, rank_state(2, 1, true, 1, 0));  // tp 2, sequence parallel, tp rank 1
  std::map<std::string, const parallel::TensorEntry*> by;
  for (const auto& e : m.table().entries()) by[e.name] = &e;
  auto flags = [&](const std::string& n) {
    const auto* e = by.at(n);
    return std::vector<bool>{e->weight_decay, e->tp_duplicate, e->tp_grad_allreduce};
  };
  using V = std::vector<bool>;  // {decay, tp-duplicate, tp-partial gradient}
  EXPECT_EQ(flags("model.embed_tokens.weight"), (V{true, false, false}));
  EXPECT_EQ(flags("model.layers.0.input_layernorm.weight"), (V{false, true, true}));  // SP: token-partial
  EXPECT_EQ(flags("model.layers.0.self_attn.q_proj.weight"), (V{true, false, false}));
  EXPECT_EQ(flags("model.layers.0.self_attn.q_proj.bias"), (V{false, false, false}));  // split with its heads
  EXPECT_EQ(flags("model.layers.0.self_attn.o_proj.bias"), (V{false, true, true}));    // added after the reduction
  EXPECT_EQ(flags("model.layers.0.self_attn.q_norm.weight"), (V{false, true, true}));  // own heads only
  EXPECT_EQ(flags("model.layers.2.mlp.down_proj.weight"), (V{true, false, false}));
  EXPECT_EQ(flags("model.norm.weight"), (V{false, true, true}));
  // shard specs of tp rank 1
  EXPECT_EQ(by.at("model.layers.0.self_attn.k_proj.weight")->shard.offset, 8);  // rows 8..15 of [16, 16]
  EXPECT_EQ(by.at("model.layers.0.mlp.down_proj.weight")->shard.split_dim, 1);
  EXPECT_EQ(by.at("model.layers.0.mlp.down_proj.weight")->shard.offset, 12);    // cols 12..23 of [16, 24]
  EXPECT_EQ(by.at("model.embed_tokens.weight")->shard.offset, 256);
  EXPECT_EQ(by.at("model.embed_tokens.weight")->shard.valid, 44);
  // gate then up adjacent in the flat buffer (one [2*I/tp, H] block for a fused GEMM)
  const Param& gate = m.store().params()[by.at("model.layers.1.mlp.gate_proj.weight")->param];
  const Param& up = m.store().params()[by.at("model.layers.1.mlp.up_proj.weight")->param];
  EXPECT_EQ(up.flat_offset, gate.flat_offset + gate.data.numel());
  // without sequence parallelism only the per-head norms are tp-partial
  Qwen3Model m2(c, rank_state(2, 1, false, 0, 0));
  for (const auto& e : m2.table().entries())
    if (e.name == "model.layers.0.input_layernorm.weight" || e.name == "model.layers.0.self_attn.o_proj.bias") {
      EXPECT_FALSE(e.tp_grad_allreduce) << e.name;
    }
}

// Qwen3-MoE on tp 2 x dp 2 with ep 2 (the ep groups are the tp groups, expert-dp the dp
// groups, as in megatron/core/parallel_state.py): each rank holds exactly its ep rank's experts, in
// the expert region of its ParamStore after every dense parameter (each region divisible by its
// ZeRO group); the router is tp-replicated with a tp-partial gradient (SP), the experts carry no
// tp flag (reduced over expert-dp instead); loading a checkpoint on every rank and putting the
// experts back together from their owners gives every tensor back bit for bit.
namespace {

ModelConfig tiny_moe() {
  ModelConfig c = tiny(false, false);
  c.model_type = "qwen3_moe";
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 8;
  c.mlp_only_layers = {1};
  return c;
}

std::shared_ptr<dist::ParallelState> moe_rank_state(int tp, int dp, int ep, int rank) {
  MeshSizes ms;
  ms.tp = tp;
  ms.dp = dp;
  ms.ep = ep;
  ms.sequence_parallel = tp > 1;
  auto s = std::make_shared<dist::ParallelState>();
  s->mesh = DeviceMesh::from_sizes(ms);
  s->global_rank = rank;
  s->coord = s->mesh.coord(rank);
  auto one = std::make_shared<FakeGroup>(0, 1);
  s->world = std::make_shared<FakeGroup>(rank, tp * dp);
  s->tp = s->tp_pp = std::make_shared<FakeGroup>(s->coord.tp, tp);
  s->dp = s->dp_cp = std::make_shared<FakeGroup>(s->coord.dp, dp);
  s->ep = std::make_shared<FakeGroup>(s->coord.ep, ep);
  s->edp = std::make_shared<FakeGroup>(s->coord.edp, s->mesh.edp_size());
  s->cp = s->pp = s->etp = s->embedding = one;
  return s;
}

}  // namespace

TEST(TensorTable, ExpertsShardOverEpInTheirOwnRegion) {
  const ModelConfig c = tiny_moe();
  // the checkpoint: the dense tensors with layer 1's MLP, plus router and experts of layers 0, 2
  std::vector<std::pair<std::string, Tensor>> ck_tensors;
  {
    std::mt19937 g(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto [name, shape] : hf_tensors(c)) {
      const bool moe_mlp = name.find(".mlp.") != std::string::npos && name.find("layers.1.") == std::string::npos;
      if (moe_mlp) continue;
      Tensor t = Tensor::zeros(shape);
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(g);
      ck_tensors.emplace_back(name, t);
    }
    for (int l : {0, 2}) {
      const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
      std::vector<std::pair<std::string, Shape>> moe = {{p + "gate.weight", {4, 16}}};
      for (int e = 0; e < 4; ++e)
        for (const char* j : {"gate_proj", "up_proj", "down_proj"})
          moe.push_back({p + "experts." + std::to_string(e) + "." + j + ".weight",
                         std::string(j) == "down_proj" ? Shape{16, 8} : Shape{8, 16}});
      for (auto& [name, shape] : moe) {
        Tensor t = Tensor::zeros(shape);
        for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(g);
        ck_tensors.emplace_back(name, t);
      }
    }
  }
  const std::string dir = (fs::temp_directory_path() / ("twinkle_moe_table_" + std::to_string(getpid()))).string();
  fs::remove_all(dir);
  save_checkpoint_dir(dir, ck_tensors, /*max_shard_bytes=*/20000);
  const CheckpointReader ck = CheckpointReader::open_dir(dir);
  std::map<std::string, Tensor> experts;
  for (int rank = 0; rank < 4; ++rank) {
    auto ps = moe_rank_state(2, 2, 2, rank);
    Qwen3Model m(c, ps);
    m.load_checkpoint(ck);
    const int ep_rank = ps->coord.ep;
    EXPECT_EQ(ep_rank, ps->coord.tp) << "with etp = 1 the ep groups are the tp groups";
    const ParamStore& st = m.store();
    EXPECT_EQ(st.expert_offset() % (64 * 2), 0);
    EXPECT_EQ((st.numel() - st.expert_offset()) % (64 * 2), 0);
    int held = 0;
    for (const auto& e : m.table().entries()) {
      if (e.name.find(".mlp.gate.weight") != std::string::npos) {
        EXPECT_TRUE(e.tp_duplicate && e.tp_grad_allreduce && !e.expert) << e.name;
      }
      if (!e.expert) {
        if (e.param != parallel::kNoParam) {
          EXPECT_LT(st.params()[e.param].flat_offset, st.expert_offset()) << e.name;
        }
        continue;
      }
      EXPECT_FALSE(e.tp_duplicate || e.tp_grad_allreduce) << e.name;
      const int owner = std::stoi(e.name.substr(e.name.find("experts.") + 8)) / 2;  // 2 experts per ep rank
      EXPECT_EQ(e.ep_owner, owner) << e.name;
      EXPECT_EQ(e.param != parallel::kNoParam, owner == ep_rank) << e.name << " on rank " << rank;
      if (e.param == parallel::kNoParam) continue;
      ++held;
      const Param& p = st.params()[e.param];
      EXPECT_GE(p.flat_offset, st.expert_offset()) << e.name;
      experts[e.name] = p.data.clone();
    }
    EXPECT_EQ(held, 2 * 2 * 3);  // 2 MoE layers x 2 local experts x 3 projections
  }
  int n = 0;
  for (const auto& [name, t] : ck_tensors) {
    if (name.find(".experts.") == std::string::npos) continue;
    ++n;
    ASSERT_TRUE(experts.count(name)) << name;
    EXPECT_TRUE(same_bits(experts.at(name), t)) << name;
  }
  EXPECT_EQ(n, 2 * 4 * 3);
  fs::remove_all(dir);
}

TEST(PipelineSplit, EvenCustomAndErrors) {
  auto s = parallel::split_layers(7, 3);
  EXPECT_EQ(s.count, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(s.first, (std::vector<int64_t>{0, 3, 5}));
  EXPECT_EQ(s.stage_of(0), 0);
  EXPECT_EQ(s.stage_of(4), 1);
  EXPECT_EQ(s.stage_of(6), 2);
  EXPECT_THROW(s.stage_of(7), Error);
  EXPECT_EQ(parallel::split_layers(7, 2, {1, 6}).first, (std::vector<int64_t>{0, 1}));
  EXPECT_THROW(parallel::split_layers(2, 4), Error);          // pp larger than the layers
  EXPECT_THROW(parallel::split_layers(7, 2, {3, 3}), Error);  // sums to 6
  EXPECT_THROW(parallel::split_layers(7, 2, {7, 0}), Error);  // an empty stage
  EXPECT_THROW(parallel::split_layers(7, 2, {7}), Error);     // one count for two stages
}

// The model's default split is the balanced one over model/qwen3_flops.h costs; "even" and a
// custom layers_per_stage override it.
TEST(PipelineSplit, ModelDefaultIsBalancedOverFlops) {
  ModelConfig c = tiny(true, false);
  c.num_hidden_layers = 4;
  c.vocab_size = 4096;  // lm head 2*4096*H per token: heavier than one layer
  const int64_t layer = qwen3_layer_matmul_flops(c, 0), head = qwen3_head_matmul_flops(c);
  ASSERT_GT(head, layer);
  Qwen3Model m(c, rank_state(1, 2, false, 0, 0));
  EXPECT_EQ(m.layer_split().count, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(m.num_local_layers(), 3);
  Qwen3ModelOptions even;
  even.pipeline_split = "even";
  EXPECT_EQ(Qwen3Model(c, rank_state(1, 2, false, 0, 1), even).layer_split().count, (std::vector<int64_t>{2, 2}));
  Qwen3ModelOptions custom;
  custom.layers_per_stage = {1, 3};
  EXPECT_EQ(Qwen3Model(c, rank_state(1, 2, false, 0, 0), custom).layer_split().count, (std::vector<int64_t>{1, 3}));
  Qwen3ModelOptions bad;
  bad.pipeline_split = "uniform";
  EXPECT_THROW(Qwen3Model(c, rank_state(1, 2, false, 0, 0), bad), Error);
}

// Hand-computed per-token forward matmul FLOPs of the real configs (config.json of Qwen3-0.6B and
// Qwen3-30B-A3B).
TEST(PipelineSplit, Qwen3FlopsOfRealConfigs) {
  ModelConfig c;
  c.model_type = "qwen3";
  c.hidden_size = 1024; c.num_attention_heads = 16; c.num_key_value_heads = 8; c.head_dim = 128;
  c.intermediate_size = 3072; c.vocab_size = 151936; c.num_hidden_layers = 28;
  // 2*1024*(2048+2*1024) + 2*2048*1024 + 6*1024*3072
  EXPECT_EQ(qwen3_layer_matmul_flops(c, 0), 31'457'280);
  EXPECT_EQ(qwen3_head_matmul_flops(c), 311'164'928);
  EXPECT_DOUBLE_EQ(qwen3_attention_flops(c, 512), 4.0 * 2048 * 512);
  ModelConfig m;
  m.model_type = "qwen3_moe";
  m.hidden_size = 2048; m.num_attention_heads = 32; m.num_key_value_heads = 4; m.head_dim = 128;
  m.num_experts = 128; m.num_experts_per_tok = 8; m.moe_intermediate_size = 768; m.intermediate_size = 6144;
  m.num_hidden_layers = 48; m.vocab_size = 151936;
  // attention 2*2048*(4096+1024) + 2*4096*2048, router 2*2048*128, experts 2*8*3*2048*768
  EXPECT_EQ(qwen3_layer_matmul_flops(m, 0), 37'748'736 + 524'288 + 75'497'472);
  EXPECT_EQ(qwen3_stage_costs(m).layer.size(), 48u);
}
