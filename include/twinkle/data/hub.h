// twinkle/data/hub.h — offline resolution of hub ids to local directories and files.
//
// "ms://owner/name" and "hf://owner/name" (and bare "owner/name", which means ms:// as
// in Twinkle's src/twinkle/hub/hub.py) resolve to the ModelScope and Hugging Face local
// cache layouts and to $TWINKLE_HOME; nothing is downloaded (this build has no network
// access at run time). A path that exists on disk always wins over a hub id.
//
// Places searched, in order (the first existing one wins):
//   ms://owner/name (models; datasets use "datasets" instead of "models"):
//     $TWINKLE_HOME/models/owner/name          (TWINKLE_HOME default ~/.cache/twinkle)
//     C/models/owner/name, C/owner/name, C/datasets/owner/name (datasets only)
//       for C in $MODELSCOPE_CACHE, $MODELSCOPE_CACHE/hub (default ~/.cache/modelscope/hub)
//     each also with '.' in name replaced by "___" (ModelScope's on-disk spelling,
//     e.g. Qwen3-0___6B).
//   hf://owner/name:
//     H/models--owner--name/snapshots/<commit in refs/main, else the only / newest snapshot>
//     (datasets: H/datasets--owner--name/...), H = $HF_HUB_CACHE, else $HF_HOME/hub,
//     else ~/.cache/huggingface/hub (huggingface_hub's cache layout).
//
// Special case (documented fallback): the dataset "ms://swift/self-cognition" (or bare
// "swift/self-cognition"; subset "default", split "train") resolves to the shipped
// data/self_cognition.jsonl when no cache holds it, with an info line on stderr. The file is looked up at $TWINKLE_SOURCE_DIR/data,
// at the compile-time TWINKLE_SOURCE_DIR/data, then at <dir of executable>/../../data.
// It is a re-written, ~100-row stand-in for ModelScope's swift/self-cognition (same
// columns query/response/tag, same {{NAME}}/{{AUTHOR}} placeholders), not a copy.
#pragma once
#include <string>
#include <vector>

namespace twinkle {

/// Directory holding a model (config.json, tokenizer files, weights) for a local path
/// or hub id. A hub candidate counts only if it holds config.json or tokenizer.json.
/// Throws twinkle::Error listing every place it looked and how to download.
std::string resolve_model_dir(const std::string& id_or_path);

/// Path of a dataset file (.jsonl/.json/.csv) or directory for a local path or hub id.
/// A directory (local or cached) resolves to its data file (see resolve_dataset_files);
/// when the split has several files the directory of the first is returned.
/// Throws twinkle::Error listing every place it looked and how to download.
std::string resolve_dataset_path(const std::string& id_or_path, const std::string& subset = "default",
                                 const std::string& split = "train");

/// The data files (sorted by path, at least one) of a local file/directory or hub dataset id,
/// chosen as Hugging Face `datasets.load_dataset(dir)` chooses them (datasets/data_files.py):
/// the directory D/<subset> (subset != "default") if it holds data files, else D and D/data
/// together. Data files are .jsonl, .json and .csv, not metadata (dataset_infos.json,
/// configuration.json, dataset_info.json, ...) and not hidden ('.' or "__" first).
///   - If a file name carries a split keyword (datasets' SPLIT_KEYWORDS: train/training,
///     validation/valid/dev/val, test/testing/eval/evaluation; another split name is its own
///     keyword) at its start or after one of "-._ 0-9", followed by one of them
///     ("train.jsonl", "train-00000-of-00002.jsonl", "sft_test.csv"; not "trainer.jsonl"),
///     the split's files are those naming it; none for the asked split is an error listing the
///     files and their splits.
///   - Else every data file is the split (datasets: {"train": ["**"]}), read in sorted order as
///     one table; rows keep "<file>:<line>" names.
/// Throws twinkle::Error when nothing is found, and when the chosen files mix CSV with JSON (one
/// format per split, as datasets' packaged builders read them).
std::vector<std::string> resolve_dataset_files(const std::string& id_or_path, const std::string& subset = "default",
                                               const std::string& split = "train");

}  // namespace twinkle
