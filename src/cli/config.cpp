// tokenflow config [COMMAND] [--markdown]: the config keys of the commands that read a config, with
// defaults, ranges and meanings (tokenflow/command_keys.hpp). docs/config.md is its --markdown.
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "tokenflow/command_keys.hpp"

namespace tokenflow::cli {

namespace {
struct ConfigArgs {
  std::string command;
  bool markdown = false;
};
}  // namespace

void add_config_command(CLI::App& app) {
  auto args = std::make_shared<ConfigArgs>();
  CLI::App* cmd = app.add_subcommand("config", "List the config keys of a command (default, range, meaning)");
  cmd->add_option("command", args->command, "simulate | gaussian | meanfield | stability | train (default: all)");
  cmd->add_flag("--markdown", args->markdown, "Every command's keys as Markdown (docs/config.md)");
  cmd->callback([args] {
    if (args->markdown) {
      std::cout << config_reference_markdown();
      return;
    }
    auto print = [](const CommandKeys& c) {
      std::cout << "tokenflow " << c.command << ": " << c.summary << "\n" << keys_help(c.keys) << "\n";
    };
    if (!args->command.empty()) return print(command_keys(args->command));  // unknown: exit 2
    for (const CommandKeys& c : all_command_keys()) print(c);
  });
}

}  // namespace tokenflow::cli
