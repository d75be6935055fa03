// solve_ot_batch (tokenflow/ot_batch.hpp): a batch's problems solved concurrently, each exactly as
// solve_ot solves it alone.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/ot_batch.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;
using testing::random_measure;
using testing::random_weights;

// A problem of n x m points in 2-D (standard normal), its squared distances and random weights.
CostMatrixProblem random_problem(std::mt19937_64& rng, Eigen::Index n, Eigen::Index m) {
  const Measure<double> mu = random_measure(rng, n, 2, false),
                        nu = random_measure(rng, m, 2, false);
  CostMatrixProblem p;
  p.cost = cost_matrix(mu.points, nu.points, CostKind::sqeuclidean);
  p.a = random_weights(rng, n);
  p.b = random_weights(rng, m);
  return p;
}

TEST(OtBatch, EachProblemIsSolveOtAloneBitForBit) {
  std::mt19937_64 rng(fresh_seed());
  // Mixed sizes; 300 x 260 is above kKernelMinPairs (the kernel operator, Anderson acceleration)
  // and above the size from which a solve alone runs its row loops on several threads.
  std::vector<CostMatrixProblem> batch = {random_problem(rng, 5, 9), random_problem(rng, 300, 260),
                                          random_problem(rng, 40, 33), random_problem(rng, 120, 7)};
  const std::vector<CostMatrixProblem> copies = batch;
  OTSolveOptions options;
  options.sinkhorn.epsilon = 0.5;
  options.want_plan = true;
  const std::vector<OTSolution> together = solve_ot_batch(batch, options);
  ASSERT_EQ(together.size(), copies.size());
  for (std::size_t k = 0; k < copies.size(); ++k) {
    const OTSolution alone = solve_ot(copies[k].cost, copies[k].a, copies[k].b, options);
    EXPECT_EQ(together[k].status, "converged") << k;
    EXPECT_EQ(together[k].op_used, alone.op_used) << k;
    EXPECT_EQ(together[k].iterations, alone.iterations) << k;
    EXPECT_EQ(together[k].objective, alone.objective) << k;
    EXPECT_EQ(together[k].marginal_error, alone.marginal_error) << k;
    EXPECT_TRUE(together[k].f == alone.f && together[k].g == alone.g) << k;
    EXPECT_TRUE(together[k].plan == alone.plan) << k;
  }
  EXPECT_EQ(together[1].op_used, "kernel");
}

// The self-transport terms of a divergence (symmetric C, b = a) by the symmetric loop: the same
// OT_eps(a, a) as the alternating loop of solve_ot, within the error each value carries (about
// marginal_error * max|C| from the limit, ot.hpp), in fewer iterations, with g == f. The
// alternating loop often stops at max_iter on such problems (57 of 100 seeds in Python, at
// marginal errors near tol): it is the comparison, not the subject.
TEST(OtBatch, SymmetricSelfTransportProblemsAgreeWithTheAlternatingLoop) {
  std::mt19937_64 rng(fresh_seed());
  const Measure<double> mu = random_measure(rng, 60, 2, false);
  CostMatrixProblem p;
  p.cost = cost_matrix(mu.points, mu.points, CostKind::sqeuclidean);
  p.a = random_weights(rng, 60);
  p.b = p.a;
  p.symmetric = true;
  const CostMatrixProblem alternating = [&] {
    CostMatrixProblem q = p;
    q.symmetric = false;
    return q;
  }();
  OTSolveOptions options;
  options.sinkhorn.epsilon = 0.05;
  options.sinkhorn.tol = 1e-10;
  std::vector<CostMatrixProblem> batch = {p, alternating};
  const std::vector<OTSolution> r = solve_ot_batch(batch, options);
  ASSERT_EQ(r[0].status, "converged");
  ASSERT_NE(r[1].status, "failed");
  EXPECT_TRUE(r[0].f == r[0].g);
  const double max_cost = p.cost.cwiseAbs().maxCoeff();
  EXPECT_LE(std::abs(r[0].objective - r[1].objective), (r[0].marginal_error + r[1].marginal_error) * max_cost);
  EXPECT_LT(r[0].iterations, r[1].iterations);
}

TEST(OtBatch, AProblemsErrorIsRethrownAndProgressCancels) {
  std::mt19937_64 rng(fresh_seed());
  std::vector<CostMatrixProblem> batch = {random_problem(rng, 6, 6), random_problem(rng, 7, 5)};
  batch[1].cost(0, 0) = 1e300;  // max|C| / epsilon far above 2^50: check_cost_range refuses it
  OTSolveOptions options;
  EXPECT_THROW(solve_ot_batch(batch, options), InputError);

  batch = {random_problem(rng, 30, 30), random_problem(rng, 30, 30), random_problem(rng, 30, 30)};
  options.sinkhorn.epsilon = 1e-3;  // thousands of iterations: the progress callback is reached
  options.sinkhorn.progress = [](int, double) { return false; };
  EXPECT_THROW(solve_ot_batch(batch, options), Cancelled);
}

}  // namespace
}  // namespace tokenflow
