// Expert grid vs model checks: the errors, raised before training, name the numbers.
#include <gtest/gtest.h>

#include <string>

#include "twinkle/core/error.h"
#include "twinkle/parallel/expert_layout.h"

using twinkle::DeviceMesh;
using twinkle::MeshSizes;
using twinkle::parallel::check_expert_layout;
using twinkle::parallel::check_moe_loss_options;

namespace {

DeviceMesh mesh(int dp, int tp, int pp, int ep, int etp = 1) {
  MeshSizes s;
  s.dp = dp;
  s.tp = tp;
  s.pp = pp;
  s.ep = ep;
  s.etp = etp;
  return DeviceMesh::from_sizes(s);
}

std::string error_of(const DeviceMesh& m, bool moe, int64_t experts) {
  try {
    check_expert_layout(m, moe, experts, "models/x");
  } catch (const twinkle::Error& e) {
    return e.what();
  }
  return "";
}

TEST(ExpertLayout, ValidLayoutsPass) {
  EXPECT_EQ(error_of(mesh(1, 1, 1, 1), false, 0), "");          // dense, one process
  EXPECT_EQ(error_of(mesh(2, 2, 2, 2), true, 128), "");         // the recipe: 30B-A3B on dp2 tp2 pp2 ep2
  EXPECT_EQ(error_of(mesh(4, 1, 1, 4), true, 8), "");
  EXPECT_EQ(error_of(mesh(1, 1, 1, 1), true, 6), "");           // ep 1 takes any expert count
}

TEST(ExpertLayout, DenseModelWithEp) {
  const auto e = error_of(mesh(2, 1, 1, 2), false, 0);
  EXPECT_NE(e.find("ep = 2 needs a MoE model, but models/x is dense"), std::string::npos) << e;
  const auto f = error_of(mesh(4, 1, 1, 1, 2), false, 0);
  EXPECT_NE(f.find("etp = 2 needs a MoE model"), std::string::npos) << f;
}

TEST(ExpertLayout, ExpertsNotDivisibleByEp) {
  const auto e = error_of(mesh(4, 1, 1, 4), true, 6);
  EXPECT_NE(e.find("num_experts = 6 (models/x) is not divisible by ep = 4"), std::string::npos) << e;
}

TEST(ExpertLayout, EtpWithAMoeModelPasses) {
  EXPECT_EQ(error_of(mesh(4, 2, 1, 2, 2), true, 8), "");
  EXPECT_EQ(error_of(mesh(2, 1, 1, 1, 2), true, 8), "");
}

TEST(ExpertLayout, WorldVsExpertGridNamesTheNumbers) {
  // world 6 (dp 3 x tp 2) vs etp 1 x ep 4 x pp 1: DeviceMesh::from_sizes refuses it
  MeshSizes s;
  s.dp = 3;
  s.tp = 2;
  s.ep = 4;
  try {
    DeviceMesh::from_sizes(s);
    FAIL() << "accepted ep = 4 on 6 ranks";
  } catch (const twinkle::Error& e) {
    EXPECT_NE(std::string(e.what()).find("MeshSizes.ep = 4 (x etp=1 x pp=1 = 4) does not divide the world size 6"),
              std::string::npos)
        << e.what();
  }
}

std::string loss_error(const std::string& type, double aux, double z, const DeviceMesh& m, bool moe) {
  try {
    check_moe_loss_options(type, aux, z, m, moe);
  } catch (const twinkle::Error& e) {
    return e.what();
  }
  return "";
}

TEST(MoeLossOptions, Valid) {
  EXPECT_EQ(loss_error("global", 0.0, 0.0, mesh(1, 1, 1, 1), true), "");
  EXPECT_EQ(loss_error("global", 0.001, 0.0, mesh(2, 1, 1, 2), true), "");
  EXPECT_EQ(loss_error("per_layer", 0.01, 1e-3, mesh(2, 2, 2, 2), true), "");
  EXPECT_EQ(loss_error("global", 0.0, 0.0, mesh(2, 2, 2, 2), true), "");  // off: the value is only logged
  EXPECT_EQ(loss_error("global", 0.0, 0.0, mesh(1, 1, 1, 1), false), "");
}

TEST(MoeLossOptions, Errors) {
  auto e = loss_error("seq", 0.0, 0.0, mesh(1, 1, 1, 1), true);
  EXPECT_NE(e.find("--moe-aux-loss-type 'seq' is unknown"), std::string::npos) << e;
  e = loss_error("global", -1.0, 0.0, mesh(1, 1, 1, 1), true);
  EXPECT_NE(e.find("--moe-aux-loss-coeff -1 must be a finite number >= 0"), std::string::npos) << e;
  e = loss_error("global", 0.0, -0.5, mesh(1, 1, 1, 1), true);
  EXPECT_NE(e.find("--moe-z-loss-coeff -0.5"), std::string::npos) << e;
  e = loss_error("global", 0.001, 0.0, mesh(2, 2, 2, 2), true);
  EXPECT_NE(e.find("--moe-aux-loss-type global with --moe-aux-loss-coeff 0.001 needs pp = 1 (got pp = 2)"),
            std::string::npos)
      << e;
  e = loss_error("per_layer", 0.01, 0.0, mesh(1, 1, 1, 1), false);
  EXPECT_NE(e.find("--moe-aux-loss-coeff 0.01 needs a MoE model"), std::string::npos) << e;
}

}  // namespace
