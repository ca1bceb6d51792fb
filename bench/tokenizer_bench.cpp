// bench/tokenizer_bench — single-thread encode throughput of twinkle::Tokenizer.
//
// Usage: tokenizer_bench --tokenizer DIR --input LINES.jsonl [--mb 8] [--threads 1]
//   LINES.jsonl: one JSON string (or {"text": ...}) per line; the lines are repeated until the
//   timed input holds at least --mb MB. One warm-up pass over the distinct lines first (fills
//   the word cache, as the Rust library's BPE cache is filled in its run), then a timed pass.
// Prints one JSON line: {"impl":"twinkle","mb":..,"seconds":..,"mb_per_s":..,"tokens":..,...}.
// scripts/bench-tokenizer runs this and bench/tokenizer_bench.js on the same lines.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "twinkle/core/error.h"
#include "twinkle/data/tokenizer.h"

int main(int argc, char** argv) {
  std::string dir = std::string(TWINKLE_SOURCE_DIR) + "/models/qwen3-tiny", input;
  double mb = 8;
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--tokenizer") dir = next();
    else if (a == "--input") input = next();
    else if (a == "--mb") mb = std::stod(next());
    else if (a == "--threads") threads = std::stoi(next());
    else {
      std::fprintf(stderr, "usage: tokenizer_bench --tokenizer DIR --input LINES.jsonl [--mb 8] [--threads 1]\n");
      return 2;
    }
  }
  if (input.empty()) {
    std::fprintf(stderr, "tokenizer_bench: --input LINES.jsonl is required (scripts/bench-tokenizer makes one)\n");
    return 2;
  }
  try {
    twinkle::Tokenizer tok = twinkle::Tokenizer::from_dir(dir);
    std::vector<std::string> lines;
    std::ifstream f(input);
    if (!f) throw twinkle::Error("cannot open " + input);
    std::string l;
    size_t distinct_bytes = 0;
    while (std::getline(f, l)) {
      if (l.empty()) continue;
      auto j = nlohmann::json::parse(l);
      lines.push_back(j.is_string() ? j.get<std::string>() : j.at("text").get<std::string>());
      distinct_bytes += lines.back().size();
    }
    if (lines.empty() || distinct_bytes == 0) throw twinkle::Error(input + ": no text");
    // warm-up
    size_t warm_tokens = 0;
    for (auto& s : lines) warm_tokens += tok.encode(s).size();
    const size_t reps = static_cast<size_t>(mb * 1e6 / distinct_bytes) + 1;
    std::vector<std::string> all;
    all.reserve(lines.size() * reps);
    for (size_t r = 0; r < reps; ++r) all.insert(all.end(), lines.begin(), lines.end());
    size_t bytes = 0, tokens = 0;
    for (auto& s : all) bytes += s.size();
    auto cpu_now = [] {
      timespec ts;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return ts.tv_sec + ts.tv_nsec * 1e-9;
    };
    const double cpu0 = cpu_now();
    auto t0 = std::chrono::steady_clock::now();
    if (threads <= 1) {
      for (auto& s : all) tokens += tok.encode(s).size();
    } else {
      auto res = tok.encode_batch(all);
      for (auto& v : res) tokens += v.size();
    }
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_sec = cpu_now() - cpu0;
    // cold: a fresh tokenizer copy has its own (empty) cache
    twinkle::Tokenizer cold = twinkle::Tokenizer::from_dir(dir);
    auto c0 = std::chrono::steady_clock::now();
    size_t cold_tokens = 0;
    for (auto& s : lines) cold_tokens += cold.encode(s).size();
    double cold_sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    std::printf(
        "{\"impl\":\"twinkle\",\"threads\":%d,\"lines\":%zu,\"mb\":%.3f,\"seconds\":%.4f,\"mb_per_s\":%.2f,"
        "\"cpu_seconds\":%.4f,\"mb_per_cpu_s\":%.2f,\"tokens\":%zu,\"mtokens_per_s\":%.3f,\"cold_mb_per_s\":%.2f}\n",
        threads, all.size(), bytes / 1e6, sec, bytes / 1e6 / sec, cpu_sec, bytes / 1e6 / cpu_sec, tokens,
        tokens / 1e6 / sec,
        distinct_bytes / 1e6 / cold_sec);
    (void)warm_tokens;
    (void)cold_tokens;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
