// twinkle/data/data_files.h — the splits of a dataset directory and the files of each, chosen as
// Hugging Face datasets chooses them for a directory without a loading script or README configs.
//
// Source: huggingface/datasets src/datasets/data_files.py (get_data_patterns,
// _get_data_files_patterns, resolve_pattern) with fsspec >= 2023.12 glob semantics:
//  * Files: every file under the directory, at any depth, except hidden ones (a path part starting
//    with '.'), files inside a directory whose name starts with "__" (a FILE named "__x" is kept:
//    _is_inside_unrequested_special_dir looks at the parent directories only) and FILES_TO_IGNORE
//    (README.md, config.json, dataset_info.json, dataset_infos.json, dummy_data.zip,
//    dataset_dict.json). Every file counts when the layout is detected, whatever its extension.
//  * The first layout that matches decides the splits (ALL_SPLIT_PATTERNS, then
//    ALL_DEFAULT_PATTERNS in order):
//      1. sharded: data/{split}-NNNNN-of-NNNNN*.* (SPLIT_PATTERN_SHARDED); any split name (it must
//         match datasets' _split_re \w+(\.\w+)*), ordered train, validation, test, then the others
//         sorted;
//      2. split directories (DEFAULT_PATTERNS_SPLIT_IN_DIR_NAME): a directory part named by a
//         split keyword, "**/{kw}/**", "**/{kw}[sep]*/**", "**/*[sep]{kw}/**",
//         "**/*[sep]{kw}[sep]*/**" (D/train/*.jsonl, D/data/train-v2/x.jsonl);
//      3. split file names (DEFAULT_PATTERNS_SPLIT_IN_FILENAME): the file name, "**/{kw}[sep]*",
//         "**/*[sep]{kw}[sep]*" (train.jsonl, sft_train-0.jsonl; not trainer.jsonl);
//      4. all files: the one split "train" (DEFAULT_PATTERNS_ALL {"train": ["**"]}).
//    Keywords (SPLIT_KEYWORDS): train: train, training; validation: validation, valid, dev, val;
//    test: test, testing, eval, evaluation; sep (NON_WORDS_CHARS) is one of "-._ " or a digit.
//    In 2 and 3 a split exists when one of its patterns matches a file.
//  * A split's files are the matches of its patterns in pattern order (keyword by keyword, each
//    keyword's base patterns in the order above), each pattern's matches sorted by path (fsspec's
//    glob sorts); a file two patterns match is listed twice, as datasets lists it
//    (DataFilesList.from_patterns extends the list pattern by pattern).
// datasets' newest layouts for inspect logs (**/*.eval) and harbor tasks are not emulated.
#pragma once
#include <map>
#include <string>
#include <vector>

namespace twinkle {

struct DataFilesLayout {
  /// "sharded", "split directories", "split file names" or "all files" (empty: no file at all).
  std::string layout;
  /// The splits, in datasets' order.
  std::vector<std::string> splits;
  /// split -> its files (dir / relative path, '/'-separated), in datasets' order; any extension.
  std::map<std::string, std::vector<std::string>> files;
};

/// The layout of directory `dir` (rules above). No file at all: layout "" and no split.
/// Throws twinkle::Error naming the directory and the file when a sharded file's split name is
/// not a valid split name (datasets raises ValueError there).
DataFilesLayout resolve_data_files_layout(const std::string& dir);

}  // namespace twinkle
