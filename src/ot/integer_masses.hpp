// Masses as integers for the exact solvers (src/ot/exact.cpp): the network simplex moves integer
// flows, so a weight vector becomes integer multiples of 2^-52.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <vector>

namespace tokenflow {

// w (k entries) finite, non-negative, with a positive sum (else InputError naming `key`): the
// masses w_i / sum(w) in units of 2^-52, rounded by the largest remainder method so that they sum
// to exactly 2^52 and each is within one unit of w_i / sum(w); an empty bin (w_i = 0) stays 0.
std::vector<std::int64_t> integer_masses(const Eigen::VectorXd& w, const char* key);

}  // namespace tokenflow
