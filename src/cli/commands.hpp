// Every CLI command registers itself on the app here; each lives in its own file.
#pragma once

#include <CLI/CLI.hpp>
#include <filesystem>
#include <optional>

#include "tokenflow/dir_lock.hpp"

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
void add_moments_command(CLI::App& app);
void add_config_command(CLI::App& app);

// `tokenflow resume --out DIR` reads the kind of DIR/checkpoint.bin (tokenflow/checkpoint.hpp) and
// continues the run with the command that wrote it.
// `lock` is DIR's lock, taken before the checkpoint is read (empty on the MPI ranks that do not write).
void resume_simulation(const std::filesystem::path& dir, std::optional<DirLock> lock);  // run_simulation.cpp
void resume_training(const std::filesystem::path& dir, std::optional<DirLock> lock);    // train.cpp

}  // namespace tokenflow::cli
