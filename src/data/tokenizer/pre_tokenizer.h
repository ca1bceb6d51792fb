// src/data/tokenizer/pre_tokenizer.h — the pre-tokenizer steps (Split and ByteLevel) as parsed
// from tokenizer.json (load.cpp) and applied by Impl::pretokenize_and_model (pre_tokenizer.cpp).
// Internal header (not installed).
#pragma once
#include <memory>

#include "regex.h"

namespace twinkle::tok {

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreStep {
  enum Kind { Split, ByteLevel } kind = Split;
  std::unique_ptr<Regex> re;  // Split pattern, or the GPT-2 regex for ByteLevel(use_regex)
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;
};

// The GPT-2 regex of ByteLevel(use_regex) (pre_tokenizers/byte_level.rs).
inline const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace twinkle::tok
