// The template option set is validated in one place (validate(TemplateOptions)),
// used by Template, Dataset::set_template and the command line; pre-tokenized rows go through
// Dataset::encode_pretokenized, where --skip-bad-rows drops a malformed row with a warning
// naming file:line (it used to fail anyway), and without it the error stays.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "error_of.h"
#include "twinkle/core/error.h"
#include "twinkle/data/dataset.h"
#include "twinkle/data/template.h"

using namespace twinkle;

using twinkle::test_support::error_of;

namespace {
std::string write_rows(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / name;
  std::ofstream(p) << text;
  return p.string();
}
}  // namespace

TEST(TemplateOptions, EveryBound) {
  EXPECT_EQ(error_of([] { validate(TemplateOptions{}); }), "");
  EXPECT_EQ(error_of([] { validate(TemplateOptions{.max_length = 1}); }), "");
  for (int64_t v : {0, -5}) {
    const std::string e = error_of([v] { validate(TemplateOptions{.max_length = v}); });
    EXPECT_NE(e.find("'max_length' (--max-length) must be >= 1, got " + std::to_string(v)), std::string::npos) << e;
  }
  const std::string e = error_of([] { validate(TemplateOptions{.truncation = "middle"}); });
  EXPECT_NE(e.find("'truncation' (--truncation)"), std::string::npos) << e;
  EXPECT_NE(e.find("raise, left, right, delete, split"), std::string::npos) << e;
  EXPECT_NE(e.find("\"middle\""), std::string::npos) << e;
}

TEST(PretokenizedRows, SkipBadRowsDropsTheRowAndCountsIt) {
  // row 3 has a string inside input_ids, row 5 a label of another length
  const std::string path = write_rows("twinkle_pretok_bad.jsonl",
                                      "{\"input_ids\": [1, 2, 3], \"labels\": [-100, 2, 3]}\n"
                                      "{\"input_ids\": [4, 5]}\n"
                                      "{\"input_ids\": [1, 2, \"x\"], \"labels\": [1, 2, 3]}\n"
                                      "{\"input_ids\": [7, 8, 9]}\n"
                                      "{\"input_ids\": [7, 8, 9], \"labels\": [1]}\n"
                                      "{\"input_ids\": [7, 2000]}\n");
  {
    DatasetMeta meta(path);
    meta.skip_bad_rows = true;
    Dataset ds(meta);
    ds.encode_pretokenized(1000);
    ASSERT_EQ(ds.encoded().size(), 3u);
    EXPECT_EQ(ds.bad_rows(), 3);
    EXPECT_EQ(ds.encoded()[1].input_ids, (std::vector<int32_t>{4, 5}));
    EXPECT_EQ(ds.encoded()[2].input_ids, (std::vector<int32_t>{7, 8, 9}));
    EXPECT_EQ(ds.encoded_row_name(2), path + ":4");
  }
  {
    Dataset ds{DatasetMeta(path)};  // without the flag: the error as before, naming file:line and field
    const std::string e = error_of([&] { ds.encode_pretokenized(1000); });
    EXPECT_NE(e.find(path + ":3"), std::string::npos) << e;
    EXPECT_NE(e.find("field 'input_ids' must contain only integers"), std::string::npos) << e;
  }
  {
    // vocabulary check: row 6 (id 2000 >= 1000) also named when the others are good
    DatasetMeta meta(path, DataSlice::indices({0, 5}));
    Dataset ds(meta);
    const std::string e = error_of([&] { ds.encode_pretokenized(1000); });
    EXPECT_NE(e.find(path + ":6"), std::string::npos) << e;
    EXPECT_NE(e.find("outside the vocabulary"), std::string::npos) << e;
  }
  std::filesystem::remove(path);
}

// A token id beyond int32 used to wrap in the JSON conversion (4294967297 -> 1, 4294967196 ->
// -100 = "ignore") and train as a valid id; it is refused naming the file:line, field and index.
TEST(PretokenizedRows, IdsBeyondInt32AreRefusedNotWrapped) {
  const std::string path = write_rows("twinkle_pretok_wide.jsonl",
                                      "{\"input_ids\": [1, 2, 3]}\n"
                                      "{\"input_ids\": [1, 4294967297]}\n"
                                      "{\"input_ids\": [1, 2], \"labels\": [4294967196, -4294967297]}\n");
  {
    Dataset ds{DatasetMeta(path)};
    const std::string e = error_of([&] { ds.encode_pretokenized(1000); });
    EXPECT_NE(e.find(path + ":2: input_ids[1] = 4294967297 does not fit a 32-bit token id"), std::string::npos) << e;
  }
  {
    Dataset ds{DatasetMeta(path, DataSlice::indices({2}))};
    const std::string e = error_of([&] { ds.encode_pretokenized(); });  // no vocabulary given: still refused
    EXPECT_NE(e.find(path + ":3: labels[0] = 4294967196 does not fit a 32-bit token id"), std::string::npos) << e;
  }
  std::filesystem::remove(path);
}

TEST(PretokenizedRows, AllBadIsAnError) {
  const std::string path = write_rows("twinkle_pretok_allbad.jsonl", "{\"input_ids\": [\"a\"]}\n");
  DatasetMeta meta(path);
  meta.skip_bad_rows = true;
  Dataset ds(meta);
  const std::string e = error_of([&] { ds.encode_pretokenized(); });
  EXPECT_NE(e.find("no valid pre-tokenized row (1 bad rows skipped"), std::string::npos) << e;
  std::filesystem::remove(path);
}
