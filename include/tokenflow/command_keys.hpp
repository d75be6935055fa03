// tokenflow/command_keys.hpp: the config keys of every command that reads a config, from the
// schemas (tokenflow/schema.hpp). `tokenflow config` prints them, Python's tokenflow.config_keys
// returns them, and docs/config.md is `tokenflow config --markdown`.
#pragma once

#include <string>
#include <vector>

#include "tokenflow/schema.hpp"

namespace tokenflow {

struct CommandKeys {
  std::string command;  // "simulate", "gaussian", "meanfield", "stability", "train"
  std::string summary;  // one line: which keys it reads
  std::vector<KeySpec> keys;
};

// simulate, gaussian, meanfield, stability, train (in that order).
const std::vector<CommandKeys>& all_command_keys();
// The keys of one command; InputError (key "command") for an unknown command.
const CommandKeys& command_keys(const std::string& command);
// docs/config.md: every key of every command, with its default, range and meaning.
std::string config_reference_markdown();

}  // namespace tokenflow
