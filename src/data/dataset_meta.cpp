#include "twinkle/data/dataset_meta.h"

#include "twinkle/core/error.h"

namespace twinkle {

DataSlice DataSlice::range(int64_t start, int64_t stop) {
  check(start >= 0 && stop >= 0, "DataSlice::range(" + std::to_string(start) + ", " + std::to_string(stop) +
                                     "): negative bound (indices must be >= 0)");
  DataSlice s;
  s.is_range_ = true;
  s.start_ = start;
  s.stop_ = std::max(start, stop);
  return s;
}

DataSlice DataSlice::indices(std::vector<int64_t> idx) {
  for (size_t i = 0; i < idx.size(); ++i)
    check(idx[i] >= 0, "DataSlice::indices: index " + std::to_string(idx[i]) + " at position " + std::to_string(i) +
                           " is negative (indices must be >= 0)");
  DataSlice s;
  s.is_range_ = false;
  s.idx_ = std::move(idx);
  return s;
}

int64_t DataSlice::count() const { return is_range_ ? stop_ - start_ : static_cast<int64_t>(idx_.size()); }

std::vector<int64_t> DataSlice::resolve(int64_t n, const std::string& what) const {
  const int64_t c = count();
  std::vector<int64_t> out;
  if (c == 0) return out;
  check(n > 0, what + ": data_slice " + describe() + " selects rows from an empty dataset");
  out.reserve(static_cast<size_t>(c));
  if (is_range_) {
    for (int64_t i = start_; i < stop_; ++i) out.push_back(i % n);
  } else {
    for (int64_t i : idx_) out.push_back(i % n);
  }
  return out;
}

std::string DataSlice::describe() const {
  if (is_range_) return "range(" + std::to_string(start_) + ", " + std::to_string(stop_) + ")";
  std::string s = "[";
  for (size_t i = 0; i < idx_.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(idx_[i]);
  if (idx_.size() > 8) s += ", ... (" + std::to_string(idx_.size()) + " indices)";
  return s + "]";
}

}  // namespace twinkle
