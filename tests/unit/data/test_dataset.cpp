// Dataset loading (JSONL / JSON / CSV), row errors naming "<file>:<line>", data_slice
// wrap-around, map / filter / encode (with a fake encoder; the real Template is
// exercised in test_dataset_template.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <cstdlib>
#include <fstream>

#include "twinkle/core/error.h"
#include "twinkle/data/dataset.h"

namespace fs = std::filesystem;
using namespace twinkle;

namespace {

std::string fixture(const std::string& name) { return std::string(TWINKLE_SOURCE_DIR) + "/tests/data/datasets/" + name; }

// Runs f, expects a twinkle::Error whose message contains every string in `parts`.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "expected twinkle::Error containing '" << *parts.begin() << "'";
  } catch (const Error& e) {
    std::string m = e.what();
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "message: " << m << "\nmissing: " << p;
  }
}

// A fake encoder: one token per character of "role:content|" for each message; the
// assistant content is labelled. Deterministic and independent of the tokenizer.
std::vector<EncodedRow> fake_encode(const std::vector<Message>& msgs, const std::string&) {
  EncodedRow r;
  for (const auto& m : msgs) {
    std::string s = m.role + ":" + m.content + "|";
    for (unsigned char c : s) {
      r.input_ids.push_back(c);
      r.labels.push_back(m.role == "assistant" ? static_cast<int32_t>(c) : kIgnoreIndex);
    }
  }
  return {r};
}

json sc_row(const std::string& q, const std::string& r) { return json{{"query", q}, {"response", r}, {"tag", "en"}}; }

}  // namespace

TEST(DatasetLoad, JsonlSkipsBlankLinesAndKeepsLineNumbers) {
  Dataset ds(DatasetMeta(fixture("good.jsonl")));
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds[0]["query"], "q1");
  EXPECT_EQ(ds[2]["query"], "问题三");
  EXPECT_EQ(ds.row_name(0), fixture("good.jsonl") + ":1");
  EXPECT_EQ(ds.row_name(1), fixture("good.jsonl") + ":3");  // line 2 is blank
  EXPECT_EQ(ds.row_name(2), fixture("good.jsonl") + ":4");
  EXPECT_THROW(ds[3], Error);
}

TEST(DatasetLoad, JsonArrayElementsCarryTheirStartLine) {
  Dataset ds(DatasetMeta(fixture("good.json")));
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds[1]["query"], "q2, with [brackets] and \"quotes\" {x}");
  EXPECT_EQ(ds.row_name(0), fixture("good.json") + ":2");
  EXPECT_EQ(ds.row_name(1), fixture("good.json") + ":3");
  EXPECT_EQ(ds.row_name(2), fixture("good.json") + ":7");
}

TEST(DatasetLoad, CsvRfc4180) {
  Dataset ds(DatasetMeta(fixture("good.csv")));
  ASSERT_EQ(ds.size(), 4);
  EXPECT_EQ(ds[0], (json{{"query", "q1"}, {"response", "r1"}, {"tag", "en"}}));
  EXPECT_EQ(ds[1]["query"], "q2, with comma");
  EXPECT_EQ(ds[1]["response"], "r2 \"quoted\"");
  EXPECT_EQ(ds[2]["query"], "multi\nline");
  EXPECT_EQ(ds[3]["response"], "");
  EXPECT_EQ(ds.row_name(3), fixture("good.csv") + ":6");  // record 3 spans lines 4-5
}

TEST(DatasetLoad, BadJsonLineNamesFileAndLine) {
  expect_error([] { Dataset ds(DatasetMeta(fixture("bad_json.jsonl"))); }, {fixture("bad_json.jsonl") + ":3:", "invalid JSON"});
}

TEST(DatasetLoad, NotAnObjectNamesFileAndLine) {
  expect_error([] { Dataset ds(DatasetMeta(fixture("not_object.jsonl"))); },
               {fixture("not_object.jsonl") + ":2:", "an array", "expected a JSON object"});
}

TEST(DatasetLoad, InvalidUtf8NamesFileLineAndColumn) {
  // Line 3 is {"query": "q3", "response": "bad \xff\xfe byte"}; 0xff is at byte 34 (1-based).
  expect_error([] { Dataset ds(DatasetMeta(fixture("bad_utf8.jsonl"))); },
               {fixture("bad_utf8.jsonl") + ":3:", "invalid UTF-8 at byte column 34"});
}

TEST(DatasetLoad, BadJsonArrayElementNamesItsLine) {
  expect_error([] { Dataset ds(DatasetMeta(fixture("bad_array.json"))); }, {fixture("bad_array.json") + ":3:", "invalid JSON"});
}

TEST(DatasetLoad, CsvUnbalancedQuotesNamesRecordLine) {
  expect_error([] { Dataset ds(DatasetMeta(fixture("unbalanced.csv"))); },
               {fixture("unbalanced.csv") + ":3:", "unbalanced quotes"});
}

TEST(DatasetLoad, CsvFieldCountAndStrayQuote) {
  auto dir = fs::temp_directory_path() / ("twinkle_ds_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string p1 = (dir / "count.csv").string(), p2 = (dir / "stray.csv").string();
  std::ofstream(p1) << "a,b\n1,2\n3\n";
  std::ofstream(p2) << "a,b\n\"x\"y,2\n";
  expect_error([&] { Dataset ds{DatasetMeta(p1)}; }, {p1 + ":3:", "1 fields, the header has 2"});
  expect_error([&] { Dataset ds{DatasetMeta(p2)}; }, {p2 + ":2:", "after a closing quote"});
  DatasetMeta m(p1);
  m.skip_bad_rows = true;
  Dataset ds(m);
  EXPECT_EQ(ds.size(), 1);
  EXPECT_EQ(ds.bad_rows(), 1);
  fs::remove_all(dir);
}

TEST(DatasetLoad, SkipBadRowsCountsAndKeepsTheRest) {
  for (auto [file, good] : {std::pair{"bad_json.jsonl", 3}, {"not_object.jsonl", 2}, {"bad_utf8.jsonl", 2}, {"bad_array.json", 2}}) {
    DatasetMeta m(fixture(file));
    m.skip_bad_rows = true;
    Dataset ds(m);
    EXPECT_EQ(ds.size(), good) << file;
    EXPECT_EQ(ds.bad_rows(), 1) << file;
  }
}

TEST(DatasetLoad, UnsupportedExtensionAndMissingFile) {
  expect_error([] { Dataset ds(DatasetMeta(fixture("../../CMakeLists.txt"))); }, {"unsupported dataset file type '.txt'"});
  expect_error([] { Dataset ds(DatasetMeta("/nonexistent/x.jsonl")); }, {"/nonexistent/x.jsonl", "not found"});
}

TEST(DataSliceTest, WrapsModuloLength) {
  Dataset ds(DatasetMeta(fixture("good.jsonl"), DataSlice::range(8)));
  ASSERT_EQ(ds.size(), 8);
  const char* want[] = {"q1", "q2", "问题三", "q1", "q2", "问题三", "q1", "q2"};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ds[i]["query"], want[i]) << i;
  EXPECT_EQ(ds.row_name(3), fixture("good.jsonl") + ":1");  // repeated rows keep their source line
  Dataset d2(DatasetMeta(fixture("good.jsonl"), DataSlice::indices({5, 0, 4})));
  ASSERT_EQ(d2.size(), 3);
  EXPECT_EQ(d2[0]["query"], "问题三");  // 5 % 3 = 2
  EXPECT_EQ(d2[1]["query"], "q1");
  EXPECT_EQ(d2[2]["query"], "q2");
  Dataset d3(DatasetMeta(fixture("good.jsonl"), DataSlice::range(1, 3)));
  ASSERT_EQ(d3.size(), 2);
  EXPECT_EQ(d3[0]["query"], "q2");
}

TEST(DataSliceTest, NegativeAndEmpty) {
  expect_error([] { DataSlice::indices({1, -2}); }, {"-2", "position 1", "negative"});
  expect_error([] { DataSlice::range(-1, 3); }, {"negative"});
  expect_error([] { Dataset ds(DatasetMeta(fixture("good.jsonl"), DataSlice::range(2, 2))); }, {"empty after data_slice"});
}

// `twinkle train --data-slice`: the three spellings, and every malformed text refused with the
// option and the text named (the command used to die with std::stoll's bare "stoll", and read
// "1:2:3" as 1:2 and "5x" as 5).
TEST(DataSliceTest, ParseCommandLineSpelling) {
  EXPECT_EQ(DataSlice::parse("1:3").describe(), "range(1, 3)");
  EXPECT_EQ(DataSlice::parse("4").describe(), "range(0, 4)");
  EXPECT_EQ(DataSlice::parse("5,0,4").describe(), "[5, 0, 4]");
  Dataset ds(DatasetMeta(fixture("good.jsonl"), DataSlice::parse("2,0")));
  ASSERT_EQ(ds.size(), 2);
  EXPECT_EQ(ds[0]["query"], "问题三");
  for (const char* bad : {"abc", "1,x", "5x", "1:2:3", ":3", "2:", "-1", "+2", "1,,2", "1:2,3", "",
                          "99999999999999999999"})
    expect_error([&] { DataSlice::parse(bad, "--data-slice"); }, {"--data-slice", "'" + std::string(bad) + "'"});
}

TEST(DatasetMap, SelfCognitionAddsMessagesAndKeepsColumns) {
  Dataset ds(DatasetMeta(fixture("good.jsonl")));
  ds.map(SelfCognitionProcessor("Bot", "Lab"));
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds[0]["response"], "r1 Bot");
  EXPECT_EQ(ds[0]["tag"], "en");
  EXPECT_EQ(ds[1]["messages"][2]["content"], "r2 Lab");
  EXPECT_EQ(ds[1]["messages"][0]["content"], "You are a helpful assistant.");
}

TEST(DatasetMap, MissingFieldNamesFileLineAndColumn) {
  Dataset ds(DatasetMeta(fixture("missing_field.jsonl")));
  expect_error([&] { ds.map(SelfCognitionProcessor()); }, {fixture("missing_field.jsonl") + ":2:", "column 'response' is missing"});
}

TEST(DatasetMap, WrongTypeNamesFileLineAndColumn) {
  Dataset ds(DatasetMeta(fixture("wrong_type.jsonl")));
  expect_error([&] { ds.map(SelfCognitionProcessor()); },
               {fixture("wrong_type.jsonl") + ":4:", "column 'query' is a number, expected a string"});
}

TEST(DatasetMap, JsonTypeErrorFromUserLambdaIsWrapped) {
  Dataset ds(DatasetMeta(fixture("wrong_type.jsonl")));
  expect_error([&] { ds.map([](const json& r) { return json{{"q", r.at("query").get<std::string>() + "!"}}; }); },
               {fixture("wrong_type.jsonl") + ":4:", "string"});
}

TEST(DatasetMap, SkipBadRowsAndNullDeletes) {
  Dataset ds(DatasetMeta(fixture("wrong_type.jsonl")));
  ds.set_skip_bad_rows(true);
  ds.map(SelfCognitionProcessor());
  EXPECT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.bad_rows(), 1);
  ds.map([](const json& r) { return r["query"] == "q1" ? json() : json::object(); });
  EXPECT_EQ(ds.size(), 1);
  EXPECT_EQ(ds.deleted_rows(), 1);
  EXPECT_EQ(ds[0]["query"], "q2");
  ds.set_skip_bad_rows(false);
  expect_error([&] { ds.map([](const json&) { return json(3); }); }, {"wrong_type.jsonl:2:", "returned a number"});
}

TEST(DatasetFilter, KeepsMatchingAndErrorsWhenEmpty) {
  Dataset ds(DatasetMeta(fixture("good.jsonl"), DataSlice::range(6)));
  ds.filter([](const json& r) { return r["tag"] == "zh"; });
  EXPECT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.row_name(1), fixture("good.jsonl") + ":4");
  expect_error([&] { ds.filter([](const json&) { return false; }); }, {"empty after filter"});
}

TEST(DatasetEncode, FakeEncoderAndSourceRows) {
  Dataset ds(DatasetMeta(fixture("good.jsonl"), DataSlice::range(4)));
  ds.map(SelfCognitionProcessor("N", "A"));
  EXPECT_THROW(ds.encoded(), Error);
  EXPECT_THROW(ds.encode(), Error);  // no template / encoder
  ds.set_encoder(fake_encode);
  ds.encode();
  ASSERT_EQ(ds.encoded().size(), 4u);
  const EncodedRow& r = ds.encoded()[0];
  std::string want = "system:You are a helpful assistant.|user:q1|assistant:r1 N|";
  ASSERT_EQ(r.input_ids.size(), want.size());
  EXPECT_EQ(r.length, static_cast<int64_t>(want.size()));
  EXPECT_EQ(r.attention_mask, std::vector<int32_t>(want.size(), 1));
  EXPECT_EQ(r.position_ids.back(), static_cast<int32_t>(want.size() - 1));
  EXPECT_EQ(ds.encoded_source(3), 3);
  EXPECT_EQ(ds.encoded_row_name(3), fixture("good.jsonl") + ":1");
}

// A row longer than the model's positions used to fail only at the training step that met it
// ("position id N exceeds max_position_embeddings", no row named); twinkle train / eval now check
// every encoded row first and name the file:line.
TEST(DatasetEncode, CheckEncodedLengthNamesTheRow) {
  Dataset ds(DatasetMeta(fixture("good.jsonl")));
  ds.map(SelfCognitionProcessor("N", "A"));
  ds.set_encoder(fake_encode);
  ds.encode();
  int64_t longest = 0, at = 0;
  for (size_t i = 0; i < ds.encoded().size(); ++i)
    if (ds.encoded()[i].length > longest) longest = ds.encoded()[i].length, at = static_cast<int64_t>(i);
  EXPECT_NO_THROW(ds.check_encoded_length(longest, "the limit"));
  expect_error([&] { ds.check_encoded_length(longest - 1, "max_position_embeddings X"); },
               {ds.encoded_row_name(at) + ": the row has " + std::to_string(longest) +
                " tokens, more than max_position_embeddings X"});
}

TEST(DatasetEncode, DeleteAndSplitAndEmpty) {
  std::vector<json> rows;
  for (int i = 0; i < 5; ++i) rows.push_back(sc_row("q" + std::to_string(i), std::string(static_cast<size_t>(i), 'x')));
  Dataset ds = Dataset::from_rows(rows, "mem");
  ds.map(SelfCognitionProcessor());
  // Delete rows with an even response length, split the others in two.
  ds.set_encoder([](const std::vector<Message>& m, const std::string&) {
    if (m[2].content.size() % 2 == 0) return std::vector<EncodedRow>{};
    auto r = fake_encode(m, "");
    return std::vector<EncodedRow>{r[0], r[0]};
  });
  ds.encode();
  EXPECT_EQ(ds.encoded().size(), 4u);  // rows 1 and 3, twice each
  EXPECT_EQ(ds.deleted_rows(), 3);
  EXPECT_EQ(ds.encoded_source(0), 1);
  EXPECT_EQ(ds.encoded_source(3), 3);
  EXPECT_EQ(ds.encoded_row_name(2), "mem:4");
  ds.set_encoder([](const std::vector<Message>&, const std::string&) { return std::vector<EncodedRow>{}; });
  expect_error([&] { ds.encode(); }, {"empty after encode", "5 deleted"});
}

TEST(DatasetEncode, ErrorsNameTheRow) {
  Dataset ds = Dataset::from_rows({sc_row("a", "b"), json{{"x", 1}}}, "mem");
  ds.set_encoder(fake_encode);
  expect_error([&] { ds.encode(); }, {"mem:1:", "column 'messages' is missing"});
  Dataset d2(DatasetMeta(fixture("messages.jsonl")));
  d2.set_encoder(fake_encode);
  expect_error([&] { d2.encode(); }, {fixture("messages.jsonl") + ":3:", "messages[0].content is a number"});
  d2.set_skip_bad_rows(true);
  d2.encode(2);
  EXPECT_EQ(d2.encoded().size(), 2u);
  EXPECT_EQ(d2.bad_rows(), 1);
  // The encoder's own error keeps a single row name.
  Dataset d3 = Dataset::from_rows({sc_row("a", "b")}, "mem");
  d3.map(SelfCognitionProcessor());
  d3.set_encoder([](const std::vector<Message>&, const std::string& name) -> std::vector<EncodedRow> {
    throw Error(name + ": length 9 exceeds max_length 4");
  });
  try {
    d3.encode();
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "mem:1: length 9 exceeds max_length 4");
  }
  d3.set_encoder([](const std::vector<Message>& m, const std::string&) {
    auto r = fake_encode(m, "");
    r[0].labels.pop_back();
    return r;
  });
  expect_error([&] { d3.encode(); }, {"mem:1:", "labels has"});
}

// A "tools" column (ms-swift / OpenAI rows with function schemas) was ignored: the row trained
// without the tool descriptions its assistant turns rely on. Refused naming the row; empty or null
// tools are no tools.
TEST(DatasetEncode, ToolsColumnIsRefusedNamingTheRow) {
  auto msgs = json::array({{{"role", "user"}, {"content", "weather?"}}, {{"role", "assistant"}, {"content", "sunny"}}});
  json with_tools = {{"messages", msgs},
                     {"tools", json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}}}}})}};
  json no_tools = {{"messages", msgs}, {"tools", json::array()}};
  json null_tools = {{"messages", msgs}, {"tools", nullptr}};
  Dataset ds = Dataset::from_rows({no_tools, with_tools, null_tools}, "mem");
  ds.set_encoder(fake_encode);
  expect_error([&] { ds.encode(); }, {"mem:2:", "column 'tools'", "not supported"});
  ds.set_skip_bad_rows(true);
  ds.encode();
  EXPECT_EQ(ds.encoded().size(), 2u);
  EXPECT_EQ(ds.bad_rows(), 1);
}

TEST(DatasetEncode, ThreadedEqualsSerial) {
  Dataset ds(DatasetMeta(std::string(TWINKLE_SOURCE_DIR) + "/data/self_cognition.jsonl", DataSlice::range(300)));
  ds.map(SelfCognitionProcessor());
  ds.set_encoder(fake_encode);
  auto serial = ds.encode(1).encoded_ptr();
  auto threaded = ds.encode(4).encoded_ptr();
  ASSERT_EQ(serial->size(), 300u);
  ASSERT_EQ(threaded->size(), 300u);
  for (size_t i = 0; i < 300; ++i) EXPECT_EQ((*serial)[i].input_ids, (*threaded)[i].input_ids);
}

TEST(DatasetLoad, FromRowsRejectsNonObjects) {
  expect_error([] { Dataset::from_rows({json{{"a", 1}}, json::array()}, "mem"); }, {"mem:2:", "an array"});
  expect_error([] { Dataset::from_rows({}, "mem"); }, {"no rows"});
}

// Independent references: Python's csv module and strict UTF-8 decoder
// (tests/data/datasets/make_reference.py, run with the project environment's python, TWINKLE_REF_PYTHON, at test time).
class ReaderReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / ("twinkle_dsref_" + std::to_string(::getpid()))).string();
    std::string cmd = std::string(TWINKLE_REF_PYTHON) + " " + fixture("make_reference.py") + " " + dir_;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static json read_json(const std::string& p) {
    std::ifstream f(p);
    return json::parse(f);
  }
  static std::string dir_;
};
std::string ReaderReference::dir_;

TEST_F(ReaderReference, CsvMatchesPythonCsvModule) {
  json want = read_json(dir_ + "/csv_ref_expected.json");
  LoadedRows got = load_rows(dir_ + "/csv_ref.csv");
  ASSERT_EQ(got.rows.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got.rows[i], want[i]["row"]) << "record " << i;
    EXPECT_EQ(got.lines[i], want[i]["line"].get<int64_t>()) << "record " << i;
  }
}

TEST_F(ReaderReference, Utf8ValidationMatchesPythonDecoder) {
  json want = read_json(dir_ + "/utf8_ref_expected.json");
  const std::string path = dir_ + "/utf8_ref.jsonl";
  LoadedRows got = load_rows(path, /*skip_bad=*/true);
  size_t k = 0;
  int64_t bad = 0;
  std::ifstream in(path, std::ios::binary);
  std::string line;
  for (const auto& w : want) {
    std::getline(in, line);
    if (w["ok"].get<bool>()) {
      ASSERT_LT(k, got.rows.size());
      EXPECT_EQ(got.lines[k], w["line"].get<int64_t>());
      EXPECT_EQ(got.rows[k]["t"], w["value"]) << "line " << w["line"];
      ++k;
    } else {
      ++bad;
      // The error for this line alone names line 1 and Python's byte column.
      std::string one = dir_ + "/one.jsonl";
      std::ofstream(one, std::ios::binary) << line << "\n";
      try {
        load_rows(one);
        ADD_FAILURE() << "line " << w["line"] << " should be invalid";
      } catch (const Error& e) {
        std::string m = e.what();
        std::string col = "byte column " + std::to_string(w["column"].get<int64_t>());
        EXPECT_NE(m.find(one + ":1: invalid UTF-8 at " + col), std::string::npos) << m << " want " << col;
      }
    }
  }
  EXPECT_EQ(k, got.rows.size());
  EXPECT_EQ(got.bad, bad);
  EXPECT_GT(bad, 50);
}
