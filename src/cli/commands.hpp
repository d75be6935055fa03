// Every CLI command registers itself on the app here; each lives in its own file.
#pragma once

#include <CLI/CLI.hpp>

namespace tokenflow::cli {

void add_simulate_command(CLI::App& app);
void add_ot_command(CLI::App& app);
void add_wasserstein_command(CLI::App& app);

}  // namespace tokenflow::cli
