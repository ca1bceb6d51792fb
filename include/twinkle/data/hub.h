// twinkle/data/hub.h — offline resolution of hub ids to local directories.
//
// "ms://owner/name" and "hf://owner/name" (and bare "owner/name") resolve to the
// ModelScope and Hugging Face local cache layouts and to $TWINKLE_HOME; nothing is
// downloaded (this build has no network access at run time).
#pragma once
#include <string>

namespace twinkle {

/// Directory holding a model (config.json, tokenizer files, weights) for a local path
/// or hub id. Throws twinkle::Error listing every place it looked and how to download.
std::string resolve_model_dir(const std::string& id_or_path);

/// Path of a dataset file (.jsonl/.json/.csv) or directory for a local path or hub id.
/// Throws twinkle::Error listing every place it looked and how to download.
std::string resolve_dataset_path(const std::string& id_or_path, const std::string& subset = "default",
                                 const std::string& split = "train");

}  // namespace twinkle
