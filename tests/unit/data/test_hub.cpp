// Hub resolution against fake ModelScope / Hugging Face / TWINKLE_HOME cache trees.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "twinkle/core/error.h"
#include "twinkle/data/dataset.h"
#include "twinkle/data/hub.h"

namespace fs = std::filesystem;
using namespace twinkle;

namespace {

class HubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("twinkle_hub_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    th_ = root_ / "twinkle";
    ms_ = root_ / "ms";
    hf_ = root_ / "hf";
    setenv("TWINKLE_HOME", th_.c_str(), 1);
    setenv("MODELSCOPE_CACHE", ms_.c_str(), 1);
    setenv("HF_HOME", hf_.c_str(), 1);
    unsetenv("HF_HUB_CACHE");
  }
  void TearDown() override { fs::remove_all(root_); }

  static void touch(const fs::path& p, const std::string& text = "{\"a\": \"1\"}\n") {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  fs::path root_, th_, ms_, hf_;
};

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected twinkle::Error";
  return "";
}

}  // namespace

TEST_F(HubTest, LocalPathsPassThrough) {
  touch(root_ / "local" / "config.json", "{}");
  EXPECT_EQ(resolve_model_dir((root_ / "local").string()), (root_ / "local").string());
  touch(root_ / "d.jsonl");
  EXPECT_EQ(resolve_dataset_path((root_ / "d.jsonl").string()), (root_ / "d.jsonl").string());
  std::string e = error_of([&] { resolve_model_dir((root_ / "d.jsonl").string()); });
  EXPECT_NE(e.find("is a file"), std::string::npos) << e;
}

TEST_F(HubTest, ModelScopeLayouts) {
  // New layout hub/models/owner/name with '.' stored as "___".
  touch(ms_ / "models" / "Qwen" / "Qwen3-0___6B" / "config.json", "{}");
  EXPECT_EQ(resolve_model_dir("ms://Qwen/Qwen3-0.6B"), (ms_ / "models" / "Qwen" / "Qwen3-0___6B").string());
  EXPECT_EQ(resolve_model_dir("Qwen/Qwen3-0.6B"), (ms_ / "models" / "Qwen" / "Qwen3-0___6B").string());  // bare = ms
  // Old layout hub/owner/name under $MODELSCOPE_CACHE/hub.
  touch(ms_ / "hub" / "Qwen" / "Qwen3-4B" / "tokenizer.json", "{}");
  EXPECT_EQ(resolve_model_dir("ms://Qwen/Qwen3-4B"), (ms_ / "hub" / "Qwen" / "Qwen3-4B").string());
  // TWINKLE_HOME wins over the caches.
  touch(th_ / "models" / "Qwen" / "Qwen3-4B" / "config.json", "{}");
  EXPECT_EQ(resolve_model_dir("ms://Qwen/Qwen3-4B"), (th_ / "models" / "Qwen" / "Qwen3-4B").string());
  // A directory without config.json / tokenizer.json does not count.
  fs::create_directories(ms_ / "models" / "Qwen" / "Empty");
  std::string e = error_of([] { resolve_model_dir("ms://Qwen/Empty"); });
  EXPECT_NE(e.find((ms_ / "models" / "Qwen" / "Empty").string() + " (exists but has no config.json"), std::string::npos) << e;
}

TEST_F(HubTest, HuggingFaceSnapshots) {
  fs::path repo = hf_ / "hub" / "models--Qwen--Qwen3-0.6B";
  touch(repo / "snapshots" / "aaa" / "config.json", "{}");
  // Only one snapshot, no refs/main.
  EXPECT_EQ(resolve_model_dir("hf://Qwen/Qwen3-0.6B"), (repo / "snapshots" / "aaa").string());
  // Newest snapshot wins without refs/main...
  touch(repo / "snapshots" / "bbb" / "config.json", "{}");
  fs::last_write_time(repo / "snapshots" / "aaa", fs::file_time_type::clock::now() - std::chrono::hours(5));
  EXPECT_EQ(resolve_model_dir("hf://Qwen/Qwen3-0.6B"), (repo / "snapshots" / "bbb").string());
  // ...and refs/main wins over mtime.
  touch(repo / "refs" / "main", "aaa\n");
  EXPECT_EQ(resolve_model_dir("hf://Qwen/Qwen3-0.6B"), (repo / "snapshots" / "aaa").string());
  // HF_HUB_CACHE overrides HF_HOME.
  fs::path alt = root_ / "hubcache" / "datasets--o--d" / "snapshots" / "c1";
  touch(alt / "train.jsonl");
  setenv("HF_HUB_CACHE", (root_ / "hubcache").c_str(), 1);
  EXPECT_EQ(resolve_dataset_path("hf://o/d"), (alt / "train.jsonl").string());
}

TEST_F(HubTest, DatasetDirectoryRules) {
  fs::path d = ms_ / "datasets" / "o" / "d";
  // The only data file (metadata files ignored).
  touch(d / "dataset_infos.json", "{}");
  touch(d / "self_cognition.jsonl");
  EXPECT_EQ(resolve_dataset_path("ms://o/d"), (d / "self_cognition.jsonl").string());
  // <split>.jsonl beats "the only file"; split names select.
  touch(d / "train.csv", "a\n1\n");
  touch(d / "test.jsonl");
  EXPECT_EQ(resolve_dataset_path("ms://o/d"), (d / "train.csv").string());
  EXPECT_EQ(resolve_dataset_path("ms://o/d", "default", "test"), (d / "test.jsonl").string());
  // <subset>/<split>.jsonl
  touch(d / "zh" / "train.jsonl");
  EXPECT_EQ(resolve_dataset_path("ms://o/d", "zh", "train"), (d / "zh" / "train.jsonl").string());
  // Shards data/<split>-*.jsonl: resolve_dataset_path gives the directory, files lists them.
  fs::path s = th_ / "datasets" / "o" / "sharded";
  touch(s / "data" / "train-00001-of-00002.jsonl");
  touch(s / "data" / "train-00000-of-00002.jsonl");
  touch(s / "data" / "validation-00000-of-00001.jsonl");
  auto files = resolve_dataset_files("o/sharded");
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], (s / "data" / "train-00000-of-00002.jsonl").string());
  EXPECT_EQ(resolve_dataset_path("o/sharded"), (s / "data").string());
  Dataset ds(DatasetMeta("ms://o/sharded"));
  EXPECT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.row_name(1), files[1] + ":1");
}

// Several data files and no split keyword in their names: Hugging Face datasets loads them all as
// the one split "train" (data_files.py DEFAULT_PATTERNS_ALL {"train": ["**"]}), in sorted path order
// (fsspec's find sorts), skipping hidden files and metadata; twinkle reads them as one table whose
// rows keep "<file>:<line>" names. The expected order is Python's sorted() of the names, by hand:
// "10.jsonl" < "b.jsonl" < "c.json" < "data/a.jsonl" ('1' < 'b' < 'c' < 'd'). (They were refused as
// "several candidates" before.)
TEST_F(HubTest, SeveralDataFilesLoadAsOneSplitInSortedOrder) {
  fs::path a = root_ / "multi";
  touch(a / "b.jsonl", "{\"id\": \"b1\"}\n\n{\"id\": \"b3\"}\n");
  touch(a / "10.jsonl", "{\"id\": \"n1\"}\n");
  touch(a / "c.json", "[\n  {\"id\": \"c2\"}\n]\n");
  touch(a / "data" / "a.jsonl", "{\"id\": \"d1\"}\n");
  touch(a / ".hidden.jsonl", "{\"id\": \"hidden\"}\n");
  touch(a / "__tmp.jsonl", "{\"id\": \"tmp\"}\n");
  touch(a / "dataset_infos.json", "{}");
  touch(a / "trainer_notes.txt", "not data");
  auto files = resolve_dataset_files(a.string());
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[0], (a / "10.jsonl").string());
  EXPECT_EQ(files[1], (a / "b.jsonl").string());
  EXPECT_EQ(files[2], (a / "c.json").string());
  EXPECT_EQ(files[3], (a / "data" / "a.jsonl").string());
  Dataset ds(DatasetMeta(a.string()));
  ASSERT_EQ(ds.size(), 5);
  const char* ids[] = {"n1", "b1", "b3", "c2", "d1"};
  const std::string names[] = {"10.jsonl:1", "b.jsonl:1", "b.jsonl:3", "c.json:2", "data/a.jsonl:1"};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ds[i]["id"], ids[i]) << i;
    EXPECT_EQ(ds.row_name(i), (a / names[i]).string()) << i;
  }
  // data_slice indexes the concatenated rows.
  Dataset sl(DatasetMeta(a.string(), DataSlice::indices({4, 1})));
  ASSERT_EQ(sl.size(), 2);
  EXPECT_EQ(sl[0]["id"], "d1");
  EXPECT_EQ(sl.row_name(1), (a / "b.jsonl:1").string());
  // A bad row in the second file is named by that file and line.
  touch(a / "b.jsonl", "{\"id\": \"b1\"}\n{\"id\": \n");
  std::string e = error_of([&] { Dataset bad{DatasetMeta(a.string())}; });
  EXPECT_NE(e.find((a / "b.jsonl").string() + ":2: invalid JSON"), std::string::npos) << e;

  // "trainer" is not the keyword "train" (no separator after it): no split named, both load.
  fs::path t = root_ / "nokw";
  touch(t / "trainer.jsonl");
  touch(t / "x.jsonl");
  EXPECT_EQ(resolve_dataset_files(t.string()).size(), 2u);
  // Split keywords after a separator select ("sft_train-0", "my.train.jsonl"; "val" is validation).
  fs::path k = root_ / "kw";
  touch(k / "sft_train-0.jsonl");
  touch(k / "my.train.jsonl");
  touch(k / "sft_val.jsonl");
  touch(k / "notes.jsonl");
  files = resolve_dataset_files(k.string());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], (k / "my.train.jsonl").string());
  EXPECT_EQ(files[1], (k / "sft_train-0.jsonl").string());
  EXPECT_EQ(resolve_dataset_files(k.string(), "default", "validation"),
            std::vector<std::string>{(k / "sft_val.jsonl").string()});
  // Files naming only other splits: no train split (datasets raises too); the message lists them.
  fs::path o = root_ / "other";
  touch(o / "test.jsonl");
  touch(o / "extra.jsonl");
  e = error_of([&] { resolve_dataset_files(o.string()); });
  EXPECT_NE(e.find("no file for split 'train'"), std::string::npos) << e;
  EXPECT_NE(e.find((o / "test.jsonl").string() + " (test)"), std::string::npos) << e;
  // CSV and JSON in one split: refused naming both files.
  fs::path m = root_ / "mixed";
  touch(m / "a.jsonl");
  touch(m / "b.csv", "a\n1\n");
  e = error_of([&] { resolve_dataset_files(m.string()); });
  EXPECT_NE(e.find("mixes file formats (a.jsonl and b.csv)"), std::string::npos) << e;
}

TEST_F(HubTest, MissingListsEveryPathAndHowToDownload) {
  std::string e = error_of([] { resolve_dataset_path("ms://nobody/nothing.v2"); });
  for (const fs::path& p : {th_ / "datasets" / "nobody" / "nothing.v2", th_ / "datasets" / "nobody" / "nothing___v2",
                            ms_ / "datasets" / "nobody" / "nothing.v2", ms_ / "hub" / "datasets" / "nobody" / "nothing___v2"})
    EXPECT_NE(e.find(p.string() + " (missing)"), std::string::npos) << p << "\n" << e;
  EXPECT_NE(e.find("modelscope download --dataset nobody/nothing.v2 --local_dir <dir>"), std::string::npos) << e;
  EXPECT_NE(e.find("TWINKLE_HOME"), std::string::npos) << e;

  e = error_of([] { resolve_model_dir("hf://nobody/model"); });
  EXPECT_NE(e.find((hf_ / "hub" / "models--nobody--model").string() + " (missing)"), std::string::npos) << e;
  EXPECT_NE(e.find("huggingface-cli download nobody/model"), std::string::npos) << e;

  e = error_of([] { resolve_model_dir("ms://Qwen/Qwen3-4B"); });
  EXPECT_NE(e.find((ms_ / "hub" / "Qwen" / "Qwen3-4B").string()), std::string::npos) << e;
  EXPECT_NE(e.find("modelscope download --model Qwen/Qwen3-4B"), std::string::npos) << e;

  e = error_of([] { resolve_dataset_path("data/missing.jsonl"); });
  EXPECT_NE(e.find("no such local path, and as the ModelScope id ms://data/missing.jsonl"), std::string::npos) << e;
  e = error_of([] { resolve_dataset_path("./no/such/file.jsonl"); });
  EXPECT_NE(e.find("no such file or directory"), std::string::npos) << e;
  e = error_of([] { resolve_model_dir("ms://a/b/c"); });
  EXPECT_NE(e.find("owner/name"), std::string::npos) << e;
}

TEST_F(HubTest, SelfCognitionFallsBackToShippedFile) {
  std::string p = resolve_dataset_path("ms://swift/self-cognition");
  EXPECT_EQ(fs::path(p).filename(), "self_cognition.jsonl");
  EXPECT_TRUE(fs::equivalent(p, fs::path(TWINKLE_SOURCE_DIR) / "data" / "self_cognition.jsonl"));
  EXPECT_EQ(resolve_dataset_path("swift/self-cognition"), p);
  // A cached copy wins over the shipped one.
  touch(ms_ / "datasets" / "swift" / "self-cognition" / "self_cognition.jsonl");
  EXPECT_EQ(resolve_dataset_path("ms://swift/self-cognition"),
            (ms_ / "datasets" / "swift" / "self-cognition" / "self_cognition.jsonl").string());
  // No fallback for hf://.
  EXPECT_THROW(resolve_dataset_path("hf://swift/self-cognition"), Error);
  // The recipe's load: range(256) over the shipped rows wraps.
  fs::remove_all(ms_);
  Dataset ds(DatasetMeta("ms://swift/self-cognition", DataSlice::range(256)));
  EXPECT_EQ(ds.size(), 256);
}
