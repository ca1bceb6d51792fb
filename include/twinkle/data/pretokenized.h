// twinkle/data/pretokenized.h — rows that are already token ids.
//
// A pre-tokenized row is {"input_ids": [int...], "labels": [int...]} with labels optional
// (absent or null: then equal to input_ids; a parquet column is null in the rows that lack it) and -100 marking positions that are not trained (HF convention:
// labels aligned with input_ids; the model shifts).
#pragma once
#include <nlohmann/json.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "twinkle/data/batch.h"

namespace twinkle {

/// The token ids of the JSON list `j` (a row's "input_ids" / "labels", a line of `twinkle tokenize
/// --decode`). Throws twinkle::Error "<where>: field '<field>' must be a list of integers" for a
/// non-list or a non-integer entry, and "<where>: <field>[k] = v does not fit a 32-bit token id"
/// for an integer outside int32 (nlohmann's get<int32_t> would wrap it: 4294967297 -> 1).
std::vector<int32_t> token_ids_from_json(const nlohmann::json& j, const std::string& field, const std::string& where);

/// True when `row` is an object with an "input_ids" field.
bool is_pretokenized(const nlohmann::json& row);

/// The EncodedRow of a pre-tokenized row (attention_mask ones, position_ids 0..L-1).
/// Throws twinkle::Error naming `where` (file:line) and the field: missing or empty
/// input_ids, a non-list or non-integer entry, labels of a different length.
EncodedRow pretokenized_row(const nlohmann::json& row, const std::string& where);

/// Throws twinkle::Error "<where>: input_ids[j] = id is outside the vocabulary [0, V)" (or
/// labels[j], -100 allowed) when a row does not fit a model with `vocab_size` ids.
void check_row_vocab(const EncodedRow& row, int64_t vocab_size, const std::string& where);

}  // namespace twinkle
