// Dataset mixtures (twinkle/data/mixture.h).
#include "twinkle/data/mixture.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "permutation.h"
#include "twinkle/core/error.h"
#include "twinkle/core/hash.h"
#include "twinkle/data/dataset.h"

namespace twinkle {
namespace {

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "1.5", ".5", "2." (digits with one '.'), else false.
bool decimal(const std::string& s) {
  if (std::count(s.begin(), s.end(), '.') != 1 || s.size() < 2) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
}

}  // namespace

DatasetSpec DatasetSpec::parse(const std::string& text, const std::string& option) {
  DatasetSpec s;
  const auto hash = text.rfind('#');
  const std::string tail = hash == std::string::npos ? "" : text.substr(hash + 1);
  // a tail that starts like a number is a sample spec (and must be one); "a#b" is a path
  const bool numeric = !tail.empty() && ((tail[0] >= '0' && tail[0] <= '9') || tail[0] == '.' || tail[0] == '-' ||
                                         tail[0] == '+');
  if (hash != std::string::npos && (tail.empty() || numeric)) {
    s.id = text.substr(0, hash);
    const std::string what = option + " '" + text + "'";
    if (all_digits(tail)) {
      errno = 0;
      const long long v = std::strtoll(tail.c_str(), nullptr, 10);
      if (errno == ERANGE || v < 1)
        throw Error(what + ": the sample count after '#' must be an integer >= 1 (ms-swift's ID#N), got '" + tail + "'");
      s.count = v;
    } else if (decimal(tail)) {
      const double r = std::strtod(tail.c_str(), nullptr);
      if (!(r > 0) || !std::isfinite(r))
        throw Error(what + ": the sample ratio after '#' must be > 0 (ID#R, e.g. #0.5), got '" + tail + "'");
      s.ratio = r;
    } else {
      throw Error(what + ": after '#' comes a sample count (ID#N, an integer >= 1) or ratio (ID#R, e.g. #0.5), got '" +
                  tail + "'");
    }
  } else {
    s.id = text;
  }
  if (s.id.empty()) throw Error(option + " '" + text + "': no dataset id before '#'");
  return s;
}

int64_t DatasetSpec::rows(int64_t n) const {
  if (count) return *count;
  if (ratio) {
    const double v = std::floor(*ratio * static_cast<double>(n));
    if (v < 1)
      throw Error("dataset '" + id + "': ratio #" + std::to_string(*ratio) + " of its " + std::to_string(n) +
                  " rows selects no row");
    return static_cast<int64_t>(v);
  }
  return n;
}

std::vector<int64_t> sample_indices(int64_t n, int64_t count, bool shuffle, uint64_t seed) {
  check(n >= 1, "sample_indices: a dataset of " + std::to_string(n) + " rows");
  check(count >= 0, "sample_indices: negative count " + std::to_string(count));
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(count));
  const int64_t repeats = count / n, rest = count % n;
  for (int64_t r = 0; r < repeats; ++r)
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  if (rest > 0) {
    if (shuffle) {
      const std::vector<int64_t> p = detail::seeded_permutation(n, seed);
      idx.insert(idx.end(), p.begin(), p.begin() + rest);
    } else {
      for (int64_t i = 0; i < rest; ++i) idx.push_back(i);
    }
  }
  return idx;
}

MixMode parse_mix_mode(const std::string& text, const std::string& option) {
  if (text == "concat") return MixMode::Concat;
  if (text == "shuffle") return MixMode::Shuffle;
  if (text == "interleave") return MixMode::Interleave;
  throw Error(option + " '" + text + "': expected concat, shuffle or interleave");
}

std::vector<std::pair<int32_t, int64_t>> mixture_order(const std::vector<int64_t>& sizes,
                                                       const std::vector<int64_t>& counts, const MixOptions& opts) {
  check(!sizes.empty(), "mixture_order: no dataset");
  check(sizes.size() == counts.size(), "mixture_order: " + std::to_string(sizes.size()) + " sizes and " +
                                           std::to_string(counts.size()) + " counts");
  std::vector<std::vector<int64_t>> picked;
  for (size_t i = 0; i < sizes.size(); ++i)
    picked.push_back(sample_indices(sizes[i], counts[i], opts.sample_shuffle, splitmix64(opts.seed + 1 + i)));
  std::vector<std::pair<int32_t, int64_t>> order;
  if (!opts.probabilities.empty()) {
    check(opts.mode == MixMode::Interleave, "mixture: probabilities apply to interleave only (--dataset-mix interleave)");
    check(opts.probabilities.size() == sizes.size(), "mixture: " + std::to_string(opts.probabilities.size()) +
                                                         " probabilities for " + std::to_string(sizes.size()) +
                                                         " datasets");
    double total = 0;
    for (double p : opts.probabilities) {
      check(p >= 0 && std::isfinite(p), "mixture: probability " + std::to_string(p) + " is not a finite number >= 0");
      total += p;
    }
    check(total > 0, "mixture: the probabilities are all 0");
    std::vector<double> cum;
    double acc = 0;
    for (double p : opts.probabilities) cum.push_back(acc += p / total);
    std::vector<size_t> next(picked.size(), 0);
    for (const auto& p : picked)
      if (p.empty()) return order;  // a dataset of no sampled row is exhausted from the start
    std::mt19937_64 g(splitmix64(opts.seed + 0x1f));
    while (true) {
      const double u = static_cast<double>(g() >> 11) * 0x1.0p-53;
      size_t i = 0;
      while (i + 1 < cum.size() && !(u < cum[i])) ++i;
      while (opts.probabilities[i] == 0) --i;  // u at a boundary rounding: never a weight-0 dataset
      order.emplace_back(static_cast<int32_t>(i), picked[i][next[i]]);
      if (++next[i] == picked[i].size()) return order;
    }
  }
  if (opts.mode == MixMode::Interleave) {
    size_t shortest = picked.front().size();
    for (const auto& p : picked) shortest = std::min(shortest, p.size());
    for (size_t k = 0; k < shortest; ++k)
      for (size_t i = 0; i < picked.size(); ++i) order.emplace_back(static_cast<int32_t>(i), picked[i][k]);
    return order;
  }
  for (size_t i = 0; i < picked.size(); ++i)
    for (int64_t r : picked[i]) order.emplace_back(static_cast<int32_t>(i), r);
  if (opts.mode == MixMode::Shuffle) detail::shuffle_seeded(order, splitmix64(opts.seed));
  return order;
}

Dataset mix_datasets(const std::vector<const Dataset*>& parts, const std::vector<DatasetSpec>& specs,
                     const MixOptions& opts) {
  check(!parts.empty() && parts.size() == specs.size(),
        "mix_datasets: " + std::to_string(parts.size()) + " datasets and " + std::to_string(specs.size()) + " specs");
  std::vector<int64_t> sizes, counts;
  std::string id;
  for (size_t i = 0; i < parts.size(); ++i) {
    check(parts[i] != nullptr, "mix_datasets: a null dataset");
    sizes.push_back(parts[i]->size());
    counts.push_back(specs[i].rows(parts[i]->size()));
    if (specs[i].count && *specs[i].count > parts[i]->size() && *specs[i].count % parts[i]->size() != 0)
      std::fprintf(stderr,
                   "[twinkle] warning: dataset '%s': #%lld is more than its %lld rows: %lld whole copies, then %lld "
                   "sampled rows (ms-swift's repeated sampling)\n",
                   specs[i].id.c_str(), static_cast<long long>(*specs[i].count),
                   static_cast<long long>(parts[i]->size()), static_cast<long long>(*specs[i].count / parts[i]->size()),
                   static_cast<long long>(*specs[i].count % parts[i]->size()));
    id += (i ? " + " : "") + parts[i]->id();
  }
  return Dataset::from_parts(parts, mixture_order(sizes, counts, opts), id);
}

}  // namespace twinkle
