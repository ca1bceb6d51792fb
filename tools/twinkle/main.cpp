// The `twinkle` binary: `twinkle <subcommand> [options]`.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "command.h"

namespace twinkle::cli {
std::map<std::string, CommandInfo>& command_registry() {
  static std::map<std::string, CommandInfo> r;
  return r;
}
}  // namespace twinkle::cli

// To stdout when asked for (--help, exit 0), to stderr after a usage error (exit 2).
static void usage(std::FILE* out) {
  std::fprintf(out, "usage: twinkle <command> [options]\n\ncommands:\n");
  for (auto& [name, info] : twinkle::cli::command_registry())
    std::fprintf(out, "  %-10s %s\n", name.c_str(), info.help.c_str());
  std::fprintf(out, "\n`twinkle <command> --help` shows a command's options.\n");
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  auto& reg = twinkle::cli::command_registry();
  auto it = reg.find(argv[1]);
  if (it == reg.end()) {
    std::fprintf(stderr, "twinkle: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
  }
  std::string prog = std::string("twinkle ") + argv[1];
  argv[1] = prog.data();
  try {
    return it->second.fn(argc - 1, argv + 1);
  } catch (const std::exception& e) {
    // "twinkle plan: error: twinkle plan: ..." when the message already names the command
    std::string msg = e.what();
    const std::string self = "twinkle " + it->first + ": ";
    if (msg.rfind(self, 0) == 0) msg.erase(0, self.size());
    std::fprintf(stderr, "twinkle %s: error: %s\n", it->first.c_str(), msg.c_str());
    return 1;
  }
}
