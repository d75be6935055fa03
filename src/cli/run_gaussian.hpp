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
// there) with a progress bar labelled `label` (Ctrl-C cancels), and writes times.npy (F),
// means.npy (F x d), covs.npy (F x d x d) and summary.json into `dir` (an existing, staged
// directory). Warnings go to stderr when print_warnings.
GaussianRun run_gaussian(const GaussianSetup& setup, const Config& source, const std::filesystem::path& dir,
                         const std::string& label, bool print_warnings = true);

}  // namespace tokenflow::cli
