// Forbidden pairs (ot.hpp): a cost matrix's +inf entries carry no mass, in Sinkhorn (they drop out
// of every soft-min) and in exact OT (their arcs never enter the simplex's basis).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "test_util.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/ot_solve.hpp"

namespace tokenflow {
namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct Problem {
  RowMatrix C;  // with +inf entries
  Eigen::VectorXd a, b;
};

// Random weights and squared distances of random points; about half of the pairs forbidden, but
// never those of the north-west corner coupling of (a, b), which is a plan on the allowed pairs:
// the problem is feasible.
Problem random_problem(std::mt19937_64& rng, int n, int m) {
  std::uniform_real_distribution<double> uni(0.1, 1.0);
  Problem p;
  p.a.resize(n);
  p.b.resize(m);
  for (auto& v : p.a) v = uni(rng);
  for (auto& v : p.b) v = uni(rng);
  p.a /= p.a.sum();
  p.b /= p.b.sum();
  const RowMatrix x = testing::random_matrix(rng, n, 2, 1.0), y = testing::random_matrix(rng, m, 2, 1.0);
  p.C.resize(n, m);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) p.C(i, j) = uni(rng) < 0.55 ? INFINITY : pair_cost(CostKind::sqeuclidean, &x(i, 0), &y(j, 0), 2);
  // The north-west corner walk: (i, j) moves right when row i's mass is spent first, else down.
  double row_left = p.a[0], column_left = p.b[0];
  for (int i = 0, j = 0; i < n && j < m;) {
    p.C(i, j) = pair_cost(CostKind::sqeuclidean, &x(i, 0), &y(j, 0), 2);
    if (row_left < column_left) {
      column_left -= row_left;
      if (++i < n) row_left = p.a[i];
    } else {
      row_left -= column_left;
      if (++j < m) column_left = p.b[j];
    }
  }
  return p;
}

int forbidden_mass_entries(const RowMatrix& C, const RowMatrix& plan) {
  int count = 0;
  for (Eigen::Index k = 0; k < C.size(); ++k) count += std::isinf(C.data()[k]) && plan.data()[k] != 0.0;
  return count;
}

TEST(ForbiddenPairs, SinkhornIsTheReferenceLoopWithNoMassOnThem) {
  std::mt19937_64 rng(testing::fresh_seed());
  const Problem p = random_problem(rng, 40, 30);
  SinkhornOptions opt;
  opt.epsilon = 0.3;
  opt.tol = 1e-12;
  opt.want_plan = true;
  opt.overrelaxation = 1.0;  // the plain loop, the reference's iteration
  const SinkhornResult dense = sinkhorn(DenseSoftMin(p.C, true), p.a, p.b, opt);
  const SinkhornResult ref = reference_sinkhorn(p.C, p.a, p.b, opt.epsilon, opt.tol, opt.max_iter);
  ASSERT_TRUE(dense.converged && ref.converged);
  // The same iteration; they differ by the order of summation only (Sinkhorn.DenseOnlineAndReferenceAgree).
  EXPECT_LE((dense.plan - ref.plan).cwiseAbs().maxCoeff(), 1e-12);
  EXPECT_NEAR(dense.cost, ref.cost, 1e-12 * std::abs(ref.cost) + 1e-14);
  EXPECT_EQ(forbidden_mass_entries(p.C, dense.plan), 0);
  EXPECT_TRUE(std::isfinite(dense.rounding_floor) && dense.rounding_floor > 0.0);
  EXPECT_LE((dense.plan.rowwise().sum() - p.a).cwiseAbs().sum(), opt.tol);
  // The default solver (epsilon-scaling from the allowed entries' range, Anderson acceleration)
  // reaches the same plan: both are within tol of the unique optimum, whose entries move by at
  // most ~ marginal error (Pinsker-type bound of the dual's strong convexity, 1 / eps per unit of
  // potential times the mass moved), far below 1e-9 here.
  SinkhornOptions fast = opt;
  fast.overrelaxation = 0.0;
  fast.epsilon_start = DenseSoftMin(p.C, true).cost_range();
  const SinkhornResult scaled = sinkhorn(DenseSoftMin(p.C, true), p.a, p.b, fast);
  ASSERT_TRUE(scaled.converged);
  EXPECT_EQ(forbidden_mass_entries(p.C, scaled.plan), 0);
  EXPECT_LE((scaled.plan - dense.plan).cwiseAbs().maxCoeff(), 1e-9);
}

TEST(ForbiddenPairs, RangeAndMagnitudeAreTheAllowedEntries) {
  RowMatrix C(2, 2);
  C << 1.0, INFINITY, -3.0, 2.0;
  const DenseSoftMin op(C, true);
  EXPECT_EQ(op.cost_range(), 5.0);
  EXPECT_EQ(op.cost_magnitude(), 3.0);
  // Costs computed from points: +inf is an overflow, not a forbidden pair.
  EXPECT_TRUE(std::isinf(DenseSoftMin(C).cost_magnitude()));
  C(0, 0) = NAN;
  EXPECT_TRUE(std::isinf(DenseSoftMin(C, true).cost_magnitude()));
  C(0, 0) = -INFINITY;
  EXPECT_TRUE(std::isinf(DenseSoftMin(C, true).cost_magnitude()));
}

TEST(ForbiddenPairs, ExactPlanAvoidsThemAndIsOptimalOnTheAllowedPairs) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (int trial = 0; trial < 5; ++trial) {
    const Problem p = random_problem(rng, 30 + trial, 25);
    OTSolveOptions options;
    options.method = "exact";
    const OTSolution s = solve_ot(RowMatrix(p.C), p.a, p.b, options);
    ASSERT_EQ(s.status, "optimal");
    EXPECT_EQ(forbidden_mass_entries(p.C, s.plan), 0);
    EXPECT_TRUE(std::isfinite(s.cost));
    // Optimality on the allowed pairs by complementary slackness: f_i + g_j <= C_ij on every allowed
    // pair and = C_ij where the plan has mass. The duals are exact for costs rounded to exact_ot's
    // unit (max|C| 2^(1 - k), k = 50 - ceil(log2(n + m + 1)) = 44 here), each within half a unit.
    const double unit = 2.0 * std::ldexp(allowed_cost_magnitude(p.C), -43);
    for (Eigen::Index i = 0; i < p.C.rows(); ++i)
      for (Eigen::Index j = 0; j < p.C.cols(); ++j) {
        if (std::isinf(p.C(i, j))) continue;
        EXPECT_LE(s.f[i] + s.g[j], p.C(i, j) + unit);
        if (s.plan(i, j) > 0.0) {
          EXPECT_NEAR(s.f[i] + s.g[j], p.C(i, j), unit);
        }
      }
    // Marginals: the simplex moves integer masses of 2^-52, within one unit of each weight.
    EXPECT_LE((s.plan.rowwise().sum() - p.a).cwiseAbs().maxCoeff(), 0x1p-51);
    EXPECT_LE((s.plan.colwise().sum().transpose() - p.b).cwiseAbs().maxCoeff(), 0x1p-51);
  }
}

TEST(ForbiddenPairs, KernelModeGivesWayToTheLogDomainLoop) {
  std::mt19937_64 rng(testing::fresh_seed());
  const Problem p = random_problem(rng, 300, 300);  // 9 10^4 pairs: auto picks kernel mode without them
  OTSolveOptions options;
  options.sinkhorn.epsilon = 0.5;
  const OTSolution s = solve_ot(RowMatrix(p.C), p.a, p.b, options);
  EXPECT_EQ(s.op_used, "dense");
  EXPECT_TRUE(s.converged);
  EXPECT_EQ(forbidden_mass_entries(p.C, s.plan), 0);
}

// Empty bins whose every pair to a bin with mass is forbidden (all +inf, or allowed only towards
// other empty bins): their soft-min is an empty sum, yet a plan exists. Sinkhorn solves the problem
// of the other bins (the same plan as without them), reports zero plan lines and potential 0 there.
TEST(ForbiddenPairs, EmptyBinsThatReachNoMassAreSolvedAround) {
  std::mt19937_64 rng(testing::fresh_seed());
  const Problem p = random_problem(rng, 12, 9);
  // Insert an empty row and an empty column at random places: row r is all +inf but for the pair
  // (r, c) with the empty column c, which is otherwise +inf as well.
  const int r = std::uniform_int_distribution<int>(0, 12)(rng), c = std::uniform_int_distribution<int>(0, 9)(rng);
  RowMatrix C = RowMatrix::Constant(13, 10, INFINITY);
  Eigen::VectorXd a = Eigen::VectorXd::Zero(13), b = Eigen::VectorXd::Zero(10);
  auto old_row = [&](int i) { return i < r ? i : i - 1; };
  auto old_col = [&](int j) { return j < c ? j : j - 1; };
  for (int i = 0; i < 13; ++i)
    for (int j = 0; j < 10; ++j)
      if (i != r && j != c) C(i, j) = p.C(old_row(i), old_col(j));
  C(r, c) = 1.0;
  for (int i = 0; i < 13; ++i) a[i] = i == r ? 0.0 : p.a[old_row(i)];
  for (int j = 0; j < 10; ++j) b[j] = j == c ? 0.0 : p.b[old_col(j)];
  OTSolveOptions options;
  options.sinkhorn.epsilon = 0.3;
  options.sinkhorn.tol = 1e-10;
  options.want_plan = true;
  const OTSolution with = solve_ot(RowMatrix(C), a, b, options);
  const OTSolution without = solve_ot(RowMatrix(p.C), p.a, p.b, options);
  ASSERT_TRUE(with.converged && without.converged);
  ASSERT_EQ(with.plan.rows(), 13);
  ASSERT_EQ(with.plan.cols(), 10);
  EXPECT_EQ(with.plan.row(r).cwiseAbs().sum(), 0.0);
  EXPECT_EQ(with.plan.col(c).cwiseAbs().sum(), 0.0);
  EXPECT_EQ(with.f[r], 0.0);
  EXPECT_EQ(with.g[c], 0.0);
  EXPECT_TRUE(with.f.allFinite() && with.g.allFinite());
  // The same solve of the same bins: the same numbers.
  for (int i = 0; i < 13; ++i)
    for (int j = 0; j < 10; ++j)
      if (i != r && j != c) {
        EXPECT_EQ(with.plan(i, j), without.plan(old_row(i), old_col(j)));
      }
  EXPECT_EQ(with.cost, without.cost);
  EXPECT_EQ(forbidden_mass_entries(C, with.plan), 0);
}

TEST(ForbiddenPairs, NoPlanIsAnInputError) {
  RowMatrix C(3, 3);
  const Eigen::VectorXd w = Eigen::VectorXd::Constant(3, 1.0 / 3.0);
  OTSolveOptions options;
  // Both methods refuse C with an InputError on the cost matrix whose message holds `what`.
  auto expect_refused = [&](const std::string& what) {
    for (const char* method : {"sinkhorn", "exact"}) {
      options.method = method;
      try {
        solve_ot(RowMatrix(C), w, w, options);
        ADD_FAILURE() << method << ": a pattern without a plan was accepted";
      } catch (const InputError& e) {
        EXPECT_EQ(e.key(), "cost_matrix") << method;
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      }
    }
  };
  C << 0.0, 1.0, 2.0, INFINITY, INFINITY, INFINITY, 1.0, 0.0, 1.0;
  expect_refused("row 1");
  // Every bin has an allowed pair, yet rows 0 and 1 (mass 2/3) may only go to column 0 (mass 1/3):
  // Hall's condition fails, and the simplex finds no feasible flow; Sinkhorn is refused the same
  // way before its loop (check_plan_exists), instead of running to max_iter.
  C << 0.0, INFINITY, INFINITY, 1.0, INFINITY, INFINITY, 1.0, 0.0, 1.0;
  try {
    exact_ot(C, w, w);
    ADD_FAILURE() << "an infeasible pattern was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.key(), "cost_matrix");
    EXPECT_NE(std::string(e.what()).find("avoids the forbidden"), std::string::npos) << e.what();
  }
  expect_refused("avoids the forbidden");
  // Unbalanced transport may leave mass behind: no plan is refused for the pattern.
  options.method = "sinkhorn";
  options.sinkhorn.marginal_penalty = 1.0;
  EXPECT_NO_THROW(solve_ot(RowMatrix(C), w, w, options));
  C(0, 0) = NAN;
  EXPECT_THROW(exact_ot(C, w, w), InputError);
}

}  // namespace
}  // namespace tokenflow
