// twinkle/data/parquet.h — rows of a parquet file, as Hugging Face `datasets.load_dataset('parquet', ...)`
// yields them, in the row representation of the JSON/CSV readers (twinkle/data/dataset.h: one JSON object
// per row, columns by name).
//
// The file is read through Apache Arrow C++'s parquet reader (parquet::arrow::FileReader; the headers and
// shared libraries of the project environment's `pyarrow` wheel, CMake option TWINKLE_PARQUET, see
// docs/architecture.md "data/"), row group by row group, so at most one row group's Arrow arrays are held
// at a time next to the rows already converted. The reader is the module libtwinkle_parquet.so
// (src/data/parquet_module/), loaded with dlopen at the first call ($TWINKLE_PARQUET_MODULE, else the
// build's lib/libtwinkle_parquet.so).
//
// Values, column by column (datasets' Arrow -> Python conversion, pyarrow's Array.to_pylist):
//   null (any type, also a null list element or struct field)  -> null
//   bool                                                      -> true / false
//   int8..int64 / uint8..uint64                               -> integer
//   float16 / float32 / float64                               -> number (the exact value as a double;
//                                                                 NaN / inf as stored, which JSON
//                                                                 output writes as null)
//   string / large_string / string_view                       -> string (UTF-8 validated)
//   list / large_list / fixed_size_list / list_view           -> array
//   struct                                                    -> object (field names as keys)
//   dictionary<index, value> (dictionary-encoded strings)     -> the decoded value
// Other types (binary, timestamps, dates, decimals, maps, unions, ...; datasets makes them bytes, datetime,
// Decimal or tuples, which JSON has no spelling for) are not read: such a top-level column is left out of
// every row, with one warning on stderr naming the file, the column and its Arrow type.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace twinkle {

/// True when this build reads parquet files (configured with TWINKLE_PARQUET=AUTO or ON and the
/// project environment's pyarrow found; CMakeLists.txt).
bool parquet_supported();

/// One line saying what this build reads parquet with ("Apache Arrow C++ 26.0.1 (parquet reader, from
/// the pyarrow wheel), module PATH"; this loads the module), or why it cannot: without support, what to
/// install and how to configure; a module that does not load, its path and the loader's reason.
std::string parquet_support_note();

/// Streams the rows of parquet file `path` in file order: `row(object, n)` for every row, n its
/// 1-based row number in the file (what "<file>:<n>" names in errors). A row with a string that is
/// not valid UTF-8 goes to `bad(n, message)` instead (message names the column), which may throw.
/// Throws twinkle::Error naming `path` when the build has no parquet support (what to install) or the
/// module cannot be loaded (naming it and dlerror's reason), when the file cannot be opened, is not parquet, is truncated or corrupt (Arrow's message appended),
/// when two top-level columns share a name, and when a column's row count disagrees with the batch.
void read_parquet_rows(const std::string& path, const std::function<void(nlohmann::json&&, int64_t)>& row,
                       const std::function<void(int64_t, const std::string&)>& bad);

}  // namespace twinkle
