// src/data/tokenizer/impl.h — Tokenizer::Impl, the loaded tokenizer.json (load.cpp) and the
// declarations of its encode pipeline: encode.cpp (added tokens, normalizer), pre_tokenizer.cpp,
// bpe.cpp (the BPE model). Internal header (not installed).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "added_tokens.h"
#include "hash_tables.h"
#include "pre_tokenizer.h"
#include "regex.h"
#include "twinkle/data/tokenizer.h"
#include "unicode.h"

namespace twinkle {

struct Tokenizer::Impl {
  uint64_t uid = 0;
  std::string name;

  // normalizer
  std::vector<tok::NormKind> norms;
  // pre-tokenizer
  std::vector<tok::PreStep> steps;
  bool byte_level = false;  // a ByteLevel pre-tokenizer maps bytes to chars before the model
  const tok::Regex* single_split = nullptr;  // fast path: exactly [Split Isolated, ByteLevel(no regex)]

  // BPE model
  std::unordered_map<std::string, int32_t> vocab;  // token string as in tokenizer.json
  std::vector<std::string> id_to_tok;              // "" for holes
  std::vector<uint8_t> id_assigned;
  int32_t byte_id[256];
  tok::MergeTable merges;
  bool ignore_merges = false;
  std::unordered_map<std::string, int32_t> vocab_raw;  // byte-level: raw bytes -> id (ignore_merges)
  int32_t unk_id = -1;
  bool fuse_unk = false, byte_fallback = false;
  std::string cont_prefix, end_suffix;

  // added vocabulary
  std::vector<tok::AddedToken> added;
  std::unordered_map<std::string, int32_t> added_by_content;
  std::unordered_set<int32_t> special_ids;
  tok::AddedMatcher raw_matcher, norm_matcher;

  // post-processor (TemplateProcessing single) and decoder
  std::vector<int32_t> post_prefix, post_suffix;
  enum class Decoder { None, ByteLevel } decoder = Decoder::None;
  std::vector<std::string> id_bytes;  // decoded bytes per id (ByteLevel decoder)

  // tokenizer_config.json
  std::string chat_template;
  int32_t pad_id = 0, eos_id = -1;

  int64_t vocab_size = 0;

  // ---- encode pipeline ----
  void encode_into(std::string_view text, std::vector<int32_t>& out) const;
  void normalized_piece(std::string_view raw, std::vector<int32_t>& out) const;
  void pretokenize_and_model(std::string_view s, std::vector<int32_t>& out) const;
  void model_word(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_bytes(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_chars(std::string_view word, std::vector<int32_t>& out) const;
  void merge_symbols(std::vector<int32_t>& ids, std::vector<int32_t>& out) const;
  template <class Emit>
  void split_added(std::string_view s, const tok::AddedMatcher& m, const std::vector<int>& index, Emit&& emit) const;
  std::vector<int> raw_index, norm_index;  // matcher pattern index -> added token index
  std::string normalize(std::string_view s) const;
};

namespace tok {

// The calling thread's word cache (bpe.cpp); thread_cache(uid) resets it when it was last used
// for another tokenizer (Impl::uid).
WordCache& tl_cache();
WordCache& thread_cache(uint64_t uid);
// The cache of the encode() running on this thread (set by encode_into).
extern thread_local WordCache* tl_current_cache;

}  // namespace tok

}  // namespace twinkle
