// twinkle/data/tokenizer.h — Hugging Face byte-level BPE tokenizer (tokenizer.json).
//
// Semantics follow the Rust `tokenizers` library as used by Qwen3: added tokens
// matched first (with lstrip/rstrip/normalized flags), NFC normalizer, Split
// pre-tokenizer on Qwen's regex (PCRE2, JIT) then ByteLevel, BPE merges by rank,
// ByteLevel decoder.
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

  /// Token ids of `text` (valid UTF-8; invalid UTF-8 -> twinkle::Error naming the byte offset).
  /// add_special_tokens adds the post-processor's tokens (none for Qwen3).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  /// Text of `ids` (ByteLevel decoder); skip_special_tokens drops special added tokens.
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

  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&);
  Tokenizer& operator=(const Tokenizer&);

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace twinkle
