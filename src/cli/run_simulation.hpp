// Running `simulate` from a config and writing its outputs: shared by `tokenflow simulate`,
// `tokenflow reproduce` and `tokenflow demo`, so that every simulation directory they write has
// the same files (docs/design.md section 2) and tokenflow.plot reads them all alike.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "tokenflow/config.hpp"
#include "tokenflow/output_dir.hpp"
#include "tokenflow/readers.hpp"

namespace tokenflow::cli {

// A simulation read and checked from a config (every key of `simulate`): the initial measure and
// the attention are built, so that bad input throws InputError before anything is written.
struct PreparedSimulation {
  SimulationConfig config;
  Measure<double> initial;
  AttentionParams attention;
};
PreparedSimulation prepare_simulation(const Config& source);

// Checkpoints of one run: written to `path` (straight into the final directory, atomically, so
// they survive a kill) every run.checkpoint_every steps; `resume_payload` (a verified checkpoint,
// see checkpoint.hpp) continues a killed run instead of starting at t = 0.
struct CheckpointPlan {
  std::filesystem::path path;  // empty: no checkpoints
  std::filesystem::path temp_dir;  // where its temporary file goes (the output folder's scratch())
  std::string config_toml;     // the full config, stored in every checkpoint
  std::string resume_payload;  // empty: a fresh run
  std::string resume_file;     // names the checkpoint in errors
};

// Runs the flow with a progress bar labelled `label` (Ctrl-C cancels: tokenflow::Cancelled) and
// writes initial.npy, positions.npy, trajectory.npy + times.npy (when frames are saved),
// diagnostics.csv and summary.json into `dir` (an existing, staged directory). Returns the
// summary's JSON text.
std::string run_simulation(const PreparedSimulation& simulation, const std::filesystem::path& dir,
                           const std::string& label, const CheckpointPlan& checkpoints = {});

// What `simulate` (and `resume` of it) writes into --out with this config, for the output folder's
// checks before the run (tokenflow/output_dir.hpp): the files above, and checkpoint.bin in place
// when run.checkpoint_every > 0.
OutputPlan simulation_output_plan(const SimulationConfig& config);

// The config of a reproduction's particle run on the sphere: tokens from x0.npy beside it, softmax
// with Q = K = V = I and scale beta, attention.normalize = `normalize` (and attention.mix_until
// when given), dense sums, dopri5 at `tol` to time T, a frame every `save_every` steps (0: none
// besides the first and last). `comment` is its first line.
std::string sphere_particle_config(const std::string& comment, double beta, double T, double tol,
                                   int save_every, const std::string& normalize = "sphere",
                                   std::optional<double> mix_until = {});

}  // namespace tokenflow::cli
