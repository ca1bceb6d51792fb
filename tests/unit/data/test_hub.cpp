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
// (fsspec's glob sorts), skipping hidden files, files inside "__" directories and metadata; twinkle
// reads them as one table whose rows keep "<file>:<line>" names. The expected order is Python's
// sorted() of the names, by hand: "10.jsonl" < "b.jsonl" < "c.json" < "data/a.jsonl" ('1' < 'b' <
// 'c' < 'd'). (They were refused as "several candidates" before.)
TEST_F(HubTest, SeveralDataFilesLoadAsOneSplitInSortedOrder) {
  fs::path a = root_ / "multi";
  touch(a / "b.jsonl", "{\"id\": \"b1\"}\n\n{\"id\": \"b3\"}\n");
  touch(a / "10.jsonl", "{\"id\": \"n1\"}\n");
  touch(a / "c.json", "[\n  {\"id\": \"c2\"}\n]\n");
  touch(a / "data" / "a.jsonl", "{\"id\": \"d1\"}\n");
  touch(a / ".hidden.jsonl", "{\"id\": \"hidden\"}\n");
  touch(a / "__tmp" / "x.jsonl", "{\"id\": \"tmp\"}\n");
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
  // A parquet file in a split next to jsonl files (sorted before or after them): two formats, refused
  // naming both; an .arrow file there: refused naming it, not read as the jsonl rows alone.
  for (const char* name : {"a.parquet", "z.parquet"}) {
    fs::path q = root_ / ("pq_" + std::string(name));
    touch(q / "train" / "m.jsonl");
    touch(q / "train" / name, "PAR1");
    e = error_of([&] { resolve_dataset_files(q.string()); });
    const std::string pair = name[0] == 'a' ? "(a.parquet and m.jsonl)" : "(m.jsonl and z.parquet)";
    EXPECT_NE(e.find("mixes file formats " + pair), std::string::npos) << e;
  }
  for (const char* name : {"a.arrow", "z.arrow"}) {
    fs::path q = root_ / ("ar_" + std::string(name));
    touch(q / "train" / "m.jsonl");
    touch(q / "train" / name, "ARROW1");
    e = error_of([&] { resolve_dataset_files(q.string()); });
    EXPECT_NE(e.find((q / "train" / name).string() + " (arrow files are not supported) next to"), std::string::npos)
        << e;
  }
  // Parquet shards alone: the split's files, in order.
  fs::path ps = root_ / "pq_only";
  touch(ps / "data" / "train-00001-of-00002.parquet", "PAR1");
  touch(ps / "data" / "train-00000-of-00002.parquet", "PAR1");
  const auto pf = resolve_dataset_files(ps.string());
  ASSERT_EQ(pf.size(), 2u);
  EXPECT_EQ(pf[0], (ps / "data" / "train-00000-of-00002.parquet").string());
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

// The layouts of a dataset directory with several files, as Hugging Face datasets resolves them
// (huggingface/datasets src/datasets/data_files.py, get_data_patterns -> _get_data_files_patterns,
// fsspec >= 2023.12 patterns). Every expected list below is written by hand from those patterns:
// a split's files are the matches of DEFAULT_PATTERNS_SPLIT_IN_FILENAME["train"] =
// ["**/train[-._ 0-9]*", "**/*[-._ 0-9]train[-._ 0-9]*", "**/training[-._ 0-9]*",
//  "**/*[-._ 0-9]training[-._ 0-9]*"] in that order, each pattern's matches sorted by path; split
// directories (DEFAULT_PATTERNS_SPLIT_IN_DIR_NAME, "**/train/**", "**/train[-._ 0-9]*/**", ...) come
// before file names in ALL_DEFAULT_PATTERNS, and the sharded layout data/{split}-NNNNN-of-NNNNN*.*
// before both; resolve_pattern skips hidden parts and "__" directories (not "__" files). Before,
// twinkle sorted a split's files by path alone, looked only at D and D/data, skipped "__" files,
// had no split directories and let the sharded layout mix with other files.
TEST_F(HubTest, DirectoryLayoutsFollowHuggingFaceDataFilesPatterns) {
  // File names: pattern order, then path order.
  fs::path f = root_ / "by_name";
  for (const char* n : {"a-train.jsonl", "train-b.jsonl", "training.jsonl", "x_training_2.jsonl", "b.jsonl",
                        "sub/train.jsonl", "val.jsonl"})
    touch(f / n);
  // "**/train[sep]*": sub/train.jsonl, train-b.jsonl ('s' < 't'); "**/*[sep]train[sep]*": a-train.jsonl;
  // "**/training[sep]*": training.jsonl; "**/*[sep]training[sep]*": x_training_2.jsonl. b.jsonl is
  // in no split; val.jsonl is validation ("**/val[sep]*").
  std::vector<std::string> want;
  for (const char* n : {"sub/train.jsonl", "train-b.jsonl", "a-train.jsonl", "training.jsonl", "x_training_2.jsonl"})
    want.push_back((f / n).string());
  EXPECT_EQ(resolve_dataset_files(f.string()), want);
  EXPECT_EQ(resolve_dataset_files(f.string(), "default", "validation"),
            std::vector<std::string>{(f / "val.jsonl").string()});
  std::string e = error_of([&] { resolve_dataset_files(f.string(), "default", "test"); });
  EXPECT_NE(e.find("no file for split 'test'"), std::string::npos) << e;
  EXPECT_NE(e.find("\"split file names\""), std::string::npos) << e;
  EXPECT_NE(e.find("split(s) 'train', 'validation'"), std::string::npos) << e;

  // Split directories (D/train/*.jsonl) win over split file names: notes-train.jsonl is in no split.
  // "**/train/**": train/a.jsonl, train/b.jsonl; "**/train[sep]*/**": data/train-v2/c.jsonl.
  fs::path d = root_ / "by_dir";
  for (const char* n : {"train/b.jsonl", "train/a.jsonl", "test/x.jsonl", "notes-train.jsonl", "data/train-v2/c.jsonl"})
    touch(d / n);
  want.clear();
  for (const char* n : {"train/a.jsonl", "train/b.jsonl", "data/train-v2/c.jsonl"}) want.push_back((d / n).string());
  EXPECT_EQ(resolve_dataset_files(d.string()), want);
  EXPECT_EQ(resolve_dataset_files(d.string(), "default", "test"), std::vector<std::string>{(d / "test/x.jsonl").string()});
  EXPECT_EQ(resolve_dataset_path(d.string()), (d / "train").string());  // several files: the first one's directory

  // Skipped: hidden files and directories, files inside "__" directories (so __cache__/train.jsonl
  // names no split), README.md and dataset_infos.json; kept: a FILE named "__notes.jsonl" and files at
  // any depth. Everything is "train" (DEFAULT_PATTERNS_ALL): "__notes.jsonl" < "b.jsonl" <
  // "deep/er/f.jsonl" ('_' < 'b' < 'd'). configuration.json (ModelScope's) is twinkle's own skip.
  fs::path k = root_ / "skips";
  for (const char* n : {"b.jsonl", "__notes.jsonl", "__cache__/train.jsonl", ".git/d.jsonl", ".e.jsonl",
                        "deep/er/f.jsonl", "dataset_infos.json", "configuration.json", ".hidden/test.jsonl"})
    touch(k / n);
  touch(k / "README.md", "# card\n");
  want.clear();
  for (const char* n : {"__notes.jsonl", "b.jsonl", "deep/er/f.jsonl"}) want.push_back((k / n).string());
  EXPECT_EQ(resolve_dataset_files(k.string()), want);
  e = error_of([&] { resolve_dataset_files(k.string(), "default", "test"); });  // the one split is train
  EXPECT_NE(e.find("\"all files\""), std::string::npos) << e;

  // Sharded files decide alone (SPLIT_PATTERN_SHARDED is tried first): test.jsonl is in no split;
  // the splits are train then the others sorted ("random").
  fs::path h = root_ / "sharded";
  for (const char* n : {"data/train-00001-of-00002.jsonl", "data/train-00000-of-00002.jsonl",
                        "data/random-00000-of-00001.jsonl", "test.jsonl"})
    touch(h / n);
  want = {(h / "data/train-00000-of-00002.jsonl").string(), (h / "data/train-00001-of-00002.jsonl").string()};
  EXPECT_EQ(resolve_dataset_files(h.string()), want);
  EXPECT_EQ(resolve_dataset_files(h.string(), "default", "random"),
            std::vector<std::string>{(h / "data/random-00000-of-00001.jsonl").string()});
  e = error_of([&] { resolve_dataset_files(h.string(), "default", "test"); });
  EXPECT_NE(e.find("split(s) 'train', 'random'"), std::string::npos) << e;
  // A shard whose split is no valid split name (datasets' _split_re \w+(\.\w+)*) is refused by name.
  touch(h / "data" / "my-set-00000-of-00001.jsonl");
  e = error_of([&] { resolve_dataset_files(h.string()); });
  EXPECT_NE(e.find("names the split 'my-set'"), std::string::npos) << e;
}
