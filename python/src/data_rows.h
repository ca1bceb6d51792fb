// python/src/data_rows.h — EncodedRow <-> the row dicts a DataLoader batch holds.
#pragma once
#include <vector>

#include "bindings.h"
#include "twinkle/data/batch.h"

namespace twinkle_py {

/// {original columns of `source` (may be null)..., input_ids, labels, attention_mask,
/// position_ids (int lists), length (int)}.
py::dict row_to_dict(const twinkle::EncodedRow& r, const nlohmann::json* source);
/// A batch (list of dicts, or one dict) -> rows. input_ids and labels required (lists or
/// numpy arrays); attention_mask / position_ids default to ones / 0..L-1. ValueError /
/// TypeError naming inputs[i] and the field otherwise.
std::vector<twinkle::EncodedRow> rows_from_py(const py::handle& inputs);

}  // namespace twinkle_py
