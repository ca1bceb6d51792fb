// Parquet datasets (twinkle/data/parquet.h): the rows of files written by pyarrow and by Hugging Face
// datasets (`Dataset.to_parquet` in push_to_hub's sharded layout) equal the rows
// `datasets.load_dataset('parquet', ...)` gives (tests/data/datasets/make_parquet_reference.py, run with
// the project environment's python, TWINKLE_REF_PYTHON); the rows flow through the preprocessors as
// the same rows from jsonl do; truncated, bit-flipped and hand-made hostile files are refused naming
// the file, never crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "twinkle/core/error.h"
#include "twinkle/data/dataset.h"
#include "twinkle/data/hub.h"
#include "twinkle/data/parquet.h"

namespace fs = std::filesystem;
using namespace twinkle;

namespace {

#ifndef TWINKLE_TEST_PARQUET_ON
// A build without parquet support (TWINKLE_PARQUET=OFF or no pyarrow; tests/dataset_mix.cmake sets
// TWINKLE_TEST_PARQUET_ON when it has it): a parquet file is refused naming the file and what to install.
TEST(ParquetOff, RefusedNamingTheFileAndWhatToInstall) {
  EXPECT_FALSE(parquet_supported());
  try {
    load_rows("/nonexistent/x.parquet");
    ADD_FAILURE() << "a parquet file was not refused";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("/nonexistent/x.parquet: cannot read parquet: this twinkle was built without parquet support: "
                     "install pyarrow"),
              std::string::npos)
        << m;
  }
}
#else

std::string fixture(const std::string& name) { return std::string(TWINKLE_SOURCE_DIR) + "/tests/data/datasets/" + name; }

json read_json(const std::string& p) {
  std::ifstream f(p);
  if (!f) throw std::runtime_error("cannot open " + p);
  return json::parse(f);
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void spit(const std::string& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; }

const char* const kFiles[] = {"chat_snappy.parquet", "alpaca_zstd.parquet", "sharegpt_gzip.parquet",
                              "types_none.parquet", "pretok_zstd.parquet"};

class ParquetReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (fs::temp_directory_path() / ("twinkle_pqref_" + std::to_string(::getpid()))).string();
    std::string cmd = std::string(TWINKLE_REF_PYTHON) + " " + fixture("make_parquet_reference.py") + " " + dir_ + " > " +
                      dir_ + ".log 2>&1";
    fs::create_directories(dir_);
    rc_ = std::system(cmd.c_str());
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    fs::remove(dir_ + ".log");
  }
  void SetUp() override {
    ASSERT_TRUE(parquet_supported()) << parquet_support_note();
    ASSERT_EQ(rc_, 0) << "make_parquet_reference.py failed:\n" << slurp(dir_ + ".log");
  }
  static std::string dir_;
  static int rc_;
};
std::string ParquetReference::dir_;
int ParquetReference::rc_ = -1;

TEST_F(ParquetReference, EveryFileGivesTheRowsOfDatasetsLoadDataset) {
  for (const char* name : kFiles) {
    const std::string p = dir_ + "/" + name;
    const json want = read_json(p + ".expected.json");
    ::testing::internal::CaptureStderr();
    LoadedRows got = load_rows(p);
    const std::string err = ::testing::internal::GetCapturedStderr();
    ASSERT_EQ(got.rows.size(), want.size()) << name;
    ASSERT_GT(want.size(), 5u) << name;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got.rows[i], want[i]) << name << " row " << i << "\ngot  " << got.rows[i].dump() << "\nwant "
                                      << want[i].dump();
      EXPECT_EQ(got.lines[i], static_cast<int64_t>(i + 1)) << name;
    }
    EXPECT_EQ(got.bad, 0);
    // The binary column is the one left out, with a warning naming the file, the column and its type.
    if (std::string(name) == "types_none.parquet")
      EXPECT_NE(err.find(p + ": column(s) 'blob' (binary) left out"), std::string::npos) << err;
    else
      EXPECT_EQ(err, "") << name;
  }
}

// The layout push_to_hub writes (data/{split}-NNNNN-of-NNNNN.parquet): the split's shards in order,
// the test split apart, data_slice over all shards with Twinkle's wrap-around, row names per shard.
TEST_F(ParquetReference, HubLayoutShardsSplitsAndSlice) {
  const std::string hub = dir_ + "/hub";
  const auto files = resolve_dataset_files(hub);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(fs::path(files[1]).filename(), "train-00001-of-00003.parquet");
  const json train = read_json(dir_ + "/hub.train.expected.json");
  Dataset ds{DatasetMeta(hub)};
  ASSERT_EQ(ds.size(), static_cast<int64_t>(train.size()));
  for (int64_t i = 0; i < ds.size(); ++i) EXPECT_EQ(ds[i], train[static_cast<size_t>(i)]) << "row " << i;
  // Dataset.shard(3, k, contiguous=True) of 22 rows holds 8, 7, 7 rows (datasets' shard: the first
  // len % num_shards shards get one more): row 8 is the second shard's first row.
  EXPECT_EQ(ds.row_name(8), hub + "/data/train-00001-of-00003.parquet:1");
  EXPECT_EQ(ds.row_name(21), hub + "/data/train-00002-of-00003.parquet:7");

  Dataset test{DatasetMeta(hub, std::nullopt, "default", "test")};
  const json want_test = read_json(dir_ + "/hub.test.expected.json");
  ASSERT_EQ(test.size(), 1);
  EXPECT_EQ(test[0], want_test[0]);

  const int64_t n = ds.size();
  Dataset sl{DatasetMeta(hub, DataSlice::range(3, 3 + 2 * n))};
  const json want_slice = read_json(dir_ + "/hub.slice.expected.json");
  ASSERT_EQ(sl.size(), static_cast<int64_t>(want_slice.size()));
  for (int64_t i = 0; i < sl.size(); ++i) EXPECT_EQ(sl[i], want_slice[static_cast<size_t>(i)]) << "slice row " << i;
}

// Parquet rows and the same rows as jsonl give the same preprocessed and encoded rows.
TEST_F(ParquetReference, RowsFlowThroughThePreprocessorsAsJsonlRowsDo) {
  struct Case {
    const char* file;
    std::shared_ptr<Preprocessor> p;
  };
  const Case cases[] = {{"alpaca_zstd.parquet", std::make_shared<AlpacaPreprocessor>()},
                        {"sharegpt_gzip.parquet", std::make_shared<MessagesPreprocessor>()}};
  for (const auto& c : cases) {
    const std::string p = dir_ + "/" + c.file;
    const std::string jl = p + ".jsonl";
    {
      std::ofstream o(jl);
      for (const auto& r : read_json(p + ".expected.json")) o << r.dump() << "\n";
    }
    Dataset a{DatasetMeta(p)}, b{DatasetMeta(jl)};
    a.set_skip_bad_rows(true);
    b.set_skip_bad_rows(true);
    ::testing::internal::CaptureStderr();
    a.map(*c.p);
    b.map(*c.p);
    ::testing::internal::GetCapturedStderr();
    ASSERT_EQ(a.size(), b.size()) << c.file;
    EXPECT_EQ(a.bad_rows(), b.bad_rows()) << c.file;
    for (int64_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << c.file << " row " << i;
  }
  // alpaca's row 8 (1-based) has a null output: refused naming the parquet row.
  Dataset a{DatasetMeta(dir_ + "/alpaca_zstd.parquet")};
  try {
    a.map(AlpacaPreprocessor());
    ADD_FAILURE() << "a null output was not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir_ + "/alpaca_zstd.parquet:8: "), std::string::npos) << e.what();
  }
  // Pre-tokenized rows: input_ids / labels from list<int64>; the null labels of row 3 (1-based) mean
  // "no labels", i.e. labels = input_ids (pretokenized.h).
  Dataset t{DatasetMeta(dir_ + "/pretok_zstd.parquet")};
  const json want = read_json(dir_ + "/pretok_zstd.parquet.expected.json");
  t.encode_pretokenized(151936);
  ASSERT_EQ(t.encoded().size(), want.size());
  ASSERT_TRUE(want[2]["labels"].is_null());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(json(t.encoded()[i].input_ids), want[i]["input_ids"]) << "row " << i;
    EXPECT_EQ(json(t.encoded()[i].labels), want[i][i == 2 ? "input_ids" : "labels"]) << "row " << i;
  }
}

// Hostile input: every truncation, seeded byte flips, and hand-made files. Each is refused with a
// twinkle::Error naming the file or read into rows; nothing crashes (the Arrow reader validates
// the footer, page headers and decoded batches: RecordBatch::Validate in parquet.cpp).
TEST_F(ParquetReference, TruncatedCorruptAndHostileFilesAreRefusedNamingTheFile) {
  const std::string bad = dir_ + "/hostile.parquet";
  auto refused = [&](const std::string& what) {
    try {
      load_rows(bad);
      return false;
    } catch (const Error& e) {
      // "<file>: ..." for the file, "<file>:<row>: ..." for one row of it
      EXPECT_EQ(std::string(e.what()).rfind(bad + ":", 0), 0u) << what << ": " << e.what();
      return true;
    }
  };
  for (const char* name : {"chat_snappy.parquet", "types_none.parquet"}) {
    const std::string good = slurp(dir_ + "/" + name);
    ASSERT_GT(good.size(), 1000u);
    // Every cut drops (part of) the footer or its trailing magic: always refused.
    int cuts = 0;
    const size_t step = good.size() / 120 + 1;  // ~120 cuts through the body, then each of the last 16 bytes
    for (size_t len = 0; len < good.size(); len += (len + 16 >= good.size() ? 1 : step)) {
      spit(bad, good.substr(0, len));
      EXPECT_TRUE(refused(std::string(name) + " cut at " + std::to_string(len))) << name << " cut at " << len;
      ++cuts;
    }
    EXPECT_GE(cuts, 100);
    std::mt19937 rng(35);
    int refusals = 0, reads = 0;
    ::testing::internal::CaptureStderr();
    for (int k = 0; k < 200; ++k) {
      std::string b = good;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) b[rng() % b.size()] ^= static_cast<char>(1 + rng() % 255);
      spit(bad, b);
      (refused("flip " + std::to_string(k)) ? refusals : reads) += 1;
    }
    ::testing::internal::GetCapturedStderr();
    EXPECT_GT(refusals, 0) << name;
    EXPECT_EQ(refusals + reads, 200);
    std::printf("%s: %d cuts refused; of 200 flipped files %d refused, %d read\n", name, cuts, refusals, reads);
  }
  // Hand-made: empty, magic only, a footer length beyond the file, garbage metadata, not parquet.
  const std::string magic = "PAR1";
  auto le32 = [](uint32_t v) { return std::string{char(v), char(v >> 8), char(v >> 16), char(v >> 24)}; };
  const std::pair<const char*, std::string> made[] = {
      {"empty", ""},
      {"magic only", magic},
      {"two magics", magic + magic},
      {"footer length past the start", magic + std::string(8, 'x') + le32(0x7fffffff) + magic},
      {"footer length 2^32-1", magic + std::string(8, 'x') + le32(0xffffffffu) + magic},
      {"garbage metadata", magic + std::string(64, '\xff') + le32(64) + magic},
      {"jsonl named .parquet", "{\"a\": 1}\n"},
  };
  for (const auto& [what, bytes] : made) {
    spit(bad, bytes);
    EXPECT_TRUE(refused(what)) << what;
  }
  try {
    load_rows(dir_ + "/missing.parquet");
    ADD_FAILURE() << "a missing file was not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir_ + "/missing.parquet: cannot open parquet file"), std::string::npos)
        << e.what();
  }
}

#endif

}  // namespace
