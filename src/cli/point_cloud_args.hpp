// Point clouds given on the command line (--x X.npy [--a a.npy] [--pos-x pos.npy]), shared by the
// `ot` and `wasserstein` commands. Errors name the file and the flag.
#pragma once

#include <string>

#include "tokenflow/measure.hpp"

namespace tokenflow::cli {

// Reads points (n x d; a 1-D array is n x 1), optional weights (n, positive; normalized to sum 1
// unless `normalize` is false (unbalanced transport keeps their mass), uniform 1 / n when the path is
// empty) and optional positions (n, in [0, 1]).
Measure<double> read_point_cloud(const std::string& points_path, const std::string& points_flag,
                                 const std::string& weights_path, const std::string& weights_flag,
                                 const std::string& positions_path = "",
                                 const std::string& positions_flag = "", bool normalize = true);

}  // namespace tokenflow::cli
