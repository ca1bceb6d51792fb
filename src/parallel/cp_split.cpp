// Context-parallel padding and load-balanced split (see cp_split.h).
#include "twinkle/parallel/cp_split.h"

#include <algorithm>
#include <string>

#include "twinkle/core/error.h"

namespace twinkle::parallel {

namespace {

void check_cu(const std::vector<int32_t>& cu, size_t T, const char* fn) {
  const std::string f(fn);
  check(cu.size() >= 2, f + ": cu_seqlens needs at least 2 entries, got " + std::to_string(cu.size()));
  check(cu.front() == 0, f + ": cu_seqlens[0] must be 0, got " + std::to_string(cu.front()));
  for (size_t i = 1; i < cu.size(); ++i)
    check(cu[i] >= cu[i - 1], f + ": cu_seqlens decreases at entry " + std::to_string(i) + " (" +
                                  std::to_string(cu[i - 1]) + " -> " + std::to_string(cu[i]) + ")");
  check(static_cast<size_t>(cu.back()) == T, f + ": cu_seqlens ends at " + std::to_string(cu.back()) +
                                                 " but the micro-batch has " + std::to_string(T) + " tokens");
}

void check_cp(int cp, int rank, const char* fn) {
  const std::string f(fn);
  check(cp >= 1, f + ": cp size must be >= 1, got " + std::to_string(cp));
  check(rank >= 0 && rank < cp,
        f + ": cp rank " + std::to_string(rank) + " is outside [0, " + std::to_string(cp) + ")");
}

}  // namespace

std::vector<int32_t> shift_labels(const std::vector<int32_t>& labels, const std::vector<int32_t>& cu_seqlens) {
  check_cu(cu_seqlens, labels.size(), "shift_labels");
  std::vector<int32_t> t(labels.size(), kIgnoreIndex);
  for (size_t s = 0; s + 1 < cu_seqlens.size(); ++s)
    for (int32_t i = cu_seqlens[s]; i + 1 < cu_seqlens[s + 1]; ++i)
      t[static_cast<size_t>(i)] = labels[static_cast<size_t>(i) + 1];
  return t;
}

std::vector<int32_t> cp_local_global_index(const std::vector<int32_t>& gcu, int cp, int rank) {
  check_cp(cp, rank, "cp_local_global_index");
  check(gcu.size() >= 2 && gcu.front() == 0, "cp_local_global_index: global split units must start at 0");
  const int64_t n_chunks = 2 * static_cast<int64_t>(cp);
  std::vector<int32_t> gi;
  gi.reserve(static_cast<size_t>(gcu.back() / cp));
  for (int half = 0; half < 2; ++half) {
    const int64_t chunk = half == 0 ? rank : n_chunks - 1 - rank;
    for (size_t s = 0; s + 1 < gcu.size(); ++s) {
      const int64_t L = gcu[s + 1] - gcu[s];
      check(L >= 0 && L % n_chunks == 0, "cp_local_global_index: split unit " + std::to_string(s) + " has length " +
                                             std::to_string(L) + ", not a multiple of 2*cp = " +
                                             std::to_string(n_chunks));
      const int64_t c = L / n_chunks;
      for (int64_t i = 0; i < c; ++i) gi.push_back(static_cast<int32_t>(gcu[s] + chunk * c + i));
    }
  }
  return gi;
}

CpShard cp_pad_and_split(const std::vector<int32_t>& ids, const std::vector<int32_t>& targets,
                         const std::vector<int32_t>& positions, const std::vector<int32_t>& cu_seqlens, int cp,
                         int rank, int64_t multiple, const std::vector<int32_t>& unit_cu_in) {
  check_cp(cp, rank, "cp_pad_and_split");
  check(multiple >= 2 * cp && multiple % (2 * cp) == 0,
        "cp_pad_and_split: padding multiple " + std::to_string(multiple) + " is not a positive multiple of 2*cp = " +
            std::to_string(2 * cp));
  check(targets.size() == ids.size() && positions.size() == ids.size(),
        "cp_pad_and_split: input_ids (" + std::to_string(ids.size()) + "), targets (" +
            std::to_string(targets.size()) + ") and position_ids (" + std::to_string(positions.size()) +
            ") differ in length");
  check_cu(cu_seqlens, ids.size(), "cp_pad_and_split");
  const std::vector<int32_t>& unit_cu = unit_cu_in.empty() ? cu_seqlens : unit_cu_in;
  check_cu(unit_cu, ids.size(), "cp_pad_and_split (split units)");

  CpShard sh;
  sh.cp = cp;
  sh.rank = rank;
  const size_t nseg = cu_seqlens.size() - 1;
  // Padded global axis, unit by unit; segments keep their order, the pad of a unit joins its last segment.
  std::vector<int32_t> g_ids, g_tg, g_pos, unit_off;
  sh.global_unit_cu.assign(1, 0);
  for (size_t u = 0; u + 1 < unit_cu.size(); ++u) {
    const int64_t b = unit_cu[u], e = unit_cu[u + 1], L = e - b;
    check(std::binary_search(cu_seqlens.begin(), cu_seqlens.end(), unit_cu[u]),
          "cp_pad_and_split: split unit " + std::to_string(u) + " starts at token " + std::to_string(b) +
              ", inside a segment (unit boundaries must be segment boundaries)");
    const int64_t Lp = (L + multiple - 1) / multiple * multiple;
    check(sh.global_unit_cu.back() + Lp <= INT32_MAX, "cp_pad_and_split: padded micro-batch exceeds 2^31 tokens");
    unit_off.push_back(sh.global_unit_cu.back() - static_cast<int32_t>(b));  // global = original + offset
    for (int64_t t = b; t < e; ++t) {
      g_ids.push_back(ids[static_cast<size_t>(t)]);
      g_tg.push_back(targets[static_cast<size_t>(t)]);
      g_pos.push_back(positions[static_cast<size_t>(t)]);
    }
    const int32_t p0 = L > 0 ? positions[static_cast<size_t>(e - 1)] + 1 : 0;
    for (int64_t i = 0; i < Lp - L; ++i) {
      g_ids.push_back(0);
      g_tg.push_back(kIgnoreIndex);
      g_pos.push_back(static_cast<int32_t>(p0 + i));
    }
    sh.global_unit_cu.push_back(static_cast<int32_t>(sh.global_unit_cu.back() + Lp));
    sh.chunk_len.push_back(static_cast<int32_t>(Lp / (2 * cp)));
  }
  // Segment boundaries on the padded axis: a boundary on a unit boundary maps to the padded unit
  // boundary (so the pad joins the segment that ends there), one inside unit u moves by its offset.
  sh.global_cu_seqlens.resize(nseg + 1);
  for (size_t s = 0; s <= nseg; ++s) {
    const int32_t c = cu_seqlens[s];
    const auto it = std::lower_bound(unit_cu.begin(), unit_cu.end(), c);
    const size_t u = static_cast<size_t>(it - unit_cu.begin());
    if (it != unit_cu.end() && *it == c)
      sh.global_cu_seqlens[s] = sh.global_unit_cu[u];
    else
      sh.global_cu_seqlens[s] = c + unit_off[u - 1];
  }
  sh.global_tokens = sh.global_unit_cu.back();
  sh.global_index = cp_local_global_index(sh.global_unit_cu, cp, rank);
  std::vector<int32_t> g_seg(static_cast<size_t>(sh.global_tokens));
  for (size_t s = 0; s < nseg; ++s)
    for (int32_t t = sh.global_cu_seqlens[s]; t < sh.global_cu_seqlens[s + 1]; ++t) g_seg[static_cast<size_t>(t)] =
        static_cast<int32_t>(s);
  const size_t T = sh.global_index.size();
  sh.ids.resize(T);
  sh.targets.resize(T);
  sh.positions.resize(T);
  sh.segment.resize(T);
  for (size_t i = 0; i < T; ++i) {
    const size_t g = static_cast<size_t>(sh.global_index[i]);
    sh.ids[i] = g_ids[g];
    sh.targets[i] = g_tg[g];
    sh.positions[i] = g_pos[g];
    sh.segment[i] = g_seg[g];
    if (sh.targets[i] != kIgnoreIndex) ++sh.num_targets;
  }
  return sh;
}

CpShard cp_split_micro_batch(const MicroBatch& mb, int cp, int rank, int tp, bool sequence_parallel,
                             bool per_row) {
  check(tp >= 1, "cp_split_micro_batch: tp size must be >= 1, got " + std::to_string(tp));
  const int64_t multiple = 2 * static_cast<int64_t>(cp) * (sequence_parallel ? tp : 1);
  std::vector<int32_t> rows;
  if (per_row) {
    check(mb.batch >= 1 && mb.batch * mb.seq == static_cast<int64_t>(mb.input_ids.size()),
          "cp_split_micro_batch: batch " + std::to_string(mb.batch) + " x seq " + std::to_string(mb.seq) +
              " does not match " + std::to_string(mb.input_ids.size()) + " tokens");
    for (int64_t r = 0; r <= mb.batch; ++r) rows.push_back(static_cast<int32_t>(r * mb.seq));
  }
  return cp_pad_and_split(mb.input_ids, shift_labels(mb.labels, mb.cu_seqlens), mb.position_ids, mb.cu_seqlens, cp,
                          rank, multiple, rows);
}

}  // namespace twinkle::parallel
