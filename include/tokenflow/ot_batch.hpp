// tokenflow/ot_batch.hpp: a batch of independent optimal transport problems, each given by its
// cost matrix and weights, solved concurrently across cores.
#pragma once

#include <Eigen/Core>
#include <vector>

#include "tokenflow/ot_solve.hpp"

namespace tokenflow {

// One problem of a batch: C (n x m) and normalized weights a (n), b (m) (sizes may differ from one
// problem to the next).
struct CostMatrixProblem {
  CostMatrix cost;
  Eigen::VectorXd a, b;
};

// solve_ot(problems[k].cost, problems[k].a, problems[k].b, options) for every k, the problems
// spread over the OpenMP threads (dynamic schedule, one problem at a time), result k for problem
// k. Each result is bit for bit the one solve_ot gives alone: the parallel loops inside a solve are
// over rows, each row's value computed by one thread in a fixed order, so the thread count (one
// inside the batch's parallel region) changes no number. The options are checked once
// (check_ot_options); options.progress, when set, is called from the worker threads, one call at
// a time (serialized here); returning false cancels every problem still running (Cancelled is
// rethrown). The first exception a problem throws is rethrown once all have stopped. The costs
// are moved from `problems`.
std::vector<OTSolution> solve_ot_batch(std::vector<CostMatrixProblem>& problems,
                                       const OTSolveOptions& options);

}  // namespace tokenflow
