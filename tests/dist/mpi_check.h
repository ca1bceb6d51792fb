// Tiny check helpers for the MPI test programs (each rank counts its own failures).
#pragma once
#include <iostream>
#include <sstream>
#include <string>

namespace twinkle_test {
inline int& failures() {
  static int n = 0;
  return n;
}
}  // namespace twinkle_test

#define MPI_CHECK(cond, what)                                                                          \
  do {                                                                                                 \
    if (!(cond)) {                                                                                     \
      std::ostringstream os_;                                                                          \
      os_ << "[rank " << twinkle::world_rank() << "] CHECK FAILED " << __FILE__ << ":" << __LINE__ << ": " \
          << #cond << " -- " << what << "\n";                                                           \
      std::cerr << os_.str() << std::flush;                                                            \
      ++twinkle_test::failures();                                                                      \
    }                                                                                                  \
  } while (0)
