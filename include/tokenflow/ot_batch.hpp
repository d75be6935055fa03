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
  // C symmetric and b == a (the caller guarantees both): OT_eps(a, a), solved by
  // solve_ot_symmetric (the self-transport terms of a Sinkhorn divergence).
  bool symmetric = false;
};

// The self-transport OT_eps(a, a) of a symmetric cost matrix C (n x n, C_ij = C_ji: the caller
// guarantees it) by sinkhorn_symmetric (ot.hpp: the averaged update, which converges in tens of
// iterations where the alternating loop of solve_ot oscillates for thousands), in the dense
// log-domain operator, with solve_ot's options, checks and summary; g == f and the plan is
// symmetric. The method must be sinkhorn. (src/ot/solve.cpp, beside solve_ot.)
OTSolution solve_ot_symmetric(CostMatrix cost, const Eigen::VectorXd& a, const OTSolveOptions& options);

// solve_ot(problems[k].cost, problems[k].a, problems[k].b, options) (solve_ot_symmetric for the
// symmetric ones) for every k, the problems
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
