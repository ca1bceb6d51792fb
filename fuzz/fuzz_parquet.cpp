// libFuzzer target: twinkle's parquet reader (src/data/parquet_module/arrow_reader.cpp over Apache Arrow C++'s reader,
// twinkle/data/parquet.h) on arbitrary bytes, written to a memfd and read by its /proc path. Built only
// when the build reads parquet (TWINKLE_WITH_PARQUET). Only twinkle's code is instrumented (the pyarrow
// wheel's libarrow / libparquet are not), so coverage guides the mutations through the value conversion;
// Arrow's decoders are reached by the corpus and its mutations unguided. Seed corpus: fuzz/corpus/parquet
// (files written by tests/data/datasets/make_parquet_reference.py).
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "twinkle/core/error.h"
#include "parquet_module/arrow_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("fuzz.parquet", 0);
  if (fd < 0) return 0;
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    twinkle::read_parquet_rows_arrow(path, [](nlohmann::json&&, int64_t) {}, [](int64_t, const std::string&) {});
  } catch (const twinkle::Error&) {
  }
  return 0;
}
