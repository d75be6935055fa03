// Every CLI command registers itself on the app here; each lives in its own file.
#pragma once

#include <CLI/CLI.hpp>

namespace tokenflow::cli {

void add_simulate_command(CLI::App& app);
void add_resume_command(CLI::App& app);
void add_reproduce_command(CLI::App& app);
void add_demo_command(CLI::App& app);
void add_gaussian_command(CLI::App& app);
void add_meanfield_command(CLI::App& app);
void add_stability_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_couple_command(CLI::App& app);
void add_embed_command(CLI::App& app);
void add_ot_command(CLI::App& app);
void add_wasserstein_command(CLI::App& app);

}  // namespace tokenflow::cli
