// `twinkle train --metrics-file`: a new run truncates the file, a resumed run keeps the steps up
// to its checkpoint (see metrics_file.h).
#include "metrics_file.h"

#include <filesystem>
#include <system_error>
#include <nlohmann/json.hpp>
#include <vector>

#include "twinkle/core/error.h"

namespace twinkle::cli {

std::ofstream open_metrics_file(const std::string& path, int64_t resumed_step, int64_t* kept) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  twinkle::check(!ec, "cannot create the directory of metrics file " + path + ": " + ec.message());
  std::vector<std::string> lines;
  if (resumed_step > 0 && std::filesystem::exists(path)) {
    std::ifstream in(path);
    twinkle::check(in.good(), "cannot read metrics file " + path + " (--metrics-file, kept on --resume)");
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() >= 1 &&
          j["step"].get<int64_t>() <= resumed_step)
        lines.push_back(line);
    }
  }
  if (resumed_step > 0) {
    // The kept lines go to a temporary file renamed over the old one: a run killed here leaves the old
    // file or the new one, never a truncated one.
    const std::string tmp = path + ".tmp";
    {
      std::ofstream t(tmp, std::ios::trunc);
      for (const auto& l : lines) t << l << "\n";
      t.flush();
      twinkle::check(t.good(), "cannot write metrics file " + tmp);
    }
    std::filesystem::rename(tmp, path, ec);
    twinkle::check(!ec, "cannot replace metrics file " + path + " by " + tmp + ": " + ec.message());
  }
  std::ofstream out(path, resumed_step > 0 ? std::ios::app : std::ios::trunc);
  twinkle::check(out.good(), "cannot open metrics file " + path);
  if (kept) *kept = static_cast<int64_t>(lines.size());
  return out;
}

}  // namespace twinkle::cli
