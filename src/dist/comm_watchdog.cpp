// The collective watchdog (twinkle/dist/comm_watchdog.h): one polling thread per process and one
// slot for the call in flight (the runtime calls MPI from one thread, MPI_THREAD_FUNNELED).
#include "twinkle/dist/comm_watchdog.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "twinkle/core/error.h"

namespace twinkle::dist {

namespace {

using Clock = std::chrono::steady_clock;

struct Slot {
  std::atomic<bool> running{false};
  std::atomic<double> timeout_s{0};
  int world_rank = 0;
  std::mutex mu;  // guards the fields below
  int depth = 0;
  Clock::time_point start;
  const char* op = nullptr;
  std::string group;
  int group_size = 0;
};

Slot& slot() {
  static Slot s;
  return s;
}

[[noreturn]] void fire(int rank, const char* op, const std::string& group, int size, double waited, double timeout) {
  std::fprintf(stderr,
               "[rank %d] comm watchdog: %s on process group '%s' (%d ranks) has not completed after %.0f s "
               "(timeout %g s: twinkle-run --comm-timeout / TWINKLE_COMM_TIMEOUT); a peer in that group is dead, "
               "stuck or unreachable; aborting the job\n",
               rank, op, group.c_str(), size, waited, timeout);
  std::fflush(nullptr);
  _exit(1);
}

void watch_loop() {
  Slot& s = slot();
  const double timeout = s.timeout_s.load();
  const auto tick = std::chrono::duration<double>(std::clamp(timeout / 10.0, 0.05, 1.0));
  for (;;) {
    std::this_thread::sleep_for(tick);
    std::unique_lock<std::mutex> lk(s.mu);
    if (s.depth == 0) continue;
    const double waited = std::chrono::duration<double>(Clock::now() - s.start).count();
    if (waited >= timeout) fire(s.world_rank, s.op, s.group, s.group_size, waited, timeout);
  }
}

}  // namespace

double comm_timeout_from_env() {
  const char* e = std::getenv("TWINKLE_COMM_TIMEOUT");
  if (!e || !*e) return 600.0;
  char* end = nullptr;
  const double v = std::strtod(e, &end);
  check(end && *end == '\0' && v >= 0 && v < 1e9,
        std::string("TWINKLE_COMM_TIMEOUT='") + e + "': expected a number of seconds >= 0 (0 = no watchdog)");
  return v;
}

void start_comm_watchdog(int world_rank, double timeout_s) {
  if (timeout_s <= 0) return;
  Slot& s = slot();
  bool expected = false;
  if (!s.running.compare_exchange_strong(expected, true)) return;
  s.world_rank = world_rank;
  s.timeout_s.store(timeout_s);
  std::thread(watch_loop).detach();
}

double comm_watchdog_timeout() { return slot().running.load() ? slot().timeout_s.load() : 0.0; }

CommWatch::CommWatch(const char* op, const std::string& group, int group_size) {
  Slot& s = slot();
  if (!s.running.load(std::memory_order_relaxed)) return;
  armed_ = true;
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.depth++ == 0) {
    s.start = Clock::now();
    s.op = op;
    s.group = group;
    s.group_size = group_size;
  }
}

CommWatch::~CommWatch() {
  if (!armed_) return;
  Slot& s = slot();
  std::lock_guard<std::mutex> lk(s.mu);
  --s.depth;
}

}  // namespace twinkle::dist
