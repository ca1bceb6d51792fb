// The parquet module (libtwinkle_parquet.so): twinkle's reader over Apache Arrow C++'s parquet reader
// (twinkle/data/parquet.h). A shared library of its own, linked against the pyarrow wheel's libarrow /
// libparquet and loaded by src/data/parquet.cpp with dlopen at the first parquet file, so that a
// program that reads no parquet neither loads those ~60 MB of libraries nor pays their relocations
// (about 16 MB of resident pages and 8 ms per process here).
#include "arrow_reader.h"

#include <cstdio>
#include <set>
#include <vector>

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/util/config.h>
#include <arrow/util/float16.h>
#include <arrow/util/utf8.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>

#include "twinkle/core/error.h"

namespace twinkle {

using json = nlohmann::json;

namespace {

// A string that is not UTF-8: a row error (the row goes to `bad`), not a file error.
struct BadUtf8 {};

// Whether twinkle converts values of type `t` (the table in parquet.h).
bool convertible(const arrow::DataType& t) {
  using arrow::Type;
  switch (t.id()) {
    case Type::NA:
    case Type::BOOL:
    case Type::INT8:
    case Type::INT16:
    case Type::INT32:
    case Type::INT64:
    case Type::UINT8:
    case Type::UINT16:
    case Type::UINT32:
    case Type::UINT64:
    case Type::HALF_FLOAT:
    case Type::FLOAT:
    case Type::DOUBLE:
    case Type::STRING:
    case Type::LARGE_STRING:
    case Type::STRING_VIEW:
      return true;
    case Type::LIST:
    case Type::LARGE_LIST:
    case Type::FIXED_SIZE_LIST:
    case Type::LIST_VIEW:
    case Type::LARGE_LIST_VIEW:
      return convertible(*t.field(0)->type());
    case Type::STRUCT:
      for (const auto& f : t.fields())
        if (!convertible(*f->type())) return false;
      return true;
    case Type::DICTIONARY:
      return convertible(*static_cast<const arrow::DictionaryType&>(t).value_type());
    default:
      return false;
  }
}

json value(const arrow::Array& a, int64_t i);

json text(std::string_view v) {
  if (!arrow::util::ValidateUTF8(v)) throw BadUtf8{};
  return std::string(v);
}

template <class L>
json list(const arrow::Array& a, int64_t i) {
  const auto& l = static_cast<const L&>(a);
  const arrow::Array& vals = *l.values();
  const int64_t b = l.value_offset(i), n = l.value_length(i);
  if (b < 0 || n < 0 || b + n > vals.length()) throw Error("list offsets out of range");
  json out = json::array();
  for (int64_t k = 0; k < n; ++k) out.push_back(value(vals, b + k));
  return out;
}

json value(const arrow::Array& a, int64_t i) {
  using arrow::Type;
  if (a.IsNull(i)) return nullptr;
  switch (a.type_id()) {
    case Type::NA:
      return nullptr;
    case Type::BOOL:
      return static_cast<const arrow::BooleanArray&>(a).Value(i);
    case Type::INT8:
      return static_cast<int64_t>(static_cast<const arrow::Int8Array&>(a).Value(i));
    case Type::INT16:
      return static_cast<int64_t>(static_cast<const arrow::Int16Array&>(a).Value(i));
    case Type::INT32:
      return static_cast<int64_t>(static_cast<const arrow::Int32Array&>(a).Value(i));
    case Type::INT64:
      return static_cast<int64_t>(static_cast<const arrow::Int64Array&>(a).Value(i));
    case Type::UINT8:
      return static_cast<uint64_t>(static_cast<const arrow::UInt8Array&>(a).Value(i));
    case Type::UINT16:
      return static_cast<uint64_t>(static_cast<const arrow::UInt16Array&>(a).Value(i));
    case Type::UINT32:
      return static_cast<uint64_t>(static_cast<const arrow::UInt32Array&>(a).Value(i));
    case Type::UINT64:
      return static_cast<uint64_t>(static_cast<const arrow::UInt64Array&>(a).Value(i));
    case Type::HALF_FLOAT:
      return arrow::util::Float16::FromBits(static_cast<const arrow::HalfFloatArray&>(a).Value(i)).ToDouble();
    case Type::FLOAT:
      return static_cast<double>(static_cast<const arrow::FloatArray&>(a).Value(i));
    case Type::DOUBLE:
      return static_cast<const arrow::DoubleArray&>(a).Value(i);
    case Type::STRING:
      return text(static_cast<const arrow::StringArray&>(a).GetView(i));
    case Type::LARGE_STRING:
      return text(static_cast<const arrow::LargeStringArray&>(a).GetView(i));
    case Type::STRING_VIEW:
      return text(static_cast<const arrow::StringViewArray&>(a).GetView(i));
    case Type::LIST:
      return list<arrow::ListArray>(a, i);
    case Type::LARGE_LIST:
      return list<arrow::LargeListArray>(a, i);
    case Type::FIXED_SIZE_LIST:
      return list<arrow::FixedSizeListArray>(a, i);
    case Type::LIST_VIEW:
      return list<arrow::ListViewArray>(a, i);
    case Type::LARGE_LIST_VIEW:
      return list<arrow::LargeListViewArray>(a, i);
    case Type::STRUCT: {
      const auto& s = static_cast<const arrow::StructArray&>(a);
      json out = json::object();
      for (int k = 0; k < s.num_fields(); ++k) out[s.struct_type()->field(k)->name()] = value(*s.field(k), i);
      return out;
    }
    case Type::DICTIONARY: {
      const auto& d = static_cast<const arrow::DictionaryArray&>(a);
      const int64_t k = d.GetValueIndex(i);
      if (k < 0 || k >= d.dictionary()->length()) throw Error("dictionary index " + std::to_string(k) + " out of range");
      return value(*d.dictionary(), k);
    }
    default:
      throw Error("unsupported Arrow type " + a.type()->ToString());
  }
}

// Leaf column indices (parquet schema order) under one top-level field.
void leaves(const parquet::arrow::SchemaField& f, std::vector<int>& out) {
  if (f.is_leaf()) out.push_back(f.column_index);
  for (const auto& c : f.children) leaves(c, out);
}

template <class T>
T value_or_throw(arrow::Result<T> r, const std::string& path, const char* what) {
  if (!r.ok()) throw Error(path + ": " + what + ": " + r.status().ToString());
  return std::move(r).ValueUnsafe();
}

void ok_or_throw(const arrow::Status& s, const std::string& path, const char* what) {
  if (!s.ok()) throw Error(path + ": " + what + ": " + s.ToString());
}

void read(const std::string& path, const std::function<void(json&&, int64_t)>& row,
          const std::function<void(int64_t, const std::string&)>& bad) {
  arrow::util::InitializeUTF8();
  auto file = value_or_throw(arrow::io::ReadableFile::Open(path), path, "cannot open parquet file");
  auto reader = value_or_throw(parquet::arrow::OpenFile(file, arrow::default_memory_pool()), path,
                               "not a readable parquet file");
  const auto& fields = reader->manifest().schema_fields;
  std::vector<int> cols;
  std::set<std::string> names;
  std::string skipped;
  for (const auto& f : fields) {
    const std::string& name = f.field->name();
    if (!names.insert(name).second) throw Error(path + ": two columns are named '" + name + "'");
    if (!convertible(*f.field->type())) {
      skipped += (skipped.empty() ? "" : ", ") + ("'" + name + "' (" + f.field->type()->ToString() + ")");
      continue;
    }
    leaves(f, cols);
  }
  const int64_t total = reader->parquet_reader()->metadata()->num_rows();
  if (!skipped.empty()) {
    if (cols.empty() && total > 0)
      throw Error(path + ": no column twinkle can read: " + skipped +
                  " (binary, temporal, decimal and map columns have no JSON value; twinkle/data/parquet.h)");
    std::fprintf(stderr, "[twinkle] warning: %s: column(s) %s left out of the rows (no JSON value; twinkle/data/parquet.h)\n",
                 path.c_str(), skipped.c_str());
  }
  int64_t n = 0;
  for (int g = 0; g < reader->num_row_groups(); ++g) {
    auto batches = value_or_throw(reader->GetRecordBatchReader({g}, cols), path, "cannot read row group");
    while (true) {
      std::shared_ptr<arrow::RecordBatch> batch;
      ok_or_throw(batches->ReadNext(&batch), path, ("row group " + std::to_string(g)).c_str());
      if (!batch) break;
      ok_or_throw(batch->Validate(), path, ("row group " + std::to_string(g)).c_str());
      const int nc = batch->num_columns();
      std::vector<std::string> cname(static_cast<size_t>(nc));
      for (int c = 0; c < nc; ++c) {
        cname[static_cast<size_t>(c)] = batch->schema()->field(c)->name();
        if (batch->column(c)->length() != batch->num_rows())
          throw Error(path + ": row group " + std::to_string(g) + ": column '" + cname[static_cast<size_t>(c)] + "' has " +
                      std::to_string(batch->column(c)->length()) + " rows, the batch " +
                      std::to_string(batch->num_rows()));
      }
      for (int64_t i = 0; i < batch->num_rows(); ++i) {
        ++n;
        json r = json::object();
        int c = 0;
        try {
          for (; c < nc; ++c) r[cname[static_cast<size_t>(c)]] = value(*batch->column(c), i);
        } catch (const BadUtf8&) {
          bad(n, "column '" + cname[static_cast<size_t>(c)] + "': invalid UTF-8 in a string");
          continue;
        } catch (const Error& e) {
          throw Error(path + ":" + std::to_string(n) + ": column '" + cname[static_cast<size_t>(c)] + "': " + e.what());
        }
        row(std::move(r), n);
      }
    }
  }
  if (n != total)
    throw Error(path + ": the row groups hold " + std::to_string(n) + " rows, the file's metadata says " +
                std::to_string(total));
}

}  // namespace

void read_parquet_rows_arrow(const std::string& path, const std::function<void(json&&, int64_t)>& row,
                             const std::function<void(int64_t, const std::string&)>& bad) {
  try {
    read(path, row, bad);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // parquet::ParquetException, std::bad_alloc from a hostile size
    throw Error(path + ": not a readable parquet file: " + e.what());
  }
}

}  // namespace twinkle

extern "C" const twinkle::ParquetModuleApi* twinkle_parquet_module_api() {
  static const twinkle::ParquetModuleApi api{twinkle::kParquetModuleAbi, &twinkle::read_parquet_rows_arrow,
                                             "Apache Arrow C++ " ARROW_VERSION_STRING};
  return &api;
}
