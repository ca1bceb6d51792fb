#include "twinkle/data/dataset_meta.h"

#include <charconv>

#include "twinkle/core/error.h"

namespace twinkle {

DataSlice DataSlice::parse(const std::string& text, const std::string& option) {
  auto fail = [&](const std::string& why) -> Error {
    return Error(option + " '" + text + "': " + why + " (expected A:B, N or i,j,k with non-negative integers)");
  };
  auto number = [&](const std::string& part) {
    if (part.empty()) throw fail("empty number");
    int64_t v = 0;
    const char* b = part.data();
    const char* e = b + part.size();
    auto [ptr, ec] = std::from_chars(b, e, v);
    if (ec == std::errc::result_out_of_range) throw fail("'" + part + "' is out of range");
    if (ec != std::errc() || ptr != e || part[0] == '-' || part[0] == '+')
      throw fail("'" + part + "' is not a non-negative integer");
    return v;
  };
  const auto colon = text.find(':');
  if (colon != std::string::npos) {
    if (text.find(':', colon + 1) != std::string::npos || text.find(',') != std::string::npos)
      throw fail("a range has exactly one ':' and no ','");
    return range(number(text.substr(0, colon)), number(text.substr(colon + 1)));
  }
  if (text.find(',') != std::string::npos) {
    std::vector<int64_t> idx;
    size_t at = 0;
    while (true) {
      const size_t comma = text.find(',', at);
      idx.push_back(number(text.substr(at, comma == std::string::npos ? std::string::npos : comma - at)));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    return indices(std::move(idx));
  }
  return range(number(text));
}

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
