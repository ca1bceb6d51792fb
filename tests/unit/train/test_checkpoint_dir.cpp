// train/checkpoint_dir.h: Twinkle's checkpoint names, the staging -> rename commit, `latest`,
// --keep-last pruning and the resume-directory rules.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "twinkle/core/error.h"
#include "twinkle/train/checkpoint_dir.h"

using namespace twinkle;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("twinkle_ckdir_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void make_ckpt(const fs::path& dir, const std::string& tag) {
  fs::create_directories(dir);
  std::ofstream(dir / "trainer_state.json") << "{\"cur_step\": 1}\n";
  std::ofstream(dir / "tag") << tag;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::string s;
  std::getline(in, s);
  return s;
}

}  // namespace

TEST(CheckpointDir, TwinkleAndMegatronNames) {
  EXPECT_EQ(checkpoint_step_name(30), "checkpoint-step-30");
  EXPECT_EQ(iter_dir_name(5), "iter_0000005");  // Megatron: iter_{:07d}
  EXPECT_EQ(iter_dir_name(12345678), "iter_12345678");
  const std::string s = staging_dir_for("/x/out/checkpoint-step-3");
  EXPECT_EQ(s, "/x/out/.checkpoint-step-3.tmp." + std::to_string(::getpid()));
}

TEST(CheckpointDir, CommitReplacesAWholeDirectoryAndLatestNamesIt) {
  const fs::path d = scratch("commit");
  make_ckpt(d / "checkpoint-step-2", "old");
  std::ofstream(d / "checkpoint-step-2" / "stale_file") << "x";
  const fs::path st = staging_dir_for((d / "checkpoint-step-2").string());
  make_ckpt(st, "new");
  commit_dir(st.string(), (d / "checkpoint-step-2").string());
  EXPECT_EQ(read(d / "checkpoint-step-2" / "tag"), "new");
  EXPECT_FALSE(fs::exists(d / "checkpoint-step-2" / "stale_file"));  // replaced as a whole
  EXPECT_FALSE(fs::exists(st));
  for (const auto& e : fs::directory_iterator(d)) EXPECT_EQ(e.path().filename().string().rfind(".", 0), std::string::npos);
  write_latest(d.string(), "checkpoint-step-2");
  EXPECT_EQ(read(d / "latest"), "checkpoint-step-2");
  EXPECT_EQ(resolve_resume_dir(d.string()), (d / "checkpoint-step-2").string());
  EXPECT_EQ(resolve_resume_dir((d / "checkpoint-step-2").string()), (d / "checkpoint-step-2").string());
  // A commit whose staging directory does not exist fails and keeps the checkpoint that is there.
  EXPECT_THROW(commit_dir((d / ".missing").string(), (d / "checkpoint-step-2").string()), Error);
  EXPECT_EQ(read(d / "checkpoint-step-2" / "tag"), "new");
  fs::remove_all(d);
}

TEST(CheckpointDir, StaleStagingOfADeadProcessIsRemoved) {
  const fs::path d = scratch("stale");
  make_ckpt(d / ".checkpoint-step-4.tmp.999999", "half");
  make_ckpt(d / ".checkpoint-step-4.old.999999", "aside");
  make_ckpt(d / ".checkpoint-step-40.tmp.999999", "other step");
  remove_stale_staging((d / "checkpoint-step-4").string());
  EXPECT_FALSE(fs::exists(d / ".checkpoint-step-4.tmp.999999"));
  EXPECT_FALSE(fs::exists(d / ".checkpoint-step-4.old.999999"));
  EXPECT_TRUE(fs::exists(d / ".checkpoint-step-40.tmp.999999"));
  fs::remove_all(d);
}

TEST(CheckpointDir, KeepLastPrunesTheOldestByStepNumber) {
  const fs::path d = scratch("prune");
  for (int s : {3, 6, 9, 12, 30}) make_ckpt(d / checkpoint_step_name(s), std::to_string(s));
  fs::create_directories(d / "checkpoint-step-1");  // no trainer_state.json: not a checkpoint, kept
  std::ofstream(d / "model.safetensors") << "x";
  EXPECT_TRUE(prune_checkpoints(d.string(), 0, "").empty());  // 0 = keep all
  auto removed = prune_checkpoints(d.string(), 2, (d / "checkpoint-step-30").string());
  EXPECT_EQ(removed.size(), 3u);
  EXPECT_FALSE(fs::exists(d / "checkpoint-step-3"));
  EXPECT_FALSE(fs::exists(d / "checkpoint-step-6"));
  EXPECT_FALSE(fs::exists(d / "checkpoint-step-9"));  // 9 < 12 numerically (not "9" > "12" as text)
  EXPECT_TRUE(fs::exists(d / "checkpoint-step-12"));
  EXPECT_TRUE(fs::exists(d / "checkpoint-step-30"));
  EXPECT_TRUE(fs::exists(d / "checkpoint-step-1"));
  EXPECT_TRUE(fs::exists(d / "model.safetensors"));
  fs::remove_all(d);
}

TEST(CheckpointDir, ResumeDirErrorsNameTheDirectory) {
  const fs::path d = scratch("resolve");
  try {
    resolve_resume_dir(d.string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(d.string() + " is not a checkpoint"), std::string::npos) << e.what();
  }
  std::ofstream(d / "latest") << "checkpoint-step-7\n";
  try {
    resolve_resume_dir(d.string());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("names checkpoint-step-7"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}

// --resume auto: `latest` when it names a complete checkpoint; else the highest complete
// checkpoint-step-N (numerically, not by name); staging directories, incomplete ones (no
// trainer_state.json), other names and a missing directory are never chosen ("" = fresh start).
TEST(CheckpointDir, ResumeAutoFindsTheNewestCompleteCheckpoint) {
  const fs::path d = scratch("auto");
  EXPECT_EQ(find_resume_checkpoint((d / "missing").string()), "");
  EXPECT_EQ(find_resume_checkpoint(""), "");
  EXPECT_EQ(find_resume_checkpoint(d.string()), "");
  EXPECT_EQ(resolve_resume_option("auto", d.string()), "");
  EXPECT_EQ(resolve_resume_option("", d.string()), "");
  EXPECT_EQ(resolve_resume_option("some/dir", d.string()), "some/dir");
  make_ckpt(d / "checkpoint-step-2", "2");
  make_ckpt(d / "checkpoint-step-10", "10");
  make_ckpt(d / ".checkpoint-step-12.tmp.999", "staging");  // a writer that died
  fs::create_directories(d / "checkpoint-step-14");          // no trainer_state.json: not a resumable one
  make_ckpt(d / "checkpoint-step-x", "x");
  make_ckpt(d / "checkpoint-final", "final");
  EXPECT_EQ(find_resume_checkpoint(d.string()), (d / "checkpoint-step-10").string());
  EXPECT_EQ(resolve_resume_option("auto", d.string()), (d / "checkpoint-step-10").string());
  std::ofstream(d / "latest") << "checkpoint-step-2\n";  // latest wins when it names a complete one
  EXPECT_EQ(find_resume_checkpoint(d.string()), (d / "checkpoint-step-2").string());
  std::ofstream(d / "latest", std::ios::trunc) << "checkpoint-step-14\n";  // ... and only then
  EXPECT_EQ(find_resume_checkpoint(d.string()), (d / "checkpoint-step-10").string());
  fs::remove_all(d);
}
