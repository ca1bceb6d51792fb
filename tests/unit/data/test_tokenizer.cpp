// Unit tests of twinkle::Tokenizer. Expected ids / strings for the Qwen3 file were produced by
// the Rust HF tokenizers library (@anush008/tokenizers 0.6.0 = tokenizers 0.22); the full
// comparison on thousands of strings is tests/tokenizer.cmake (tok_check.py).
// Needs models/qwen3-tiny/tokenizer.json (scripts/fetch-assets): missing -> the tests FAIL.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/data/tokenizer.h"

using twinkle::Tokenizer;
using Ids = std::vector<int32_t>;

namespace {

std::string model_dir() { return std::string(TWINKLE_SOURCE_DIR) + "/models/qwen3-tiny"; }

const Tokenizer& qwen() {
  static const Tokenizer t = [] {
    if (!std::filesystem::exists(model_dir() + "/tokenizer.json"))
      throw std::runtime_error(model_dir() + "/tokenizer.json missing: run scripts/fetch-assets");
    return Tokenizer::from_dir(model_dir());
  }();
  return t;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const twinkle::Error& e) {
    return e.what();
  }
  return "<no twinkle::Error>";
}

}  // namespace

TEST(Tokenizer, QwenIdsMatchRustReference) {
  const Tokenizer& t = qwen();
  EXPECT_EQ(t.encode("Hello world<|im_start|>I'M you'll"), (Ids{9707, 1879, 151644, 40, 27603, 498, 3278}));
  EXPECT_EQ(t.encode("e\u0301"), (Ids{963}));  // NFC composes to U+00E9 first
  EXPECT_EQ(t.encode("你好，世界！"), (Ids{108386, 3837, 99489, 6313}));
  EXPECT_EQ(t.encode("  <think>\nx</think>  "), (Ids{256, 151667, 198, 87, 151668, 256}));
  EXPECT_EQ(t.encode("x'\u017F don'T"), (Ids{87, 6, 144815, 1513, 17323}));
  EXPECT_EQ(t.encode("a\u0085b\u00A0c\u3000d"), (Ids{64, 126, 227, 65, 4102, 66, 22441, 67}));
  EXPECT_EQ(t.encode("\U0001F468\u200D\U0001F469\u200D\U0001F467 12345"),
            (Ids{145367, 378, 235, 145233, 378, 235, 145665, 220, 16, 17, 18, 19, 20}));
  EXPECT_EQ(t.encode("\r\n\t  \n"), (Ids{319, 38320}));
  EXPECT_EQ(t.encode("<|im_end|><|endoftext|>"), (Ids{151645, 151643}));
  EXPECT_EQ(t.encode(""), Ids{});
  EXPECT_EQ(t.encode("Hello", /*add_special_tokens=*/true), (Ids{9707}));  // ByteLevel post-processor adds none
}

TEST(Tokenizer, QwenMetadata) {
  const Tokenizer& t = qwen();
  EXPECT_EQ(t.vocab_size(), 151669);
  EXPECT_EQ(t.pad_token_id(), 151643);  // <|endoftext|>
  EXPECT_EQ(t.eos_token_id(), 151645);  // <|im_end|>
  EXPECT_EQ(t.token_to_id("<think>"), 151667);
  EXPECT_EQ(t.token_to_id("Hello"), 9707);
  EXPECT_EQ(t.token_to_id("\u0120world"), 1879);  // byte-level form of " world"
  EXPECT_FALSE(t.token_to_id("no such token").has_value());
  EXPECT_EQ(t.id_to_token(9707), "Hello");
  EXPECT_EQ(t.id_to_token(151644), "<|im_start|>");
  EXPECT_TRUE(t.is_special(151644));
  EXPECT_FALSE(t.is_special(151667));  // <think> is an added, non-special token
  EXPECT_NE(t.chat_template().find("last_query_index"), std::string::npos);
  EXPECT_NE(error_of([&] { t.id_to_token(200000); }).find("200000"), std::string::npos);
}

TEST(Tokenizer, DecodeMatchesRustReference) {
  const Tokenizer& t = qwen();
  const int32_t ae = 160, half = 121, a = 64;  // byte-level symbols of bytes 0xE4, 0xBD and 'a'
  EXPECT_EQ(t.decode({ae}), "\uFFFD");
  EXPECT_EQ(t.decode({ae, half}), "\uFFFD");  // one U+FFFD per maximal ill-formed subpart
  EXPECT_EQ(t.decode({ae, a}), "\uFFFDa");
  EXPECT_EQ(t.decode({151644, 9707, 151645, 151667}), "<|im_start|>Hello<|im_end|><think>");
  EXPECT_EQ(t.decode({151644, 9707, 151645, 151667}, true), "Hello<think>");
  EXPECT_EQ(t.decode({ae, 151645, a}, true), "\uFFFDa");
  const std::string s = "def f(x):\n\treturn x ** 2  # 平方 😀\r\n";
  EXPECT_EQ(t.decode(t.encode(s)), s);
  const std::string err = error_of([&] { t.decode({1, 2, 999999}); });
  EXPECT_NE(err.find("999999"), std::string::npos) << err;
  EXPECT_NE(err.find("position 2"), std::string::npos) << err;
}

TEST(Tokenizer, InvalidUtf8NamesByteOffset) {
  const Tokenizer& t = qwen();
  struct Case {
    std::string text;
    size_t offset;
  };
  const std::vector<Case> cases = {
      {"ab\xFF" "cd", 2},                // invalid byte
      {"hello \xE4\xBD", 6},             // truncated 3-byte sequence at the end
      {"\xC0\x80", 0},                   // overlong NUL
      {"ok \xED\xA0\x80 x", 3},          // UTF-16 surrogate
      {"\xF4\x90\x80\x80", 0},           // above U+10FFFF
      {"\xE4\xBD\xA0\x80", 3},           // stray continuation byte after a valid char
      {"12345678\x80", 8},               // after the 8-byte ASCII fast path
  };
  for (const Case& c : cases) {
    const std::string err = error_of([&] { t.encode(c.text); });
    EXPECT_NE(err.find("invalid UTF-8 at byte offset " + std::to_string(c.offset)), std::string::npos) << err;
  }
}

TEST(Tokenizer, BatchAndThreadsAgreeWithSerial) {
  const Tokenizer& t = qwen();
  std::vector<std::string> texts;
  for (int i = 0; i < 400; ++i)
    texts.push_back("row " + std::to_string(i) + ": The quick brown fox 快速的棕色狐狸 " + std::string(i % 17, ' ') +
                    "<think>" + std::to_string(i * 7919) + "</think>");
  std::vector<Ids> serial;
  for (auto& s : texts) serial.push_back(t.encode(s));
  EXPECT_EQ(t.encode_batch(texts), serial);
  EXPECT_GT(Tokenizer::thread_cache_size(), 0u);
  std::atomic<int> bad{0};
  std::vector<std::thread> th;
  for (int k = 0; k < 4; ++k)
    th.emplace_back([&, k] {
      const Tokenizer copy = t;  // copies share the loaded data
      for (size_t i = k; i < texts.size(); i += 2)
        if (copy.encode(texts[i]) != serial[i]) ++bad;
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(bad.load(), 0);
  std::vector<std::string> with_bad = {"fine", "bad \xFF"};
  EXPECT_NE(error_of([&] { t.encode_batch(with_bad); }).find("text 1"), std::string::npos);
}

TEST(Tokenizer, LongRunsUseHeapMergeAndRoundTrip) {
  const Tokenizer& t = qwen();
  const std::string s = std::string(100000, ' ') + "x" + std::string(3000, '\n') + std::string(5000, '9');
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = t.encode(s);
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(t.decode(ids), s);
  EXPECT_LT(sec, 2.0);
  // 100000 spaces before a letter: the regex gives 99999 spaces (\s+(?!\S)), then " x".
  const Ids head = t.encode(std::string(99999, ' '));
  EXPECT_EQ(Ids(ids.begin(), ids.begin() + head.size()), head);
}

// --- small hand-checkable tokenizer.json files ------------------------------------------

TEST(Tokenizer, MergeRanksDecideOrder) {
  // No ByteLevel: symbols are the characters themselves.
  auto make = [](const std::string& merges) {
    return Tokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4,
      "abc": 5}, "merges": )" + merges + "}}");
  };
  // (b,c) has the lowest rank: a|bc, then (a,bc).
  EXPECT_EQ(make(R"(["b c", "a b", "a bc"])").encode("abc"), (Ids{5}));
  EXPECT_EQ(make(R"([["b", "c"], ["a", "b"]])").encode("abc"), (Ids{0, 4}));
  // (a,b) first: ab|c, and (ab,c) is not a merge.
  EXPECT_EQ(make(R"(["a b", "b c"])").encode("abc"), (Ids{3, 2}));
  // Ties (same pair twice): leftmost first.
  EXPECT_EQ(make(R"(["a b"])").encode("abab"), (Ids{3, 3}));
  // Without unk_token an unknown character is dropped before merging (checked with the Rust
  // library: "axb" -> [ab]).
  EXPECT_EQ(make(R"(["a b"])").encode("axb"), (Ids{3}));
  EXPECT_EQ(make(R"(["a b"])").decode({3, 2}), "ab c");  // no decoder: tokens joined by spaces
}

TEST(Tokenizer, TemplateProcessingAddsSpecialTokens) {
  const Tokenizer t = Tokenizer::from_json(R"({
    "added_tokens": [{"id": 3, "content": "<s>", "special": true}, {"id": 4, "content": "</s>", "special": true}],
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [3], "tokens": ["<s>"]},
                         "</s>": {"id": "</s>", "ids": [4], "tokens": ["</s>"]}}},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})");
  EXPECT_EQ(t.encode("ab"), (Ids{2}));
  EXPECT_EQ(t.encode("ab", true), (Ids{3, 2, 4}));
  EXPECT_EQ(t.encode("a<s>b"), (Ids{0, 3, 1}));
  EXPECT_EQ(t.decode({3, 2, 4}, true), "ab");
  EXPECT_EQ(t.vocab_size(), 5);
}

TEST(Tokenizer, LoadErrorsNameFieldAndType) {
  auto err = [](const std::string& j) { return error_of([&] { Tokenizer::from_json(j, "x.json"); }); };
  const std::string model = R"("model": {"type": "BPE", "vocab": {"a": 0}, "merges": []})";
  EXPECT_NE(err("{" + model + R"(, "normalizer": {"type": "BertNormalizer"}})").find("BertNormalizer"),
            std::string::npos);
  EXPECT_NE(err("{" + model + R"(, "pre_tokenizer": {"type": "Metaspace"}})").find("Metaspace"), std::string::npos);
  EXPECT_NE(err("{" + model + R"(, "decoder": {"type": "WordPiece"}})").find("WordPiece"), std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "Unigram", "vocab": []}})").find("Unigram"), std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})").find("merges[0]"),
            std::string::npos);
  EXPECT_NE(err(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a a"]}})").find("merges[0]"),
            std::string::npos);
  EXPECT_NE(err("{" + model + R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "("}}})").find("regex"),
            std::string::npos);
  EXPECT_NE(err("not json").find("x.json"), std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer::from_dir("/nonexistent/dir"); }).find("/nonexistent/dir/tokenizer.json"),
            std::string::npos);
  EXPECT_NE(error_of([] { Tokenizer().encode("x"); }).find("default-constructed"), std::string::npos);
}
