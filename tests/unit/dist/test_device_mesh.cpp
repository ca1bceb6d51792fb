// DeviceMesh layout against Megatron-core's documented examples
// (megatron/core/parallel_state.py, initialize_model_parallel docstring) and the MoE
// recipes' meshes (examples/moe_recipe.cpp dp2 tp2 pp2 ep2, examples/moe_cp_recipe.cpp tp2 pp2 cp2 ep2);
// LocalProcessGroup and make_single_process_state.
#include <gtest/gtest.h>

#include <set>

#include "twinkle/core/error.h"
#include "twinkle/dist/device_mesh.h"
#include "twinkle/dist/parallel_state.h"

using twinkle::DeviceMesh;
using twinkle::MeshSizes;
using G = std::vector<std::vector<int>>;

static DeviceMesh mesh(int dp, int tp, int pp, int cp = 1, int ep = 1, int etp = 1) {
  MeshSizes s;
  s.dp = dp;
  s.tp = tp;
  s.pp = pp;
  s.cp = cp;
  s.ep = ep;
  s.etp = etp;
  return DeviceMesh::from_sizes(s);
}

static std::string error_of(const MeshSizes& s) {
  try {
    DeviceMesh::from_sizes(s);
  } catch (const twinkle::Error& e) {
    return e.what();
  }
  return "";
}

// Megatron docstring: 16 GPUs, tensor_model_parallel_size 2, pipeline 4 -> dp 2.
TEST(DeviceMesh, MegatronDocstring16Gpus) {
  auto m = mesh(2, 2, 4);
  EXPECT_EQ(m.world_size(), 16);
  EXPECT_EQ(m.groups("tp"), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(m.groups("pp"), (G{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(m.groups("dp"), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  // model-parallel groups (tp x pp): [0,1,4,5,8,9,12,13], [2,3,6,7,10,11,14,15]
  EXPECT_EQ(m.groups("tp-pp"), (G{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  // embedding: first and last stage of each pipeline
  EXPECT_EQ(m.groups("embedding"), (G{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(m.group_of("embedding", 4), std::vector<int>{});
  EXPECT_EQ(m.groups("world"), (G{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}));
  EXPECT_EQ(m.describe(), "pp=4 x dp=2 x tp=2");
}

// Megatron docstring with context parallel: 16 GPUs, tp 2, cp 2, pp 2 -> dp 2.
TEST(DeviceMesh, MegatronContextParallelExample) {
  auto m = mesh(2, 2, 2, 2);
  EXPECT_EQ(m.groups("cp"), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
  EXPECT_EQ(m.groups("dp"), (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
  EXPECT_EQ(m.groups("dp-cp"), (G{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  auto c = m.coord(13);  // 13 = 1 + 2*(0 + 2*(1 + 2*1))
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.cp, 0);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(m.rank_of(1, 0, 1, 1), 13);
  for (int r = 0; r < 16; ++r) {
    auto k = m.coord(r);
    EXPECT_EQ(m.rank_of(k.tp, k.cp, k.dp, k.pp), r);
  }
}

// MoE recipe: dp2 tp2 pp2 ep2 (etp 1) -> edp = 8 / (1*2*2) = 2.
TEST(DeviceMesh, MoeRecipeDp2Tp2Pp2Ep2) {
  auto m = mesh(2, 2, 2, 1, 2);
  EXPECT_EQ(m.edp_size(), 2);
  EXPECT_EQ(m.groups("ep"), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(m.groups("edp"), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(m.groups("etp"), (G{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(m.groups("tp"), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(m.groups("dp"), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(m.groups("pp"), (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(m.describe(), "pp=2 x dp=2 x tp=2 (experts: ep=2 x etp=1 x edp=2)");
  auto c = m.coord(6);  // expert grid: 6 = ep 0 + 2*(edp 1 + 2*pp 1)
  EXPECT_EQ(c.ep, 0);
  EXPECT_EQ(c.edp, 1);
  EXPECT_EQ(c.pp, 1);
  EXPECT_EQ(m.expert_rank_of(0, 0, 1, 1), 6);
}

// MoE recipe: dp1 tp2 pp2 cp2 ep2 -> EP groups = TP groups, expert-DP groups = CP groups.
TEST(DeviceMesh, MoeRecipeTp2Pp2Cp2Ep2) {
  auto m = mesh(1, 2, 2, 2, 2);
  EXPECT_EQ(m.groups("ep"), m.groups("tp"));
  EXPECT_EQ(m.groups("edp"), m.groups("cp"));
  EXPECT_EQ(m.groups("cp"), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(m.groups("ep"), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

// Expert tensor parallel: etp fastest, then ep, then edp, then pp.
TEST(DeviceMesh, ExpertTensorParallel) {
  auto m = mesh(4, 2, 1, 1, 2, 2);  // world 8, edp = 8/(2*2*1) = 2
  EXPECT_EQ(m.groups("etp"), (G{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(m.groups("ep"), (G{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(m.groups("edp"), (G{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

// Every kind of group partitions the world (embedding: a subset), and group_of agrees.
TEST(DeviceMesh, GroupsPartitionTheWorld) {
  for (auto m : {mesh(2, 2, 2), mesh(3, 1, 2, 2, 3), mesh(1, 4, 3, 1, 2, 2), mesh(5, 1, 1)}) {
    for (const auto& name : DeviceMesh::group_names()) {
      std::set<int> seen;
      for (const auto& g : m.groups(name)) {
        for (int r : g) {
          EXPECT_TRUE(seen.insert(r).second) << name << " rank " << r;
          EXPECT_EQ(m.group_of(name, r), g) << name;
        }
      }
      if (name != "embedding") {
        EXPECT_EQ(static_cast<int>(seen.size()), m.world_size()) << name;
      }
    }
  }
}

TEST(DeviceMesh, PipelineOfOneHasOneRankEmbeddingGroups) {
  auto m = mesh(2, 2, 1);
  EXPECT_EQ(m.groups("embedding"), (G{{0}, {1}, {2}, {3}}));
}

TEST(DeviceMesh, ValidationNamesTheField) {
  MeshSizes s;
  s.tp = 0;
  EXPECT_NE(error_of(s).find("MeshSizes.tp = 0"), std::string::npos) << error_of(s);
  s = {};
  s.dp = -1;
  EXPECT_NE(error_of(s).find("MeshSizes.dp"), std::string::npos);
  s = {};
  s.etp = 0;
  EXPECT_NE(error_of(s).find("MeshSizes.etp"), std::string::npos);
  s = {};
  s.dp = 3;
  s.ep = 2;
  EXPECT_NE(error_of(s).find("MeshSizes.ep = 2"), std::string::npos) << error_of(s);
  s = {};
  s.device_type = "tpu";
  EXPECT_NE(error_of(s).find("device_type 'tpu'"), std::string::npos);
  for (const char* d : {"cpu", "cuda", "npu"}) {
    s.device_type = d;
    EXPECT_EQ(error_of(s), "");
  }
  auto m = mesh(2, 2, 2);
  EXPECT_THROW(m.groups("bogus"), twinkle::Error);
  EXPECT_THROW(m.coord(8), twinkle::Error);
  EXPECT_THROW(m.rank_of(2, 0, 0, 0), twinkle::Error);
  EXPECT_EQ(mesh(1, 1, 1).describe(), "dp=1");
}

TEST(LocalProcessGroup, CollectivesAreLocal) {
  auto g = twinkle::dist::make_local_group("tp", 3);
  EXPECT_EQ(g->size(), 1);
  EXPECT_EQ(g->rank(), 0);
  EXPECT_EQ(g->global_ranks(), std::vector<int>{3});
  float buf[3] = {1, 2, 3};
  g->all_reduce(buf, 3, twinkle::DType::F32);
  EXPECT_EQ(buf[2], 3.f);
  float out[3] = {};
  g->all_gather(buf, out, 3, twinkle::DType::F32);
  EXPECT_EQ(out[1], 2.f);
  float rs[3] = {};
  g->reduce_scatter(buf, rs, 3);
  EXPECT_EQ(rs[0], 1.f);
  int64_t a2a[4] = {};
  int64_t src[4] = {7, 8, 9, 10};
  g->all_to_all_v(src, {2}, {1}, a2a, {2}, {2}, twinkle::DType::I64);
  EXPECT_EQ(a2a[2], 8);
  EXPECT_EQ(a2a[3], 9);
  g->broadcast(buf, 3, twinkle::DType::F32, 0);
  EXPECT_THROW(g->broadcast(buf, 3, twinkle::DType::F32, 1), twinkle::Error);
  EXPECT_THROW(g->send(buf, 3, twinkle::DType::F32, 0, 0), twinkle::Error);
  EXPECT_THROW(g->recv(buf, 3, twinkle::DType::F32, 0, 0), twinkle::Error);
  float sr[3] = {};
  g->send_recv(buf, 3, 0, sr, 3, 0, twinkle::DType::F32, 5);
  EXPECT_EQ(sr[1], 2.f);
  g->send_recv(buf, 0, 0, sr, 0, -1, twinkle::DType::F32, 5);  // both halves skipped
  EXPECT_THROW(g->send_recv(buf, 3, 0, sr, 0, 0, twinkle::DType::F32, 5), twinkle::Error);
  EXPECT_THROW(g->all_reduce(buf, 3, twinkle::DType::BF16), twinkle::Error);
  g->barrier();
  EXPECT_EQ(g->bytes_sent(), 0);
}

TEST(ParallelState, SingleProcess) {
  auto s = twinkle::dist::make_single_process_state();
  EXPECT_EQ(s->mesh.world_size(), 1);
  for (auto* g : {&s->world, &s->tp, &s->cp, &s->dp, &s->pp, &s->dp_cp, &s->tp_pp, &s->embedding, &s->etp, &s->ep,
                  &s->edp}) {
    ASSERT_TRUE(*g);
    EXPECT_EQ((*g)->size(), 1);
  }
  EXPECT_EQ(s->dp_cp->name(), "dp-cp");
  EXPECT_TRUE(s->is_first_stage());
  EXPECT_TRUE(s->is_last_stage());
  EXPECT_TRUE(s->in_embedding_group());
  // Without MPI a multi-rank mesh cannot be built.
  EXPECT_THROW(twinkle::dist::make_mpi_state(mesh(2, 1, 1)), twinkle::Error);
}
