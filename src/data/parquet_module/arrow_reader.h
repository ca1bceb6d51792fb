// src/data/parquet_module/arrow_reader.h (internal) — the interface between twinkle_data
// (src/data/parquet.cpp) and the parquet module libtwinkle_parquet.so (arrow_reader.cpp), which
// parquet.cpp loads with dlopen and asks for twinkle_parquet_module_api(). Both sides are built by
// the same compiler from the same headers; kParquetModuleAbi changes whenever ParquetModuleApi does.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace twinkle {

inline constexpr int kParquetModuleAbi = 1;

struct ParquetModuleApi {
  int abi;  ///< kParquetModuleAbi of the module
  /// read_parquet_rows (twinkle/data/parquet.h) over Arrow C++
  void (*read)(const std::string& path, const std::function<void(nlohmann::json&&, int64_t)>& row,
               const std::function<void(int64_t, const std::string&)>& bad);
  const char* reader;  ///< "Apache Arrow C++ <version>"
};

/// The module's reader (also compiled straight into fuzz/fuzz_parquet).
void read_parquet_rows_arrow(const std::string& path, const std::function<void(nlohmann::json&&, int64_t)>& row,
                             const std::function<void(int64_t, const std::string&)>& bad);

}  // namespace twinkle

extern "C" const twinkle::ParquetModuleApi* twinkle_parquet_module_api();
