#include "twinkle/data/pretokenized.h"

#include <cstdint>

#include "twinkle/core/error.h"

namespace twinkle {

std::vector<int32_t> token_ids_from_json(const nlohmann::json& j, const std::string& field, const std::string& where) {
  check(j.is_array(), where + ": field '" + field + "' must be a list of integers");
  std::vector<int32_t> out;
  out.reserve(j.size());
  for (const auto& v : j) {
    check(v.is_number_integer(), where + ": field '" + field + "' must contain only integers");
    // A token id outside int32 would wrap in get<int32_t>() (4294967297 -> 1) and pass the
    // vocabulary check as a valid id: refuse it by value and position.
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(INT32_MAX)
                                             : v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX;
    check(fits, where + ": " + field + "[" + std::to_string(out.size()) + "] = " + v.dump() +
                    " does not fit a 32-bit token id");
    out.push_back(v.get<int32_t>());
  }
  return out;
}

bool is_pretokenized(const nlohmann::json& row) { return row.is_object() && row.contains("input_ids"); }

EncodedRow pretokenized_row(const nlohmann::json& row, const std::string& where) {
  check(is_pretokenized(row), where + ": missing field 'input_ids'");
  EncodedRow e;
  e.input_ids = token_ids_from_json(row["input_ids"], "input_ids", where);
  // a null "labels" is an absent one: a parquet column holds null in the rows that lack it (datasets' rule)
  const bool labelled = row.contains("labels") && !row["labels"].is_null();
  e.labels = labelled ? token_ids_from_json(row["labels"], "labels", where) : e.input_ids;
  check(!e.input_ids.empty(), where + ": empty 'input_ids'");
  check(e.labels.size() == e.input_ids.size(), where + ": 'labels' and 'input_ids' differ in length");
  e.length = static_cast<int64_t>(e.input_ids.size());
  e.attention_mask.assign(e.input_ids.size(), 1);
  for (int64_t t = 0; t < e.length; ++t) e.position_ids.push_back(static_cast<int32_t>(t));
  return e;
}

void check_row_vocab(const EncodedRow& row, int64_t vocab_size, const std::string& where) {
  auto bad = [&](const char* field, size_t j, int32_t id) {
    throw Error(where + ": " + field + "[" + std::to_string(j) + "] = " + std::to_string(id) +
                " is outside the vocabulary [0, " + std::to_string(vocab_size) + ") of the model");
  };
  for (size_t j = 0; j < row.input_ids.size(); ++j)
    if (row.input_ids[j] < 0 || row.input_ids[j] >= vocab_size) bad("input_ids", j, row.input_ids[j]);
  for (size_t j = 0; j < row.labels.size(); ++j)
    if (row.labels[j] != kIgnoreIndex && (row.labels[j] < 0 || row.labels[j] >= vocab_size)) bad("labels", j, row.labels[j]);
}

}  // namespace twinkle
