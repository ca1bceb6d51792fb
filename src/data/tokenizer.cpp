// Hugging Face tokenizer.json (byte-level BPE) — see twinkle/data/tokenizer.h. This file holds
// the public API; the implementation is in src/data/tokenizer/, one concept a file, each naming
// the Rust `tokenizers` 0.22 files it follows (read for behaviour, not copied):
//   impl.h                Tokenizer::Impl: the loaded tokenizer, its encode pipeline
//   load.cpp              from_json / from_file / from_dir (models/bpe/model.rs merges,
//                         tokenizer/serialization.rs added-token ids)
//   encode.cpp            added tokens, normalizer (tokenizer/added_vocabulary.rs)
//   pre_tokenizer.h/.cpp  Split / ByteLevel steps (pre_tokenizers/split.rs, tokenizer/pattern.rs,
//                         pre_tokenizers/byte_level.rs)
//   bpe.cpp               BPE merge loop, word cache (models/bpe/{model,word}.rs)
//   added_tokens.h        added tokens' leftmost-longest trie
//   regex.h/.cpp          PCRE2 regex (JIT, UTF + UCP), aligned to the Rust library's Unicode version
//   unicode.h/.cpp        normalizers (utf8proc), \s / \w for the added-token flags
//   byte_table.h/.cpp     GPT-2 byte <-> unicode table (pre_tokenizers/byte_level.rs,
//                         decoders/byte_level.rs)
//   hash_tables.h         hashing, merge table, word cache (header-only: hot)
//   utf8.h/.cpp           UTF-8 helpers, String::from_utf8_lossy (decoders/byte_level.rs)
// decode() below is the ByteLevel decoder (decoders/byte_level.rs): chars -> bytes per token
// (byte_table.cpp), then String::from_utf8_lossy (utf8.cpp).
#include "twinkle/data/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/impl.h"
#include "tokenizer/utf8.h"
#include "twinkle/core/error.h"

namespace twinkle {

using tok::tl_cache;

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::Tokenizer(const Tokenizer&) = default;
Tokenizer& Tokenizer::operator=(const Tokenizer&) = default;

const Tokenizer::Impl& Tokenizer::checked() const {
  if (!impl_) throw Error("Tokenizer: used before loading (default-constructed)");
  return *impl_;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const Impl& I = checked();
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special_tokens) out.insert(out.end(), I.post_prefix.begin(), I.post_prefix.end());
  I.encode_into(text, out);
  if (add_special_tokens) out.insert(out.end(), I.post_suffix.begin(), I.post_suffix.end());
  return out;
}

std::vector<std::vector<int32_t>> Tokenizer::encode_batch(const std::vector<std::string>& texts,
                                                          bool add_special_tokens) const {
  checked();
  std::vector<std::vector<int32_t>> out(texts.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::string first_error;
  std::mutex mu;
  auto work = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= texts.size() || failed.load()) return;
      try {
        out[i] = encode(texts[i], add_special_tokens);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lk(mu);
        if (!failed.exchange(true)) first_error = "text " + std::to_string(i) + ": " + e.what();
      }
    }
  };
  const size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t nthreads = std::min(hw, texts.size() / 4 + 1);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < nthreads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  if (failed) throw Error(first_error);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& I = checked();
  std::string bytes;
  bool first = true;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int32_t id = ids[k];
    if (id < 0 || id >= I.vocab_size || !I.id_assigned[id])
      throw Error("tokenizer decode: id " + std::to_string(id) + " at position " + std::to_string(k) +
                  " is not in the vocabulary (size " + std::to_string(I.vocab_size) + ")");
    if (skip_special_tokens && I.special_ids.count(id)) continue;
    if (I.decoder == Impl::Decoder::None && !first) bytes.push_back(' ');
    bytes += I.id_bytes[id];
    first = false;
  }
  return tok::utf8_lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(const std::string& token) const {
  const Impl& I = checked();
  auto a = I.added_by_content.find(token);
  if (a != I.added_by_content.end()) return a->second;
  auto v = I.vocab.find(token);
  if (v != I.vocab.end()) return v->second;
  return std::nullopt;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const Impl& I = checked();
  if (id < 0 || id >= I.vocab_size || !I.id_assigned[id])
    throw Error("tokenizer id_to_token: id " + std::to_string(id) + " is not in the vocabulary");
  return I.id_to_tok[id];
}

int64_t Tokenizer::vocab_size() const { return checked().vocab_size; }
int32_t Tokenizer::pad_token_id() const { return checked().pad_id; }
int32_t Tokenizer::eos_token_id() const { return checked().eos_id; }
const std::string& Tokenizer::chat_template() const { return checked().chat_template; }
bool Tokenizer::is_special(int32_t id) const { return checked().special_ids.count(id) > 0; }

size_t Tokenizer::thread_cache_size() { return tl_cache().size(); }

}  // namespace twinkle
