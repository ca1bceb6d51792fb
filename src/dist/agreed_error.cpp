#include "twinkle/dist/agreed_error.h"

#include <cstring>
#include <limits>
#include <vector>

#include "twinkle/core/error.h"

namespace twinkle::dist {

void throw_agreed_error(ProcessGroup& group, int64_t failed, const std::string& local_error) {
  if (failed == 0) return;
  // The lowest group rank that refused speaks for all.
  int64_t who = local_error.empty() ? std::numeric_limits<int64_t>::max() : group.rank();
  if (group.size() > 1) group.all_reduce(&who, 1, DType::I64, ReduceOp::Min);
  check(who >= 0 && who < group.size(), "throw_agreed_error: " + std::to_string(failed) +
                                            " rank(s) of group " + group.name() + " refused but none gave a reason");
  const int root = static_cast<int>(who);
  std::string text = group.rank() == root ? local_error : std::string();
  if (group.size() > 1) {
    int64_t len = static_cast<int64_t>(text.size());
    group.broadcast(&len, 1, DType::I64, root);
    std::vector<int32_t> words(static_cast<size_t>((len + 3) / 4), 0);  // the text as 4-byte words
    if (group.rank() == root) std::memcpy(words.data(), text.data(), text.size());
    if (!words.empty()) group.broadcast(words.data(), static_cast<int64_t>(words.size()), DType::I32, root);
    text.assign(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(len));
  }
  // Named by its rank in the group (the same text in every group of the same kind, e.g. the dp-cp
  // groups of the pipeline stages); a one-rank group needs no name.
  if (group.size() == 1) throw Error(text);
  throw Error(group.name() + " rank " + std::to_string(root) + ": " + text);
}

}  // namespace twinkle::dist
