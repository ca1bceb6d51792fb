// Logger: "[YYYY-MM-DD HH:MM:SS][LEVEL:twinkle] msg", rank 0 only (others: ERROR).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "twinkle/dist/runtime.h"

namespace twinkle {
namespace {

const char* level_name(Logger::Level l) {
  switch (l) {
    case Logger::Level::Debug: return "DEBUG";
    case Logger::Level::Info: return "INFO";
    case Logger::Level::Warning: return "WARNING";
    case Logger::Level::Error: return "ERROR";
  }
  return "INFO";
}

std::mutex& log_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

std::string Logger::format_line(Level level, const std::string& msg) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  return std::string("[") + stamp + "][" + level_name(level) + ":twinkle] " + msg;
}

void Logger::reload_env() {
  const char* v = std::getenv("LOG_LEVEL");
  if (!v || !*v) {
    level_ = Level::Info;
    return;
  }
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  if (s == "DEBUG") level_ = Level::Debug;
  else if (s == "INFO") level_ = Level::Info;
  else if (s == "WARNING" || s == "WARN") level_ = Level::Warning;
  else if (s == "ERROR") level_ = Level::Error;
  else {
    level_ = Level::Info;
    log(Level::Warning, "LOG_LEVEL='" + std::string(v) + "' is unknown (DEBUG, INFO, WARNING, ERROR); using INFO");
  }
}

void Logger::emit(const std::string& line) {
  if (sink_) {
    sink_(line);
    return;
  }
  std::string out = line + "\n";
  std::lock_guard<std::mutex> lock(log_mutex());
  std::fwrite(out.data(), 1, out.size(), stderr);
  std::fflush(stderr);
}

void Logger::log(Level level, const std::string& msg) {
  if (static_cast<int>(level) < static_cast<int>(level_)) return;
  const int rank = world_rank();
  if (rank != 0) {
    if (level != Level::Error) return;
    emit(format_line(level, "[rank " + std::to_string(rank) + "] " + msg));  // say who failed
    return;
  }
  emit(format_line(level, msg));
}

void Logger::info_all_ranks(const std::string& msg) {
  if (static_cast<int>(Level::Info) < static_cast<int>(level_)) return;
  emit(format_line(Level::Info, "[rank " + std::to_string(world_rank()) + "] " + msg));
}

Logger& get_logger() {
  static Logger* logger = [] {
    auto* l = new Logger();  // never destroyed: usable from atexit handlers
    l->reload_env();
    return l;
  }();
  return *logger;
}

}  // namespace twinkle
