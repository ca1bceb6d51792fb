// tools/twinkle/command.h — subcommand registry of the `twinkle` binary.
// Each subcommand lives in its own file (tools/twinkle/cmd_<name>.cpp) and registers
// itself with TWINKLE_REGISTER_COMMAND; main.cpp dispatches on argv[1].
#pragma once
#include <map>
#include <string>

namespace twinkle::cli {

/// argv[0] is "twinkle <name>"; returns the process exit code.
using CommandFn = int (*)(int argc, char** argv);

struct CommandInfo {
  std::string help;
  CommandFn fn;
};

std::map<std::string, CommandInfo>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* help, CommandFn fn) { command_registry()[name] = {help, fn}; }
};

}  // namespace twinkle::cli

#define TWINKLE_REGISTER_COMMAND(name, help, fn) \
  static ::twinkle::cli::CommandRegistrar twinkle_cmd_registrar_##fn(name, help, fn)
