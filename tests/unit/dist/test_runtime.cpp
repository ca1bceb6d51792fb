// Runtime in a single process without a launcher: initialize()'s errors (device type,
// world size, mode), the logger format and filtering, the placement box, device ids.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <regex>
#include <sstream>

#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"

using twinkle::DeviceMesh;
using twinkle::MeshSizes;

static std::string init_error(const MeshSizes& s, const std::string& mode = "local") {
  twinkle::InitOptions o;
  o.mode = mode;
  o.global_device_mesh = DeviceMesh::from_sizes(s);
  try {
    twinkle::initialize(o);
  } catch (const twinkle::Error& e) {
    EXPECT_FALSE(twinkle::is_initialized());
    return e.what();
  }
  twinkle::finalize();
  return "";
}

TEST(Runtime, NoLauncherInEnvironment) {
  // These tests must run as a plain process (ctest), never under mpirun.
  ASSERT_EQ(getenv("OMPI_COMM_WORLD_SIZE"), nullptr);
  ASSERT_EQ(getenv("PMIX_RANK"), nullptr);
}

TEST(Runtime, NpuIsRejectedAtOnce) {
  MeshSizes s;
  s.device_type = "npu";
  EXPECT_EQ(init_error(s),
            "device_type 'npu' requested but this build has no NPU backend: it needs Huawei Ascend's CANN toolkit "
            "(not available in this build)");
  setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1", 1);
  EXPECT_NE(init_error(s).find("[ASCEND_RT_VISIBLE_DEVICES is set]"), std::string::npos);
  s.dp = 8;  // the device check comes before the world-size check
  EXPECT_NE(init_error(s).find("no NPU backend"), std::string::npos);
  unsetenv("ASCEND_RT_VISIBLE_DEVICES");
}

TEST(Runtime, CudaIsRejectedWithoutTheBackend) {
  MeshSizes s;
  s.device_type = "cuda";
  if (!twinkle::cuda_backend_built()) {
    EXPECT_NE(init_error(s).find("this build has no CUDA backend: the CUDA kernels and NCCL process groups are not "
                                 "implemented yet"),
              std::string::npos);
  } else {  // a CUDA build: without a GPU the error names it; with one, initialize succeeds
    const std::string err = init_error(s);
    if (!err.empty()) {
      EXPECT_NE(err.find("device 'cuda': no GPU visible"), std::string::npos) << err;
    }
  }
}

TEST(Runtime, WorldSizeMismatchWithoutLauncher) {
  MeshSizes s;
  s.dp = 2;
  s.tp = 2;
  s.pp = 2;
  EXPECT_EQ(init_error(s),
            "world size 1 does not match the device mesh pp=2 x dp=2 x tp=2 (8 ranks): launch with twinkle-run "
            "--nproc_per_node=8 or change the mesh");
}

TEST(Runtime, UnknownModeNamesTheField) {
  EXPECT_NE(init_error({}, "ray").find("InitOptions.mode 'ray'"), std::string::npos);
}

TEST(Runtime, InitializeSingleProcess) {
  EXPECT_FALSE(twinkle::is_initialized());
  EXPECT_THROW(twinkle::parallel_state(), twinkle::Error);
  twinkle::InitOptions o;
  o.seed = 1234;
  o.full_determinism = true;
  twinkle::initialize(o);
  EXPECT_TRUE(twinkle::is_initialized());
  EXPECT_THROW(twinkle::initialize(o), twinkle::Error);
  auto& st = twinkle::parallel_state();
  EXPECT_EQ(st.world->size(), 1);
  EXPECT_EQ(st.tp_size(), 1);
  EXPECT_EQ(twinkle::global_seed(), 1234u);
  EXPECT_TRUE(twinkle::full_determinism());
  EXPECT_EQ(twinkle::world_rank(), 0);
  EXPECT_EQ(twinkle::world_size(), 1);
  twinkle::finalize();
  EXPECT_FALSE(twinkle::is_initialized());
  twinkle::finalize();  // idempotent
}

TEST(Runtime, RunMainReportsErrors) {
  testing::internal::CaptureStderr();
  int rc = twinkle::run_main(0, nullptr, [](int, char**) -> int { throw twinkle::Error("boom in layer 3"); });
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("error: boom in layer 3"), std::string::npos) << err;  // no rank tag in one process
  EXPECT_EQ(err.find("[rank"), std::string::npos) << err;
  EXPECT_EQ(twinkle::run_main(0, nullptr, [](int, char**) { return 7; }), 7);
}

TEST(Logger, FormatAndLevels) {
  auto& log = twinkle::get_logger();
  std::vector<std::string> lines;
  log.set_sink([&](const std::string& l) { lines.push_back(l); });
  setenv("LOG_LEVEL", "warning", 1);
  log.reload_env();
  log.info("hidden");
  log.debug("hidden");
  log.warning("shown w");
  log.error("shown e");
  setenv("LOG_LEVEL", "DEBUG", 1);
  log.reload_env();
  log.debug("shown d");
  log.info_all_ranks("everyone");
  unsetenv("LOG_LEVEL");
  log.reload_env();
  log.set_sink(nullptr);
  ASSERT_EQ(lines.size(), 4u);
  std::regex re(R"(^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]\[(WARNING|ERROR|DEBUG|INFO):twinkle\] .*$)");
  for (const auto& l : lines) EXPECT_TRUE(std::regex_match(l, re)) << l;
  EXPECT_NE(lines[0].find("][WARNING:twinkle] shown w"), std::string::npos);
  EXPECT_NE(lines[1].find("][ERROR:twinkle] shown e"), std::string::npos);
  EXPECT_NE(lines[2].find("][DEBUG:twinkle] shown d"), std::string::npos);
  EXPECT_NE(lines[3].find("][INFO:twinkle] [rank 0] everyone"), std::string::npos);
  EXPECT_EQ(log.level(), twinkle::Logger::Level::Info);
}

TEST(Placement, EightyColumnBox) {
  MeshSizes s;
  s.dp = 2;
  s.tp = 2;
  s.pp = 2;
  s.ep = 2;
  std::string box = twinkle::format_device_placement(DeviceMesh::from_sizes(s));
  std::istringstream in(box);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    EXPECT_EQ(line.size(), 80u) << line;
    ++n;
  }
  EXPECT_GT(n, 8 + 6);
  EXPECT_NE(box.find("DEVICE PLACEMENT TOPOLOGY"), std::string::npos);
  EXPECT_NE(box.find("mesh: pp=2 x dp=2 x tp=2"), std::string::npos);
  EXPECT_NE(box.find("world size: 8"), std::string::npos);
  // rank 6: tp 0, cp 0, dp 1, pp 1, ep 0, edp 1
  EXPECT_NE(box.find("|     6 |   0 |   0 |   1 |   1 |   0 |   1 "), std::string::npos) << box;
  EXPECT_NE(box.find("tp groups:      [0,1] [2,3] [4,5] [6,7]"), std::string::npos) << box;
  EXPECT_NE(box.find("edp groups:     [0,2] [1,3] [4,6] [5,7]"), std::string::npos) << box;
  EXPECT_EQ(box.find(" etp |"), std::string::npos) << "etp = 1: no etp column";
  EXPECT_NE(twinkle::get_device_placement().find("world size: 1"), std::string::npos);
  {  // etp 2 x ep 2 on tp2 dp2 (Megatron's expert grid: rank = etp + 2*(ep + 2*(edp + pp)))
    MeshSizes e;
    e.dp = 2;
    e.tp = 2;
    e.ep = 2;
    e.etp = 2;
    const std::string b = twinkle::format_device_placement(DeviceMesh::from_sizes(e));
    EXPECT_NE(b.find(" rank |  tp |  cp |  dp |  pp | etp |  ep | edp"), std::string::npos) << b;
    // rank 3: tp 1, cp 0, dp 1, pp 0, etp 1, ep 1, edp 0
    EXPECT_NE(b.find("|     3 |   1 |   0 |   1 |   0 |   1 |   1 |   0 "), std::string::npos) << b;
    EXPECT_NE(b.find("etp groups:     [0,1] [2,3]"), std::string::npos) << b;
    EXPECT_NE(b.find("ep groups:      [0,2] [1,3]"), std::string::npos) << b;
    EXPECT_NE(b.find("mesh: dp=2 x tp=2 (experts: ep=2 x etp=2 x edp=1)"), std::string::npos) << b;
  }
  // a wide mesh wraps its group lists inside the box
  MeshSizes w;
  w.dp = 64;
  std::istringstream in2(twinkle::format_device_placement(DeviceMesh::from_sizes(w)));
  while (std::getline(in2, line)) EXPECT_EQ(line.size(), 80u) << line;
  // accelerator meshes show the device each rank maps to
  s.device_type = "cuda";
  setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7,0,1,2,3", 1);
  box = twinkle::format_device_placement(DeviceMesh::from_sizes(s));
  unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_NE(box.find("|     1 |   1 |   0 |   0 |   0 |   1 |   0 |    0 | cuda:5"), std::string::npos) << box;
}

TEST(Runtime, LocalDeviceId) {
  EXPECT_EQ(twinkle::local_device_id("cpu"), -1);
  unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(twinkle::local_device_id("cuda"), 0);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  setenv("CUDA_VISIBLE_DEVICES", "3,1,7,5", 1);
  EXPECT_EQ(twinkle::local_device_id("cuda"), 7);
  setenv("ASCEND_RT_VISIBLE_DEVICES", "4,6", 1);
  EXPECT_THROW(twinkle::local_device_id("npu"), twinkle::Error);
  setenv("ASCEND_RT_VISIBLE_DEVICES", "0,x", 1);
  EXPECT_THROW(twinkle::local_device_id("npu"), twinkle::Error);
  unsetenv("ASCEND_RT_VISIBLE_DEVICES");
  unsetenv("CUDA_VISIBLE_DEVICES");
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
}
