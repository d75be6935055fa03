// The reference exact OT for tests (src/ot/exact_reference.cpp): LEMON's NetworkSimplex
// (liblemon-dev) on an explicit complete bipartite SmartDigraph, integer masses (integer_masses.hpp)
// and integer costs in units of max|C| 2^-k with (n + m + 1) 2^k <= 2^60. An independent solver of
// the same linear program as exact_ot (transport_simplex.hpp): its own graph, arc arrays and pivot
// code. Memory: about 80 bytes an arc, so it is for small problems.
#pragma once

#include "tokenflow/ot.hpp"

namespace tokenflow {

// Same contract as exact_ot (ot.hpp) for valid input (a test oracle: sizes and finiteness are not
// checked); its cost is within max|C| 2^-k of the optimum.
ExactOTResult reference_exact_ot(const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& cost,
                                 const Eigen::VectorXd& a, const Eigen::VectorXd& b);

}  // namespace tokenflow
