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

/// Path of a dataset file (.jsonl/.json/.csv/.parquet) or directory for a local path or hub id.
/// A directory (local or cached) resolves to its data file (see resolve_dataset_files);
/// when the split has several files the directory of the first is returned (which need not hold
/// the whole split: read a split with resolve_dataset_files).
/// Throws twinkle::Error listing every place it looked and how to download.
std::string resolve_dataset_path(const std::string& id_or_path, const std::string& subset = "default",
                                 const std::string& split = "train");

/// The data files (at least one) of a local file/directory or hub dataset id for one split. A
/// directory's files are chosen as Hugging Face `datasets.load_dataset(dir)` chooses them
/// (data_files.h: sharded data/{split}-NNNNN-of-NNNNN files, else split directories, else split
/// keywords in file names, else every file as "train"; a split's files in datasets' order: pattern
/// by pattern, each sorted by path; hidden files and "__" directories skipped), in the directory
/// D/<subset> when subset != "default" and it holds data files (twinkle's subset rule), else D.
/// Of the split's files those ending .jsonl, .json, .csv or .parquet are read (also ModelScope's
/// configuration.json and state.json are skipped); rows keep "<file>:<line>" names (for parquet the
/// 1-based row number in the file, twinkle/data/parquet.h). The hubs' parquet layout,
/// data/{split}-NNNNN-of-NNNNN.parquet (`push_to_hub`, the auto-converted refs/convert/parquet),
/// is the "sharded" layout of data_files.h.
/// Not emulated (data_files.h): a README.md `configs:` YAML block (datasets reads its data_files
/// first; twinkle uses the file layout alone) and datasets' inspect-log / harbor layouts.
/// Throws twinkle::Error when nothing is found, when the directory has no such split (naming its
/// layout, its splits and their files), when the chosen files mix formats (CSV, JSON, parquet: one
/// format per split, as datasets' packaged builders read them), and when the split also holds .arrow
/// files (not read: its other files alone would be a part of the split). A parquet file in a build
/// without parquet support is refused when it is read (load_rows), naming what to install.
std::vector<std::string> resolve_dataset_files(const std::string& id_or_path, const std::string& subset = "default",
                                               const std::string& split = "train");

}  // namespace twinkle
