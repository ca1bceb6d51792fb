// Failure modes: one rank fails while the others wait in a collective; the job must end.
// Usage: mpi_fail MODE RANK    MODE: throw | terminate | kill | segv | exit | mismatch | hang | ok
// (hang: RANK never joins the collective and never fails, so only the collective watchdog,
// twinkle/dist/comm_watchdog.h, can end the job)
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"

static void fail_now(const std::string& mode, int me) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  if (mode == "throw") throw twinkle::Error("rank " + std::to_string(me) + " failed on purpose (mode throw)");
  if (mode == "kill") raise(SIGKILL);
  if (mode == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  if (mode == "segv") {
    volatile int* p = nullptr;
    *p = 1;
  }
}

static void wait_forever(twinkle::dist::ProcessGroup& world) {
  // the failing rank never joins: this blocks until the job is torn down
  float x = 1;
  for (;;) world.all_reduce(&x, 1, twinkle::DType::F32);
}

static int body(int argc, char** argv) {
  twinkle::check(argc >= 3, "usage: mpi_fail MODE RANK");
  const std::string mode = argv[1];
  const int victim = std::atoi(argv[2]);
  twinkle::MeshSizes s;
  s.dp = twinkle::world_size();
  if (mode == "mismatch") {
    s.dp = 2;
    s.tp = 2;
    s.pp = 2;
  }
  twinkle::InitOptions o;
  o.global_device_mesh = twinkle::DeviceMesh::from_sizes(s);
  twinkle::initialize(o);
  auto& st = twinkle::parallel_state();
  st.world->barrier();
  const int me = twinkle::world_rank();
  if (mode == "ok") return 0;
  if (me == victim) {
    if (mode == "exit") return 3;
    fail_now(mode, me);
  }
  wait_forever(*st.world);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "terminate") {
    // no run_main: an uncaught exception must still end the job (std::terminate handler)
    twinkle::MeshSizes s;
    s.dp = twinkle::world_size();
    twinkle::InitOptions o;
    o.global_device_mesh = twinkle::DeviceMesh::from_sizes(s);
    twinkle::initialize(o);
    twinkle::parallel_state().world->barrier();
    if (twinkle::world_rank() == std::atoi(argv[2])) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      throw twinkle::Error("uncaught on purpose");
    }
    wait_forever(*twinkle::parallel_state().world);
  }
  return twinkle::run_main(argc, argv, body);
}
