// examples/recipe_metrics.h — the recipes' OUTPUT_DIR/metrics.jsonl across a resume, and the
// summary's figures over the steps a run itself trained. Not a library header: each recipe
// includes it once.
//
// A fresh run starts the file empty. A run resumed at step S (--resume) keeps the lines of steps
// 1..S that the run it continues wrote there (dropping any later step a crashed run logged past
// its last checkpoint) and appends its own, so the file stays the whole loss curve; before, the
// resumed run truncated it to its own steps.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "twinkle/core/error.h"

namespace recipe_metrics {

/// Opens `file` for the run's metrics lines (see above); `resumed_step` 0 = a fresh run.
/// Throws twinkle::Error naming the file when it cannot be written.
inline std::ofstream open_metrics(const std::filesystem::path& file, int64_t resumed_step) {
  std::vector<std::string> keep;
  if (resumed_step > 0) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
          j["step"].get<int64_t>() <= resumed_step)
        keep.push_back(line);
    }
  }
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
  std::ofstream out(file, std::ios::trunc);
  twinkle::check(out.good(), "cannot write the metrics file " + file.string());
  for (const auto& l : keep) out << l << "\n";
  out.flush();
  return out;
}

/// "4 steps" for a fresh run; "steps 3..4 of 4 (resumed at step 2)" for a resumed one.
inline std::string steps_phrase(int64_t start_step, int64_t step) {
  if (start_step == 0) return std::to_string(step) + " steps";
  if (step == start_step) return "no step (resumed at step " + std::to_string(start_step) + ", the last one)";
  return "steps " + std::to_string(start_step + 1) + ".." + std::to_string(step) + " of " + std::to_string(step) +
         " (resumed at step " + std::to_string(start_step) + ")";
}

}  // namespace recipe_metrics
