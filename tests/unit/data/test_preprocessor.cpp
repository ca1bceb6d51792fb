// Preprocessors and the shipped data/self_cognition.jsonl.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "twinkle/core/error.h"
#include "twinkle/data/dataset.h"
#include "twinkle/data/preprocessor.h"

using namespace twinkle;

namespace {
template <class F>
void expect_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected twinkle::Error containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(SelfCognition, ReplacesEveryPlaceholderIgnoringTag) {
  SelfCognitionProcessor p("twinkle大模型", "ModelScope社区");
  json row{{"query", "{{NAME}}? {{NAME}}"}, {"response", "我是{{NAME}}，由{{AUTHOR}}开发"}, {"tag", "zh"}, {"extra", 1}};
  json out = p(row);
  EXPECT_EQ(out["query"], "twinkle大模型? twinkle大模型");
  EXPECT_EQ(out["response"], "我是twinkle大模型，由ModelScope社区开发");
  json want = json::array({{{"role", "system"}, {"content", "You are a helpful assistant."}},
                           {{"role", "user"}, {"content", "twinkle大模型? twinkle大模型"}},
                           {{"role", "assistant"}, {"content", "我是twinkle大模型，由ModelScope社区开发"}}});
  EXPECT_EQ(out["messages"], want);
  row["tag"] = "en";  // same names for English rows (Twinkle ignores tag)
  EXPECT_EQ(p(row)["response"], "我是twinkle大模型，由ModelScope社区开发");
  // Defaults; the replacement is literal (no recursive expansion).
  SelfCognitionProcessor d;
  EXPECT_EQ(d(json{{"query", "x"}, {"response", "{{NAME}}/{{AUTHOR}}"}})["response"], "twinkle robot/twinkle lab");
  SelfCognitionProcessor self("{{NAME}}", "{{AUTHOR}}{{NAME}}");
  EXPECT_EQ(self(json{{"query", "x"}, {"response", "{{NAME}}-{{AUTHOR}}"}})["response"], "{{NAME}}-{{AUTHOR}}{{NAME}}");
}

TEST(SelfCognition, MissingOrWrongColumns) {
  SelfCognitionProcessor p;
  expect_error([&] { p(json{{"response", "r"}}); }, "column 'query' is missing");
  expect_error([&] { p(json{{"query", "q"}}); }, "column 'response' is missing");
  expect_error([&] { p(json{{"query", "q"}, {"response", nullptr}}); }, "column 'response' is null, expected a string");
  expect_error([&] { p(json{{"query", json::array()}, {"response", "r"}}); }, "column 'query' is an array");
}

TEST(MessagesPre, OpenAiAndShareGpt) {
  MessagesPreprocessor p("SYS");
  json out = p(json{{"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", nullptr}}}}});
  ASSERT_EQ(out["messages"].size(), 3u);
  EXPECT_EQ(out["messages"][0]["content"], "SYS");
  EXPECT_EQ(out["messages"][2]["content"], "");
  json sg = p(json{{"conversations", {{{"from", "system"}, {"value", "S"}}, {{"from", "human"}, {"value", "a"}}, {{"from", "gpt"}, {"value", "b"}}}}});
  ASSERT_EQ(sg["messages"].size(), 3u);
  EXPECT_EQ(sg["messages"][0]["content"], "S");
  EXPECT_EQ(sg["messages"][2]["role"], "assistant");
  expect_error([&] { p(json{{"x", 1}}); }, "neither column 'messages' nor 'conversations'");
  expect_error([&] { p(json{{"conversations", {{{"from", "bot"}, {"value", "a"}}}}}); }, "conversations[0].from = 'bot'");
}

TEST(MessagesPre, MessagesFromJsonErrors) {
  expect_error([] { parse_messages(json::object()); }, "messages is an object, expected an array");
  expect_error([] { parse_messages(json::array()); }, "empty");
  expect_error([] { parse_messages(json::array({1})); }, "messages[0] is a number");
  expect_error([] { parse_messages(json::array({{{"content", "x"}}})); }, "messages[0].role is missing");
  expect_error([] { parse_messages(json::array({{{"role", "bot"}, {"content", "x"}}})); }, "messages[0].role = 'bot'");
  expect_error([] { parse_messages(json::array({{{"role", "user"}, {"content", "x"}}, {{"role", "assistant"}}})); },
               "messages[1].content is missing");
  expect_error([] { parse_messages(json::array({{{"role", "user"}, {"content", "x"}, {"reasoning_content", 1}}})); },
               "messages[0].reasoning_content is a number");
  auto m = parse_messages(json::array({{{"role", "assistant"}, {"content", "a"}, {"reasoning_content", "t"}}}));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].reasoning_content, "t");
  EXPECT_TRUE(m[0].has_reasoning_content);
  auto e = parse_messages(json::array({{{"role", "assistant"}, {"content", "a"}, {"reasoning_content", ""}}}));
  EXPECT_TRUE(e[0].has_reasoning_content);
  EXPECT_EQ(messages_to_json(e)[0]["reasoning_content"], "");
  EXPECT_FALSE(parse_messages(json::array({{{"role", "assistant"}, {"content", "a"}}}))[0].has_reasoning_content);
  EXPECT_EQ(messages_to_json(m)[0]["reasoning_content"], "t");
}

TEST(AlpacaPre, InstructionInputOutput) {
  AlpacaPreprocessor p;
  json a = p(json{{"instruction", "Translate"}, {"input", "hello"}, {"output", "你好"}});
  ASSERT_EQ(a["messages"].size(), 2u);
  EXPECT_EQ(a["messages"][0]["content"], "Translate\nhello");
  EXPECT_EQ(a["messages"][1]["content"], "你好");
  json b = p(json{{"instruction", "Say hi"}, {"input", ""}, {"output", "hi"}, {"system", "S"}});
  ASSERT_EQ(b["messages"].size(), 3u);
  EXPECT_EQ(b["messages"][1]["content"], "Say hi");
  expect_error([&] { p(json{{"instruction", "x"}}); }, "column 'output' is missing");
  expect_error([&] { p(json{{"instruction", "x"}, {"input", 3}, {"output", "y"}}); }, "column 'input' is a number");
}

TEST(ShippedData, SelfCognitionFileIsWellFormed) {
  const std::string path = std::string(TWINKLE_SOURCE_DIR) + "/data/self_cognition.jsonl";
  LoadedRows lr = load_rows(path);  // throws on invalid UTF-8 / JSON / non-object
  EXPECT_GE(lr.rows.size(), 90u);
  EXPECT_LE(lr.rows.size(), 140u);
  std::set<std::string> queries;
  int zh = 0, en = 0, name = 0, author = 0;
  for (const auto& r : lr.rows) {
    ASSERT_EQ(r.size(), 3u) << r.dump();
    ASSERT_TRUE(r["query"].is_string() && r["response"].is_string() && r["tag"].is_string()) << r.dump();
    const std::string tag = r["tag"], resp = r["response"];
    ASSERT_TRUE(tag == "zh" || tag == "en") << tag;
    (tag == "zh" ? zh : en)++;
    name += resp.find("{{NAME}}") != std::string::npos;
    author += resp.find("{{AUTHOR}}") != std::string::npos;
    EXPECT_TRUE(queries.insert(r["query"]).second) << "duplicate query " << r["query"];
  }
  EXPECT_GE(zh, 40);
  EXPECT_GE(en, 40);
  EXPECT_GE(name, 80);
  EXPECT_GE(author, 60);
  Dataset ds{DatasetMeta(path)};
  ds.map(SelfCognitionProcessor("twinkle大模型", "ModelScope社区"));
  for (int64_t i = 0; i < ds.size(); ++i) {
    const std::string s = ds[i]["messages"].dump();
    // No misspelt placeholder survives the replacement.
    EXPECT_EQ(s.find("{{"), std::string::npos) << ds.row_name(i);
    EXPECT_EQ(s.find("}}"), std::string::npos) << ds.row_name(i);
  }
}
