// The size below which the Sinkhorn passes run on one thread (src/ot/softmin.cpp, kernel.cpp).
#pragma once

#include <Eigen/Core>

namespace tokenflow {

// Below this many pairs a soft-min or kernel pass runs on one thread: a parallel region costs
// microseconds, far more on a loaded machine, and small problems (attention with a few dozen
// tokens, Sinkhorn attention, tests) run thousands of passes. Unused without OpenMP.
[[maybe_unused]] inline constexpr Eigen::Index kParallelMinPairs = 1 << 15;

}  // namespace tokenflow
