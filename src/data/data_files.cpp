// Hugging Face datasets' data-file patterns for a local directory (data_files.py; see the header).
#include "twinkle/data/data_files.h"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>

#include "twinkle/core/error.h"

namespace twinkle {

namespace fs = std::filesystem;

namespace {

// A file under the directory: its path relative to it, split into parts.
struct RelFile {
  std::string rel;                  // "data/train-0.jsonl"
  std::vector<std::string> dirs;    // {"data"}
  std::string base;                 // "train-0.jsonl"
};

// datasets' NON_WORDS_CHARS "-._ 0-9" (the [{sep}] of the patterns).
bool is_sep(char c) { return c == '-' || c == '.' || c == '_' || c == ' ' || (c >= '0' && c <= '9'); }

// SPLIT_KEYWORDS.
const std::vector<std::pair<std::string, std::vector<std::string>>>& split_keywords() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> k = {
      {"train", {"train", "training"}},
      {"validation", {"validation", "valid", "dev", "val"}},
      {"test", {"test", "testing", "eval", "evaluation"}}};
  return k;
}

// One path part against the four shapes of a keyword: exact "{kw}", "{kw}[sep]*", "*[sep]{kw}",
// "*[sep]{kw}[sep]*" (fnmatch: '*' any run of characters within the part).
bool part_exact(const std::string& p, const std::string& kw) { return p == kw; }
bool part_starts(const std::string& p, const std::string& kw) {
  return p.size() > kw.size() && p.compare(0, kw.size(), kw) == 0 && is_sep(p[kw.size()]);
}
bool part_ends(const std::string& p, const std::string& kw) {
  return p.size() > kw.size() && p.compare(p.size() - kw.size(), kw.size(), kw) == 0 &&
         is_sep(p[p.size() - kw.size() - 1]);
}
bool part_inside(const std::string& p, const std::string& kw) {
  for (size_t at = p.find(kw, 1); at != std::string::npos; at = p.find(kw, at + 1)) {
    const size_t after = at + kw.size();
    if (is_sep(p[at - 1]) && after < p.size() && is_sep(p[after])) return true;
  }
  return false;
}

// KEYWORDS_IN_DIR_NAME_BASE_PATTERNS (fsspec >= 2023.12): "**/{kw}/**", "**/{kw}[sep]*/**",
// "**/*[sep]{kw}/**", "**/*[sep]{kw}[sep]*/**" — some directory part of the file's path.
bool dir_pattern(const RelFile& f, const std::string& kw, int shape) {
  for (const auto& d : f.dirs) {
    const bool m = shape == 0 ? part_exact(d, kw) : shape == 1 ? part_starts(d, kw) : shape == 2 ? part_ends(d, kw)
                                                                                                : part_inside(d, kw);
    if (m) return true;
  }
  return false;
}

// KEYWORDS_IN_FILENAME_BASE_PATTERNS (fsspec >= 2023.12): "**/{kw}[sep]*", "**/*[sep]{kw}[sep]*" —
// the file name.
bool file_pattern(const RelFile& f, const std::string& kw, int shape) {
  return shape == 0 ? part_starts(f.base, kw) : part_inside(f.base, kw);
}

// SPLIT_PATTERN_SHARDED "data/{split}-[0-9]{5}-of-[0-9]{5}*.*" with the split left open ("*"):
// the split name as datasets' string_to_dict reads it from the file name (a greedy "(.+)" before
// "-NNNNN-of-NNNN"), or "" when the file is not a shard.
std::string shard_split(const RelFile& f) {
  if (f.dirs.size() != 1 || f.dirs[0] != "data") return "";
  static const std::regex glob(R"(.*-[0-9]{5}-of-[0-9]{5}.*\..*)");
  if (!std::regex_match(f.base, glob)) return "";
  static const std::regex name(R"(^(.+)-[0-9]{5}-of-[0-9]{4})");
  std::smatch m;
  return std::regex_search(f.base, m, name) ? m[1].str() : std::string();
}

// The glob of one split's shards: "data/{split}-[0-9]{5}-of-[0-9]{5}*.*".
bool is_shard_of(const RelFile& f, const std::string& split) {
  if (f.dirs.size() != 1 || f.dirs[0] != "data") return false;
  if (f.base.compare(0, split.size() + 1, split + "-") != 0) return false;
  static const std::regex rest(R"([0-9]{5}-of-[0-9]{5}.*\..*)");
  return std::regex_match(f.base.substr(split.size() + 1), rest);
}

// Every file datasets' resolve_pattern can return for the directory, sorted by path.
std::vector<RelFile> list_tree(const fs::path& dir) {
  static const std::set<std::string> ignore = {"README.md",         "config.json",    "dataset_info.json",
                                               "dataset_infos.json", "dummy_data.zip", "dataset_dict.json"};
  auto hidden = [](const std::string& part) {
    return !part.empty() && part[0] == '.' && part.find_first_not_of('.') != std::string::npos;
  };
  std::vector<RelFile> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::directory_entry& e = *it;
    const std::string name = e.path().filename().string();
    std::error_code ec2;
    if (e.is_directory(ec2) && !e.is_symlink(ec2)) {
      // hidden directories and "__" directories: nothing inside them is returned
      if (hidden(name) || name.rfind("__", 0) == 0) it.disable_recursion_pending();
      continue;
    }
    if (!(e.is_regular_file(ec2) || (e.is_symlink(ec2) && fs::is_regular_file(e.path(), ec2)))) continue;
    if (hidden(name) || ignore.count(name)) continue;
    RelFile f;
    const fs::path rel = e.path().lexically_relative(dir);
    f.rel = rel.generic_string();
    for (const auto& part : rel.parent_path()) f.dirs.push_back(part.string());
    f.base = name;
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const RelFile& a, const RelFile& b) { return a.rel < b.rel; });
  return out;
}

}  // namespace

DataFilesLayout resolve_data_files_layout(const std::string& dir_str) {
  const fs::path dir(dir_str);
  const std::vector<RelFile> files = list_tree(dir);
  DataFilesLayout L;
  if (files.empty()) return L;
  auto full = [&](const RelFile& f) { return (dir / f.rel).string(); };
  // 1. Sharded files data/{split}-NNNNN-of-NNNNN*.*
  std::set<std::string> shard_splits;
  for (const auto& f : files) {
    const std::string s = shard_split(f);
    if (s.empty()) continue;
    static const std::regex split_re(R"(^\w+(\.\w+)*$)");  // datasets/naming.py _split_re
    check(std::regex_match(s, split_re), "dataset directory '" + dir_str + "': the shard " + full(f) +
                                             " names the split '" + s +
                                             "', not a valid split name (\\w+(\\.\\w+)*, Hugging Face datasets' "
                                             "_split_re; datasets refuses it too)");
    shard_splits.insert(s);
  }
  if (!shard_splits.empty()) {
    L.layout = "sharded";
    for (const char* s : {"train", "validation", "test"})
      if (shard_splits.erase(s)) L.splits.push_back(s);
    L.splits.insert(L.splits.end(), shard_splits.begin(), shard_splits.end());  // std::set: sorted
    for (const auto& s : L.splits)
      for (const auto& f : files)
        if (is_shard_of(f, s)) L.files[s].push_back(full(f));
    return L;
  }
  // 2. and 3. Split keywords in a directory name, then in the file name: the splits with a match,
  // each split's files pattern by pattern.
  for (const bool by_dir : {true, false}) {
    const int shapes = by_dir ? 4 : 2;
    for (const auto& [split, kws] : split_keywords()) {
      std::vector<std::string> sel;
      for (const auto& kw : kws)
        for (int shape = 0; shape < shapes; ++shape)
          for (const auto& f : files)
            if (by_dir ? dir_pattern(f, kw, shape) : file_pattern(f, kw, shape)) sel.push_back(full(f));
      if (sel.empty()) continue;
      L.splits.push_back(split);
      L.files[split] = std::move(sel);
    }
    if (!L.splits.empty()) {
      L.layout = by_dir ? "split directories" : "split file names";
      return L;
    }
  }
  // 4. Every file is the split "train".
  L.layout = "all files";
  L.splits = {"train"};
  for (const auto& f : files) L.files["train"].push_back(full(f));
  return L;
}

}  // namespace twinkle
