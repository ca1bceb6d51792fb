// Unit tests of twinkle::Template (Qwen3). Expected renders were produced by python3-jinja2
// rendering the real chat_template (tests/reference/template_ref.py environment); the full
// comparison on hundreds of conversations is tests/tokenizer.cmake (template_check.py).
// Needs models/qwen3-tiny/tokenizer*.json (scripts/fetch-assets): missing -> the tests FAIL.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/data/template.h"

using namespace twinkle;
using Ids = std::vector<int32_t>;

namespace {

std::string model_dir() { return std::string(TWINKLE_SOURCE_DIR) + "/models/qwen3-tiny"; }

const Tokenizer& tok() {
  static const Tokenizer t = Tokenizer::from_dir(model_dir());
  return t;
}

Template make(int64_t max_length = 8192, const std::string& truncation = "raise", bool thinking = true,
              const std::string& system = "") {
  TemplateOptions o;
  o.model_id = model_dir();
  o.max_length = max_length;
  o.truncation = truncation;
  o.enable_thinking = thinking;
  o.default_system = system;
  return Template("qwen3", o, tok());
}

Message U(const std::string& c) { return {"user", c, "", false}; }
Message A(const std::string& c) { return {"assistant", c, "", false}; }
Message AR(const std::string& c, const std::string& r) { return {"assistant", c, r, true}; }
Message S(const std::string& c) { return {"system", c, "", false}; }
Message T(const std::string& c) { return {"tool", c, "", false}; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const twinkle::Error& e) {
    return e.what();
  }
  return "<no twinkle::Error>";
}

Ids cat(std::initializer_list<Ids> parts) {
  Ids r;
  for (auto& p : parts) r.insert(r.end(), p.begin(), p.end());
  return r;
}

}  // namespace

TEST(Template, RendersLikeJinja) {
  const Template t = make();
  EXPECT_EQ(t.render({U("Hi"), A("Hello!")}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>\n");
  EXPECT_EQ(t.render({S("S"), U("q1"), AR("r1", "t1"), U("q2"), A("<think>\nt2\n</think>\n\nr2")}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\nr1<|im_end|>\n"
            "<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\nt2\n</think>\n\nr2<|im_end|>\n");
  EXPECT_EQ(t.render({U("q"), A("a"), T("1"), T("2"), A("b")}),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n<|im_start|>user\n<tool_response>\n1\n"
            "</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n"
            "</think>\n\nb<|im_end|>\n");
  EXPECT_EQ(t.render({U("Hi")}), "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(t.render({U("Hi")}, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(make(8192, "raise", false).render({U("Hi")}, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(make(8192, "raise", true, "Be brief.").render({U("Hi")}),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_NE(error_of([&] { t.render({}); }).find("no messages"), std::string::npos);
  EXPECT_NE(error_of([&] { t.render({{"bot", "x", "", false}}); }).find("bot"), std::string::npos);
}

TEST(Template, LabelsCoverAssistantTurns) {
  const Template t = make();
  const auto rows = t.encode({U("Hi"), A("Hello!")});
  ASSERT_EQ(rows.size(), 1u);
  const EncodedRow& r = rows[0];
  const Ids prompt = tok().encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const Ids answer = tok().encode("<think>\n\n</think>\n\nHello!<|im_end|>\n");
  EXPECT_EQ(r.input_ids, cat({prompt, answer}));
  EXPECT_EQ(r.labels, cat({Ids(prompt.size(), kIgnoreIndex), answer}));
  EXPECT_EQ(r.length, static_cast<int64_t>(prompt.size() + answer.size()));
  EXPECT_EQ(r.attention_mask, Ids(r.input_ids.size(), 1));
  for (size_t i = 0; i < r.position_ids.size(); ++i) EXPECT_EQ(r.position_ids[i], static_cast<int32_t>(i));
  // Twinkle's prefix rule agrees on a single turn.
  EXPECT_EQ(prompt.size(), t.encode_prompt({U("Hi")}).size());

  // Multi-turn: the earlier turn is labelled as rendered in the whole conversation (no think block).
  const auto mt = t.encode({U("q1"), A("r1"), U("q2"), A("r2")})[0];
  const Ids p1 = tok().encode("<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\n");
  const Ids a1 = tok().encode("r1<|im_end|>\n");
  const Ids p2 = tok().encode("<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n");
  const Ids a2 = tok().encode("<think>\n\n</think>\n\nr2<|im_end|>\n");
  EXPECT_EQ(mt.input_ids, cat({p1, a1, p2, a2}));
  EXPECT_EQ(mt.labels, cat({Ids(p1.size(), kIgnoreIndex), a1, Ids(p2.size(), kIgnoreIndex), a2}));

  // A conversation ending with a user turn has no labels after the last assistant turn.
  const auto ends_user = t.encode({U("q1"), A("r1"), U("q2")})[0];
  EXPECT_EQ(ends_user.labels.back(), kIgnoreIndex);

  // No label boundary when an earlier turn starts with newlines ("assistant\n\n\n" is one token).
  const std::string err = error_of([&] { t.encode({U("q1"), A("\n\nr1"), U("q2"), A("r2")}, "data.jsonl:7"); });
  EXPECT_NE(err.find("row data.jsonl:7"), std::string::npos) << err;
  EXPECT_NE(err.find("label boundary of assistant turn 0"), std::string::npos) << err;
}

TEST(Template, EncodePromptAppendsAssistantHeader) {
  const Ids p = make().encode_prompt({S("sys"), U("Hi")});
  const Ids tail = tok().encode("<|im_start|>assistant\n");
  ASSERT_GE(p.size(), tail.size());
  EXPECT_EQ(Ids(p.end() - tail.size(), p.end()), tail);
  const Ids q = make(8192, "raise", false).encode_prompt({U("Hi")});
  const Ids think = tok().encode("<think>\n\n</think>\n\n");
  EXPECT_EQ(Ids(q.end() - think.size(), q.end()), think);
}

// ms-swift's ignore_empty_think (regex ^<think>\s*</think>\s*, Python str semantics): tokens
// wholly inside the match get -100, ids stay the whole conversation's. Expected ids from the HF
// Rust tokenizer (@anush008/tokenizers) on the jinja2 render; the full comparison is
// template_check.py --ignore-empty-think.
TEST(Template, IgnoreEmptyThinkMasksWholeTokensOfTheMatch) {
  TemplateOptions o;
  o.model_id = model_dir();
  o.ignore_empty_think = true;
  const Template t("qwen3", o, tok());
  const Ids prompt = {151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198};  // user Hi, assistant header
  const auto expect = [&](const std::string& content, const Ids& turn, size_t masked) {
    const auto rows = t.encode({U("Hi"), A(content)});
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].input_ids, cat({prompt, turn})) << content;
    Ids labels(prompt.size() + masked, kIgnoreIndex);
    labels.insert(labels.end(), turn.begin() + static_cast<std::ptrdiff_t>(masked), turn.end());
    EXPECT_EQ(rows[0].labels, labels) << content;
  };
  // <think> \n\n </think> \n\n masked; Hello <|im_end|> \n trained
  expect("Hello", {151667, 271, 151668, 271, 9707, 151645, 198}, 4);
  // content starting with a space: the regex's trailing \s* eats the space, but " Hello" is one
  // token holding content: it stays trained (this threw "label boundary ... inside a token")
  expect(" Hello", {151667, 271, 151668, 271, 21927, 151645, 198}, 4);
  // U+3000 (ideographic space) is \s for Python's re: its own token, wholly inside the match
  expect("\u3000\u4f60\u597d", {151667, 271, 151668, 271, 22441, 108386, 151645, 198}, 5);
  // reasoning " U+2003" (em space, 2 byte-level tokens) and content "U+00A0 U+3000 \n\n 你好": all of
  // the whitespace is \s, so everything up to 你好 is masked (ASCII-only \s would match nothing)
  const auto rows = t.encode({U("Hi"), AR("\u00a0\u3000\n\n\u4f60\u597d", " \u2003")});
  ASSERT_EQ(rows.size(), 1u);
  const Ids turn = tok().encode("<think>\n \u2003\n</think>\n\n\u00a0\u3000\n\n\u4f60\u597d<|im_end|>\n");
  EXPECT_EQ(rows[0].input_ids, cat({prompt, turn}));
  ASSERT_GE(turn.size(), 3u);
  EXPECT_EQ(Ids(turn.end() - 3, turn.end()), (Ids{108386, 151645, 198}));
  Ids labels(prompt.size() + turn.size() - 3, kIgnoreIndex);
  labels.insert(labels.end(), {108386, 151645, 198});
  EXPECT_EQ(rows[0].labels, labels);
  // off: the whole turn is trained
  const auto plain = make().encode({U("Hi"), A(" Hello")})[0];
  EXPECT_EQ(Ids(plain.labels.end() - 7, plain.labels.end()), (Ids{151667, 271, 151668, 271, 21927, 151645, 198}));
}

TEST(Template, TruncationStrategies) {
  const std::vector<Message> conv = {U("Tell me a story."), A("Once upon a time there was a tokenizer that counted.")};
  const EncodedRow full = make().encode(conv)[0];
  const int64_t L = full.length, M = 10;
  ASSERT_GT(L, 2 * M);

  std::string err = error_of([&] { make(M, "raise").encode(conv, "f.jsonl:3"); });
  EXPECT_NE(err.find("row f.jsonl:3: length " + std::to_string(L) + " exceeds max_length 10"), std::string::npos)
      << err;

  auto left = make(M, "left").encode(conv);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].input_ids, Ids(full.input_ids.end() - M, full.input_ids.end()));
  EXPECT_EQ(left[0].labels, Ids(full.labels.end() - M, full.labels.end()));
  EXPECT_EQ(left[0].length, M);
  EXPECT_EQ(left[0].position_ids.front(), 0);

  auto right = make(M, "right").encode(conv);
  ASSERT_EQ(right.size(), 1u);
  EXPECT_EQ(right[0].input_ids, Ids(full.input_ids.begin(), full.input_ids.begin() + M));
  EXPECT_EQ(right[0].labels, Ids(full.labels.begin(), full.labels.begin() + M));

  EXPECT_TRUE(make(M, "delete").encode(conv).empty());
  EXPECT_EQ(make(L, "delete").encode(conv).size(), 1u);  // exactly max_length is kept

  auto split = make(M, "split").encode(conv);
  ASSERT_EQ(static_cast<int64_t>(split.size()), (L + M - 1) / M);
  Ids joined, joined_labels;
  for (size_t k = 0; k < split.size(); ++k) {
    const EncodedRow& r = split[k];
    EXPECT_EQ(r.length, k + 1 < split.size() ? M : L - M * static_cast<int64_t>(split.size() - 1));
    EXPECT_EQ(r.attention_mask, Ids(r.length, 1));
    for (int64_t i = 0; i < r.length; ++i) EXPECT_EQ(r.position_ids[i], i);
    joined.insert(joined.end(), r.input_ids.begin(), r.input_ids.end());
    joined_labels.insert(joined_labels.end(), r.labels.begin(), r.labels.end());
  }
  EXPECT_EQ(joined, full.input_ids);
  EXPECT_EQ(joined_labels, full.labels);
}

TEST(Template, OptionsAndNamesAreChecked) {
  TemplateOptions o;
  o.model_id = model_dir();
  EXPECT_NE(error_of([&] { Template("llama3", o, tok()); }).find("llama3"), std::string::npos);
  o.truncation = "middle";
  EXPECT_NE(error_of([&] { Template("qwen3", o, tok()); }).find("middle"), std::string::npos);
  o.truncation = "raise";
  o.max_length = 0;
  EXPECT_NE(error_of([&] { Template("qwen3", o, tok()); }).find("max_length"), std::string::npos);
  o.max_length = 16;
  const Template by_dir("Template", o);  // resolves model_id and loads the tokenizer itself
  EXPECT_EQ(by_dir.tokenizer().vocab_size(), 151669);
  EXPECT_EQ(by_dir.options().max_length, 16);
}

TEST(Template, MessagesFromJson) {
  auto m = messages_from_json(
      R"({"messages": [{"role": "user", "content": "Hi"},
                       {"role": "assistant", "content": null, "reasoning_content": "r"},
                       {"role": "assistant", "content": "x", "reasoning_content": null}]})");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].role, "user");
  EXPECT_EQ(m[1].content, "");
  EXPECT_TRUE(m[1].has_reasoning_content);
  EXPECT_EQ(m[1].reasoning_content, "r");
  EXPECT_FALSE(m[2].has_reasoning_content);
  EXPECT_EQ(messages_from_json(R"([{"role": "user", "content": "a"}])").size(), 1u);
  auto err = [](const char* j) { return error_of([&] { messages_from_json(j, "in.jsonl:5"); }); };
  EXPECT_NE(err("{").find("in.jsonl:5"), std::string::npos);
  EXPECT_NE(err(R"({"msgs": []})").find("\"messages\""), std::string::npos);
  EXPECT_NE(err(R"({"messages": [{"content": "x"}]})").find("messages[0].role"), std::string::npos);
  EXPECT_NE(err(R"({"messages": [{"role": "robot", "content": "x"}]})").find("robot"), std::string::npos);
  EXPECT_NE(err(R"({"messages": [{"role": "user", "content": 3}]})").find("messages[0].content"), std::string::npos);
  EXPECT_NE(err(R"({"messages": [{"role": "assistant", "content": "", "tool_calls": [{}]}]})").find("tool_calls"),
            std::string::npos);
  // reasoning_content explicitly "" (defined): "</think>" stays in the content.
  const Template t = make();
  EXPECT_EQ(t.render(messages_from_json(
                R"([{"role":"user","content":"q"},{"role":"assistant","content":"a</think>b","reasoning_content":""}])")),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\na</think>b<|im_end|>\n");
  EXPECT_EQ(t.render(messages_from_json(R"([{"role":"user","content":"q"},{"role":"assistant","content":"a</think>b"}])")),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\na\n</think>\n\nb<|im_end|>\n");
}
