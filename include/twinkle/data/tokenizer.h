// twinkle/data/tokenizer.h — Hugging Face byte-level BPE tokenizer (tokenizer.json).
//
// Semantics follow the Rust `tokenizers` library (0.22, the reference of the tests) as used by
// Qwen3: added tokens matched first (with lstrip/rstrip/single_word/normalized flags), NFC
// normalizer, Split pre-tokenizer on Qwen's regex (PCRE2, JIT) then ByteLevel, BPE merges by
// rank, ByteLevel decoder. Ids are identical to the Rust library's for every code point
// (tests/tokenizer.cmake sweeps all of the BMP and the changed ranges above it), including
// where the engines' Unicode versions differ: the Rust library's regex (Oniguruma) has
// Unicode 16.0 letters/digits and White_Space without U+180E, its normalizer Unicode 9.0
// tables, its Lowercase Rust std's Unicode 17.0 mappings; Debian 12's PCRE2 has Unicode 14.0
// and utf8proc 15.0, so the differences are tabulated in src/data/tokenizer/regex.cpp (regex) and
// src/data/tokenizer/unicode.cpp (normalizers, Lowercase).
// Added-token ids are the ones the Rust library assigns (re-added in file order after the
// vocab), like it, whatever ids the file states.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace twinkle {

class Tokenizer {
 public:
  /// Loads `dir`/tokenizer.json (and tokenizer_config.json when present, for the
  /// chat template, pad/eos tokens). Throws twinkle::Error naming the file and field.
  static Tokenizer from_dir(const std::string& dir);
  /// Loads one tokenizer.json file.
  static Tokenizer from_file(const std::string& tokenizer_json);
  /// Parses tokenizer.json text held in memory; `name` is used in error messages.
  /// Supported (everything else throws twinkle::Error naming the field and type):
  ///   normalizer: null, NFC, NFD, NFKC, NFKD (utf8proc), Lowercase, Sequence;
  ///   pre_tokenizer: null, Split (Regex or String pattern, all five behaviors, invert),
  ///     ByteLevel (add_prefix_space, use_regex), Sequence;
  ///   model: BPE (merges as "a b" strings or ["a","b"] pairs, ignore_merges, unk_token,
  ///     fuse_unk; dropout must be null);
  ///   post_processor: null, ByteLevel, TemplateProcessing (single sequence);
  ///   decoder: null, ByteLevel.
  static Tokenizer from_json(const std::string& json_text, const std::string& name = "<tokenizer.json>");

  /// Token ids of `text` (valid UTF-8; invalid UTF-8 -> twinkle::Error naming the byte offset).
  /// add_special_tokens adds the post-processor's tokens (none for Qwen3).
  ///
  /// Pipeline (Rust `tokenizers` 0.22, tokenizer/mod.rs + added_vocabulary.rs):
  ///  1. added tokens with normalized=false are split out of the raw text (leftmost-longest
  ///     match, single_word / lstrip / rstrip as AddedVocabulary::find_matches);
  ///  2. each remaining piece is normalized (NFC for Qwen3), then added tokens with
  ///     normalized=true are split out of the normalized piece;
  ///  3. the pre-tokenizer splits the rest (Qwen3: its Split regex via PCRE2 JIT in
  ///     UTF+UCP mode, then ByteLevel byte->char mapping);
  ///  4. each pre-token is merged by BPE (lowest merge rank first, leftmost on ties,
  ///     priority-queue algorithm of models/bpe/word.rs). Results of pre-tokens shorter
  ///     than 256 bytes are cached per thread.
  /// Thread-safe: one Tokenizer may encode from many threads at once.
  /// Throws twinkle::Error("invalid UTF-8 at byte offset N ...") for malformed input.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  /// encode() of each text, in parallel over texts (std::thread, one per hardware thread).
  /// The first failure is rethrown as twinkle::Error("text I: ...").
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& texts,
                                                 bool add_special_tokens = false) const;
  /// Text of `ids` (ByteLevel decoder); skip_special_tokens drops special added tokens.
  /// Like the Rust library: token strings are concatenated, mapped back to bytes
  /// (byte-level chars) and invalid UTF-8 is replaced by U+FFFD per maximal subpart
  /// (String::from_utf8_lossy). An id outside [0, vocab_size()) or unassigned throws
  /// twinkle::Error naming the id and its position.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(const std::string& token) const;
  std::string id_to_token(int32_t id) const;
  /// Largest id + 1 over the vocab and the added tokens.
  int64_t vocab_size() const;
  /// Pad id from tokenizer_config.json (Qwen3: <|endoftext|>), else eos, else 0.
  int32_t pad_token_id() const;
  /// eos id from tokenizer_config.json (Qwen3: <|im_end|>), or -1.
  int32_t eos_token_id() const;
  /// The Jinja chat_template string from tokenizer_config.json ("" if none).
  const std::string& chat_template() const;
  /// True when `id` is an added token marked special (skipped by decode(..., true)).
  bool is_special(int32_t id) const;
  /// Number of pre-tokens cached by the calling thread for the tokenizer it used last
  /// (the cache holds at most 65536 words shorter than 256 bytes; tests / benchmarks).
  static size_t thread_cache_size();

  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&);
  Tokenizer& operator=(const Tokenizer&);

 private:
  struct Impl;
  const Impl& checked() const;  // throws twinkle::Error when default-constructed
  std::shared_ptr<const Impl> impl_;
};

}  // namespace twinkle
