// Parquet rows (twinkle/data/parquet.h). The reader itself lives in the parquet module
// (src/data/parquet_module/arrow_reader.cpp, libtwinkle_parquet.so, linked against the pyarrow
// wheel's Arrow C++), loaded with dlopen at the first parquet file: programs that read none never
// load Arrow. Without TWINKLE_WITH_PARQUET (CMake TWINKLE_PARQUET=OFF, or no pyarrow found) every
// call refuses the file naming what to install.
#include "twinkle/data/parquet.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "parquet_module/arrow_reader.h"
#include "twinkle/core/error.h"

namespace twinkle {

using json = nlohmann::json;

#ifndef TWINKLE_WITH_PARQUET

bool parquet_supported() { return false; }

std::string parquet_support_note() {
  return "this twinkle was built without parquet support: install pyarrow in the project environment "
         "(scripts/setup does: .venv from scripts/requirements.lock) and configure with -DTWINKLE_PARQUET=AUTO "
         "(the default) or ON, or convert the file to jsonl";
}

void read_parquet_rows(const std::string& path, const std::function<void(json&&, int64_t)>&,
                       const std::function<void(int64_t, const std::string&)>&) {
  throw Error(path + ": cannot read parquet: " + parquet_support_note());
}

#else

namespace {

// $TWINKLE_PARQUET_MODULE, else the build's module (TWINKLE_PARQUET_MODULE_PATH, CMakeLists.txt).
std::string module_path() {
  const char* env = std::getenv("TWINKLE_PARQUET_MODULE");
  return env && *env ? env : TWINKLE_PARQUET_MODULE_PATH;
}

// The module's API, loaded once; throws twinkle::Error naming the module and what failed.
const ParquetModuleApi& module() {
  static std::once_flag once;
  static const ParquetModuleApi* api = nullptr;
  static std::string why;
  std::call_once(once, [] {
    const std::string p = module_path();
    void* h = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = ::dlerror();
      why = "cannot load the parquet module " + p + ": " + (e ? e : "unknown error") +
            " (it is built next to twinkle; $TWINKLE_PARQUET_MODULE names another; it needs the pyarrow wheel's "
            "libarrow / libparquet that the build found, see CMakeLists.txt TWINKLE_PARQUET)";
      return;
    }
    using Fn = const ParquetModuleApi* (*)();
    auto fn = reinterpret_cast<Fn>(::dlsym(h, "twinkle_parquet_module_api"));
    const ParquetModuleApi* a = fn ? fn() : nullptr;
    if (!a || a->abi != kParquetModuleAbi) {
      why = "the parquet module " + p + " is not this build's (no twinkle_parquet_module_api of ABI " +
            std::to_string(kParquetModuleAbi) + ")";
      return;
    }
    api = a;
  });
  if (!api) throw Error(why);
  return *api;
}

}  // namespace

bool parquet_supported() { return true; }

std::string parquet_support_note() {
  try {
    return std::string(module().reader) + " (parquet reader, from the pyarrow wheel), module " + module_path();
  } catch (const Error& e) {
    return e.what();
  }
}

void read_parquet_rows(const std::string& path, const std::function<void(json&&, int64_t)>& row,
                       const std::function<void(int64_t, const std::string&)>& bad) {
  const ParquetModuleApi* api = nullptr;
  try {
    api = &module();
  } catch (const Error& e) {
    throw Error(path + ": cannot read parquet: " + e.what());
  }
  api->read(path, row, bad);
}

#endif

}  // namespace twinkle
