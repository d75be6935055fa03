// Running `gaussian` (the moment ODE of the Gaussian closure) from a config and writing its
// outputs: shared by `tokenflow gaussian` and the reproductions (cone, ranks, blowup), so that
// every gaussian directory they write has the same files and tokenflow.plot reads them alike.
#pragma once

#include <filesystem>
#include <string>

#include "tokenflow/config.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/readers.hpp"

namespace tokenflow::cli {

struct GaussianRun {
  GaussianResult result;
  std::string summary;  // summary.json's text
};

// Solves the moment ODE of `setup` (read from `source` by read_gaussian_setup; errors are located
// there) and writes times.npy (F), means.npy (F x d), covs.npy (F x d x d) and summary.json into
// `dir` (an existing, staged directory). `progress` is the solver's callback (returning false, or
// Ctrl-C, cancels); warnings go to stderr when print_warnings.
GaussianRun run_gaussian(const GaussianSetup& setup, const Config& source,
                         const std::filesystem::path& dir, const ProgressCallback& progress,
                         bool print_warnings = true);

// A gaussian run of a reproduction: `toml` (a `tokenflow gaussian` config) is written to
// dir/config.toml and run into dir (created here), so that `tokenflow gaussian --config
// dir/config.toml --out DIR` redoes it. Warnings are not printed (they are in summary.json).
GaussianRun run_gaussian_config(const std::string& toml, const std::filesystem::path& dir,
                                const ProgressCallback& progress = {});

}  // namespace tokenflow::cli
