// Offline hub resolution: local paths, $TWINKLE_HOME, ModelScope and Hugging Face caches.
// Layouts: ModelScope snapshot_download (hub/[models/|datasets/]owner/name, '.' in the
// name stored as "___"), huggingface_hub (hub/models--owner--name/snapshots/<commit>,
// refs/main holding the commit). See twinkle/data/hub.h.
#include "twinkle/data/hub.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "twinkle/core/error.h"
#include "twinkle/data/data_files.h"

namespace fs = std::filesystem;

namespace twinkle {
namespace {

struct HubId {
  std::string scheme;  // "ms" or "hf"
  std::string owner, name;
};

bool valid_part(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
  return true;
}

// Parses "ms://o/n", "hf://o/n" or bare "o/n". Returns false for anything else.
bool parse_hub_id(const std::string& s, HubId& out, std::string& why) {
  std::string rest = s;
  out.scheme = "ms";
  bool explicit_scheme = false;
  if (s.rfind("ms://", 0) == 0) {
    rest = s.substr(5);
    explicit_scheme = true;
  } else if (s.rfind("hf://", 0) == 0) {
    out.scheme = "hf";
    rest = s.substr(5);
    explicit_scheme = true;
  } else if (s.rfind("modelscope://", 0) == 0) {
    rest = s.substr(13);
    explicit_scheme = true;
  }
  auto slash = rest.find('/');
  if (slash == std::string::npos || rest.find('/', slash + 1) != std::string::npos) {
    if (explicit_scheme) why = "a hub id must be <scheme>://owner/name";
    return false;
  }
  out.owner = rest.substr(0, slash);
  out.name = rest.substr(slash + 1);
  if (!valid_part(out.owner) || !valid_part(out.name)) {
    if (explicit_scheme) why = "owner and name may only contain letters, digits, '-', '_' and '.'";
    return false;
  }
  return true;
}

std::string home_dir() {
  const char* h = std::getenv("HOME");
  return (h && *h) ? std::string(h) : std::string("/root");
}

std::string env_or(const char* var, const std::string& def) {
  const char* v = std::getenv(var);
  return (v && *v) ? std::string(v) : def;
}

std::string twinkle_home() { return env_or("TWINKLE_HOME", home_dir() + "/.cache/twinkle"); }

std::vector<std::string> modelscope_roots() {
  const char* v = std::getenv("MODELSCOPE_CACHE");
  std::vector<std::string> r;
  if (v && *v) {
    // MODELSCOPE_CACHE has meant both ~/.cache/modelscope and ~/.cache/modelscope/hub
    // across modelscope versions; search both.
    r.push_back(v);
    r.push_back(std::string(v) + "/hub");
  } else {
    r.push_back(home_dir() + "/.cache/modelscope/hub");
  }
  return r;
}

std::string hf_hub_root() {
  const char* c = std::getenv("HF_HUB_CACHE");
  if (c && *c) return c;
  return env_or("HF_HOME", home_dir() + "/.cache/huggingface") + "/hub";
}

std::vector<std::string> name_variants(const std::string& name) {
  std::vector<std::string> v{name};
  std::string alt;
  for (char c : name) {
    if (c == '.')
      alt += "___";
    else
      alt += c;
  }
  if (alt != name) v.push_back(alt);
  return v;
}

// The snapshot directory of a huggingface_hub repo folder, or "" (with a note in `why`).
std::string hf_snapshot(const fs::path& repo, std::string& why) {
  std::error_code ec;
  if (!fs::is_directory(repo, ec)) {
    why = "missing";
    return "";
  }
  fs::path snaps = repo / "snapshots";
  std::ifstream ref(repo / "refs" / "main");
  if (ref) {
    std::string commit;
    std::getline(ref, commit);
    while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
    if (!commit.empty() && fs::is_directory(snaps / commit, ec)) return (snaps / commit).string();
  }
  std::vector<fs::path> all;
  if (fs::is_directory(snaps, ec))
    for (const auto& e : fs::directory_iterator(snaps, ec))
      if (e.is_directory()) all.push_back(e.path());
  if (all.empty()) {
    why = "exists but has no snapshots/";
    return "";
  }
  std::sort(all.begin(), all.end(), [](const fs::path& a, const fs::path& b) {
    std::error_code e1, e2;
    auto ta = fs::last_write_time(a, e1), tb = fs::last_write_time(b, e2);
    if (ta != tb) return ta > tb;
    return a < b;
  });
  return all.front().string();
}

struct Candidate {
  std::string dir;   // the directory to check ("" if none, e.g. no snapshot)
  std::string shown; // what the error message lists
  std::string why;   // pre-known reason it is unusable
};

std::vector<Candidate> hub_candidates(const HubId& id, bool dataset) {
  std::vector<Candidate> c;
  const std::string kind = dataset ? "datasets" : "models";
  if (id.scheme == "hf") {
    fs::path repo = fs::path(hf_hub_root()) / (kind + "--" + id.owner + "--" + id.name);
    std::string why;
    std::string snap = hf_snapshot(repo, why);
    c.push_back({snap, snap.empty() ? repo.string() : snap, why});
    return c;
  }
  for (const auto& n : name_variants(id.name)) {
    std::string p = twinkle_home() + "/" + kind + "/" + id.owner + "/" + n;
    c.push_back({p, p, ""});
  }
  for (const auto& root : modelscope_roots()) {
    for (const auto& n : name_variants(id.name)) {
      std::string a = root + "/" + kind + "/" + id.owner + "/" + n;
      c.push_back({a, a, ""});
      if (!dataset) {
        std::string b = root + "/" + id.owner + "/" + n;  // modelscope < 1.20 model layout
        c.push_back({b, b, ""});
      }
    }
  }
  return c;
}

bool is_data_ext(const fs::path& p) {
  auto e = p.extension().string();
  return e == ".jsonl" || e == ".json" || e == ".csv" || e == ".parquet";
}

// Files twinkle never reads as data, on top of datasets' FILES_TO_IGNORE (data_files.h): ModelScope
// dataset repositories carry configuration.json, `save_to_disk` writes state.json (datasets would
// read either as a JSON data file of the split).
bool is_metadata(const fs::path& p) {
  static const std::set<std::string> meta = {"configuration.json", "state.json"};
  return meta.count(p.filename().string()) > 0;
}

bool readable(const fs::path& p) { return is_data_ext(p) && !is_metadata(p); }

// The reader a data file goes to (.json and .jsonl are both the json loader's).
std::string data_format(const fs::path& p) {
  const auto e = p.extension();
  return e == ".csv" ? "csv" : e == ".parquet" ? "parquet" : "json";
}

// Data files of directory `d` for subset/split (rules in hub.h and data_files.h), or throws Error
// with `d` named.
std::vector<std::string> dir_data_files(const fs::path& d, const std::string& subset, const std::string& split) {
  // twinkle's subset rule (ModelScope subset directories): D/<subset> if it holds data files, else D.
  std::vector<fs::path> dirs;
  if (subset != "default" && !subset.empty()) dirs.push_back(d / subset);
  dirs.push_back(d);
  const std::string what = "split '" + split + "'" + (subset != "default" ? " of subset '" + subset + "'" : "");
  std::string unsupported;
  for (const auto& dir : dirs) {
    const DataFilesLayout L = resolve_data_files_layout(dir.string());
    bool any = false;
    for (const auto& [s, fl] : L.files)
      for (const auto& f : fl) {
        if (readable(f)) any = true;
        const std::string e = fs::path(f).extension().string();
        if (e == ".arrow" && unsupported.empty()) unsupported = f;
      }
    if (!any) continue;
    const auto it = L.files.find(split);
    if (it == L.files.end()) {
      std::string listed, names;
      for (const auto& s : L.splits) {
        names += (names.empty() ? "'" : ", '") + s + "'";
        const auto& fl = L.files.at(s);
        for (size_t i = 0; i < fl.size() && i < 5; ++i) listed += "\n  " + fl[i] + " (" + s + ")";
        if (fl.size() > 5) listed += "\n  ... " + std::to_string(fl.size() - 5) + " more (" + s + ")";
      }
      throw Error("dataset directory '" + dir.string() + "': no file for " + what +
                  "; Hugging Face datasets reads this directory's layout as \"" + L.layout +
                  "\" (datasets/data_files.py get_data_patterns), with the split(s) " + names + ":" + listed +
                  "\npass a file as the dataset path, or ask for one of those splits");
    }
    std::vector<std::string> sel;
    for (const auto& f : it->second)
      if (readable(f)) sel.push_back(f);
    for (const auto& f : it->second) {  // reading the split's other files alone would drop its rows silently
      const std::string e = fs::path(f).extension().string();
      if (e == ".arrow" && !sel.empty())
        throw Error("dataset directory '" + dir.string() + "': " + what + " holds " + f +
                    " (arrow files are not supported) next to .jsonl/.json/.csv/.parquet files: convert it, or "
                    "pass a file as the dataset path");
    }
    if (sel.empty())
      throw Error("dataset directory '" + dir.string() + "': the files of " + what + " (" + it->second.front() +
                  (it->second.size() > 1 ? ", ..." : "") + ") are not .jsonl/.json/.csv/.parquet data files" +
                  (unsupported.empty() ? std::string() : " (arrow files are not supported; convert to parquet or jsonl)"));
    for (const auto& f : sel)
      if (data_format(f) != data_format(sel.front()))
        throw Error("dataset directory '" + dir.string() + "': " + what + " mixes file formats (" +
                    fs::path(sel.front()).filename().string() + " and " + fs::path(f).filename().string() +
                    "); Hugging Face datasets reads one format per split: pass a file, or keep one format");
    return sel;
  }
  std::string msg = "dataset directory '" + d.string() + "' has no .jsonl/.json/.csv/.parquet data file for " + what;
  if (!unsupported.empty()) msg += " (found " + unsupported + ": arrow files are not supported; convert to parquet or jsonl)";
  throw Error(msg);
}

std::string exe_dir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = 0;
  return fs::path(buf).parent_path().string();
}

std::vector<std::string> shipped_self_cognition_candidates() {
  std::vector<std::string> c;
  const char* env = std::getenv("TWINKLE_SOURCE_DIR");
  if (env && *env) c.push_back(std::string(env) + "/data/self_cognition.jsonl");
#ifdef TWINKLE_SOURCE_DIR
  c.push_back(std::string(TWINKLE_SOURCE_DIR) + "/data/self_cognition.jsonl");
#endif
  std::string e = exe_dir();
  if (!e.empty()) c.push_back(e + "/../../data/self_cognition.jsonl");
  return c;
}

std::string download_hint(const HubId& id, bool dataset) {
  const std::string repo = id.owner + "/" + id.name;
  if (id.scheme == "hf")
    return std::string("Download it with `huggingface-cli download ") + (dataset ? "--repo-type dataset " : "") +
           repo + "` (fills the Hugging Face cache) or `... --local-dir <dir>` and pass <dir>";
  return std::string("Download it with `modelscope download ") + (dataset ? "--dataset " : "--model ") + repo +
         " --local_dir <dir>` and pass <dir>, or place it at $TWINKLE_HOME/" + (dataset ? "datasets/" : "models/") +
         repo + " (TWINKLE_HOME=" + twinkle_home() + ")";
}

// For an id without scheme: it was also tried as a local path.
std::string bare_note(const std::string& id) {
  if (id.find("://") != std::string::npos) return " locally";
  return ": no such local path, and as the ModelScope id ms://" + id + " not in the local caches";
}

bool is_model_dir(const fs::path& d) {
  std::error_code ec;
  return fs::is_regular_file(d / "config.json", ec) || fs::is_regular_file(d / "tokenizer.json", ec);
}

}  // namespace

std::string resolve_model_dir(const std::string& id_or_path) {
  check(!id_or_path.empty(), "resolve_model_dir: empty model id");
  std::error_code ec;
  if (fs::is_directory(id_or_path, ec)) return id_or_path;
  if (fs::exists(id_or_path, ec))
    throw Error("model '" + id_or_path + "' is a file; expected a directory with config.json and tokenizer files");
  HubId id;
  std::string why;
  if (!parse_hub_id(id_or_path, id, why))
    throw Error("model '" + id_or_path + "' not found: no such directory" + (why.empty() ? "" : " (" + why + ")"));
  std::string looked;
  for (const auto& c : hub_candidates(id, false)) {
    std::string note = c.why;
    if (!c.dir.empty()) {
      if (is_model_dir(c.dir)) return c.dir;
      if (note.empty()) note = fs::is_directory(c.dir, ec) ? "exists but has no config.json or tokenizer.json" : "missing";
    }
    looked += "\n  " + c.shown + " (" + note + ")";
  }
  throw Error("model '" + id_or_path + "' not found" + bare_note(id_or_path) +
              " (nothing is downloaded at run time). Looked in:" + looked + "\n" + download_hint(id, false));
}

std::vector<std::string> resolve_dataset_files(const std::string& id_or_path, const std::string& subset,
                                               const std::string& split) {
  check(!id_or_path.empty(), "resolve_dataset_path: empty dataset id");
  std::error_code ec;
  if (fs::is_regular_file(id_or_path, ec)) return {id_or_path};
  if (fs::is_directory(id_or_path, ec)) return dir_data_files(id_or_path, subset, split);
  HubId id;
  std::string why;
  if (!parse_hub_id(id_or_path, id, why))
    throw Error("dataset '" + id_or_path + "' not found: no such file or directory" + (why.empty() ? "" : " (" + why + ")"));
  std::string looked;
  for (const auto& c : hub_candidates(id, true)) {
    std::string note = c.why;
    if (!c.dir.empty()) {
      if (fs::is_directory(c.dir, ec)) {
        try {
          return dir_data_files(c.dir, subset, split);
        } catch (const Error& e) {
          note = e.what();
        }
      } else if (note.empty()) {
        note = "missing";
      }
    }
    looked += "\n  " + c.shown + " (" + note + ")";
  }
  if (id.scheme == "ms" && id.owner == "swift" && id.name == "self-cognition" && split == "train" &&
      (subset == "default" || subset.empty())) {
    for (const auto& p : shipped_self_cognition_candidates()) {
      if (fs::is_regular_file(p, ec)) {
        std::string canon = fs::weakly_canonical(p, ec).string();
        if (canon.empty()) canon = p;
        const char* lr = std::getenv("OMPI_COMM_WORLD_RANK");
        if (!lr) lr = std::getenv("PMIX_RANK");
        if (!lr || std::string(lr) == "0")  // once per job, not once per rank
          std::fprintf(stderr,
                     "[twinkle] info: dataset '%s' is not in the local caches; using the shipped stand-in %s "
                     "(re-written, not the ModelScope original)\n",
                     id_or_path.c_str(), canon.c_str());
        return {canon};
      }
      looked += "\n  " + p + " (missing; shipped stand-in)";
    }
  }
  throw Error("dataset '" + id_or_path + "' not found" + bare_note(id_or_path) +
              " (nothing is downloaded at run time). Looked in:" + looked + "\n" + download_hint(id, true));
}

std::string resolve_dataset_path(const std::string& id_or_path, const std::string& subset, const std::string& split) {
  auto files = resolve_dataset_files(id_or_path, subset, split);
  if (files.size() == 1) return files.front();
  return fs::path(files.front()).parent_path().string();
}

}  // namespace twinkle
