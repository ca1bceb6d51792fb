// Minimal version: local paths only. The data-pipeline work extends it to hub caches.
#include "twinkle/data/hub.h"

#include <filesystem>

#include "twinkle/core/error.h"

namespace twinkle {

std::string resolve_model_dir(const std::string& id_or_path) {
  if (std::filesystem::is_directory(id_or_path)) return id_or_path;
  throw Error("model '" + id_or_path + "' not found: not a local directory");
}

std::string resolve_dataset_path(const std::string& id_or_path, const std::string&, const std::string&) {
  if (std::filesystem::exists(id_or_path)) return id_or_path;
  throw Error("dataset '" + id_or_path + "' not found: not a local file");
}

}  // namespace twinkle
