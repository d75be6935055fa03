// Running `simulate` from a config and writing its outputs: shared by `tokenflow simulate`,
// `tokenflow reproduce` and `tokenflow demo`, so that every simulation directory they write has
// the same files (DESIGN.md section 2) and tokenflow.plot reads them all alike.
#pragma once

#include <filesystem>
#include <string>

#include "tokenflow/config.hpp"
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

// Runs the flow with a progress bar labelled `label` (Ctrl-C cancels: tokenflow::Cancelled) and
// writes initial.npy, positions.npy, trajectory.npy + times.npy (when frames are saved),
// diagnostics.csv and summary.json into `dir` (an existing, staged directory). Returns the
// summary's JSON text.
std::string run_simulation(const PreparedSimulation& simulation, const std::filesystem::path& dir,
                           const std::string& label);

}  // namespace tokenflow::cli
