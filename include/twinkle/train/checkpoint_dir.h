// twinkle/train/checkpoint_dir.h — crash-safe training-checkpoint directories on disk.
//
// Twinkle's names (src/twinkle/model/megatron/megatron.py
// save): a checkpoint is `<output_dir>/checkpoint-step-<cur_step>`; with save_optimizer it also
// holds the Megatron-style tracker `latest_checkpointed_iteration.txt` (the step) and the
// directory `iter_<step:07d>/` with the optimizer state (twinkle's layout-independent form,
// see train/megatron_model.h), plus `trainer_state.json`.
// Crash safety: a checkpoint is written complete into a staging directory next to its final
// place, every file and directory fsync'ed, then renamed into place (one rename(2): the
// directory appears complete or not at all), and `<output_dir>/latest` (the name of the newest
// complete checkpoint) is replaced atomically after that, last.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "twinkle/dist/process_group.h"

namespace twinkle {

/// "checkpoint-step-<step>" (Twinkle's default save name).
std::string checkpoint_step_name(int64_t step);
/// "iter_<step:07d>" (Megatron's distributed-checkpoint directory name).
std::string iter_dir_name(int64_t step);

/// The staging directory save writes `final_dir` into: `<parent>/.<name>.tmp.<pid>` (hidden,
/// so a crash leaves nothing that looks like a checkpoint).
std::string staging_dir_for(const std::string& final_dir);
/// The same name for a staging directory made by the process `pid` (a sharded save: every rank
/// writes into the directory global rank 0 named, so they all use rank 0's pid).
std::string staging_dir_for(const std::string& final_dir, int64_t pid);
/// The rank-0-then-agree step of every save (train/megatron_model.cpp, train/megatron_resume.cpp):
/// global rank 0 runs `write`; if it throws, `on_failure(what)` (which may clean up, e.g. remove
/// a staging directory) gives rank 0's message. Then one Max all-reduce over `world` tells every
/// rank, and all throw twinkle::Error before any other collective: rank 0 with its message, the
/// others with `elsewhere`, so an API caller that catches it leaves no rank waiting.
void run_on_rank0_agreed(dist::ProcessGroup& world, const std::function<void()>& write,
                         const std::function<std::string(const std::string&)>& on_failure,
                         const std::string& elsewhere);
/// Removes staging directories of `final_dir` left by earlier processes that died while
/// writing it (`.<name>.tmp.*`, and `.<name>.old.*` of an interrupted commit_dir).
void remove_stale_staging(const std::string& final_dir);
/// fsyncs every regular file under `dir` and every directory (dir included). Throws
/// twinkle::Error naming the file whose fsync failed.
void fsync_tree(const std::string& dir);
/// Moves the complete directory `staging` to `final_dir` with rename(2) and fsyncs the parent.
/// An existing `final_dir` (a checkpoint of the same step written before) is first renamed
/// aside and removed after the new one is in place. Throws twinkle::Error naming both paths.
void commit_dir(const std::string& staging, const std::string& final_dir);
/// Atomically sets `<output_dir>/latest` to `name` (one line). Throws twinkle::Error.
void write_latest(const std::string& output_dir, const std::string& name);
/// Removes the oldest `checkpoint-step-N` directories of `output_dir` (those holding a
/// trainer_state.json) so that `keep_last` remain (keep_last <= 0: none removed); `keep` is
/// never removed. Returns the removed paths.
std::vector<std::string> prune_checkpoints(const std::string& output_dir, int64_t keep_last, const std::string& keep);
/// The checkpoint directory to resume from: `dir` itself when it holds trainer_state.json, else
/// `dir/<contents of dir/latest>`. Throws twinkle::Error naming `dir` when it is neither.
std::string resolve_resume_dir(const std::string& dir);
/// `--resume auto` (torchrun's elastic restart; twinkle-run --max-restarts): the newest complete
/// checkpoint in `output_dir` — the `latest` one when it names a directory holding
/// trainer_state.json, else the `checkpoint-step-N` with the largest N that holds one (save
/// renames a checkpoint into place only once it is complete, so one that exists is whole) — or ""
/// when there is none (or no `output_dir`): a fresh start. Throws nothing.
std::string find_resume_checkpoint(const std::string& output_dir);
/// `resume` as the recipes and `twinkle train` take it: "" (no resume) stays "", "auto" becomes
/// find_resume_checkpoint(output_dir) (possibly ""), anything else is returned unchanged.
std::string resolve_resume_option(const std::string& resume, const std::string& output_dir);

}  // namespace twinkle
