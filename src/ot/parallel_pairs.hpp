// When a pass over the pairs of a transport problem runs on threads (tokenflow/parallel.hpp).
#pragma once

#include <Eigen/Core>

#include "tokenflow/parallel.hpp"

namespace tokenflow {

// Whether a pass over `pairs` pairs uses threads: the `if` clause of its parallel region.
inline bool parallel_pairs(double pairs) { return pairs >= static_cast<double>(parallel_min_pairs()); }

}  // namespace tokenflow
