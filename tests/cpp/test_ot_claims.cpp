// What a Sinkhorn result claims (docs/ot.md, "What a result claims"): the marginal error is that of
// the returned plan, `converged` needs it below tol with tol above the rounding floor, a budget
// returns the best state reached, and the default solver converges wherever the plain loop does,
// in at most its iterations.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/ot_solve.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;
using testing::kUnit64;

// |pi 1 - a|_1 + |pi^T 1 - b|_1 of `plan`, summed in long double (64-bit mantissa): an oracle
// independent of the solver's compensated sums. Its own rounding is below (n + m) 2^-63 * mass.
double long_double_marginal_error(const CostMatrix& plan, const Eigen::VectorXd& a, const Eigen::VectorXd& b) {
  long double err = 0.0L;
  for (Eigen::Index i = 0; i < plan.rows(); ++i) {
    long double s = 0.0L;
    for (Eigen::Index j = 0; j < plan.cols(); ++j) s += plan(i, j);
    err += std::fabs(s - static_cast<long double>(a[i]));
  }
  for (Eigen::Index j = 0; j < plan.cols(); ++j) {
    long double s = 0.0L;
    for (Eigen::Index i = 0; i < plan.rows(); ++i) s += plan(i, j);
    err += std::fabs(s - static_cast<long double>(b[j]));
  }
  return static_cast<double>(err);
}

Measure<double> gaussian_cloud(std::mt19937_64& rng, Eigen::Index n, double spread, double shift) {
  Points<double> x = testing::random_matrix(rng, n, 2, spread);
  x.array() += shift;
  return make_transport_measure(std::move(x));
}

// Weights drawn from [1e-3, 1] (log-uniform), normalized.
Eigen::VectorXd claim_weights(std::mt19937_64& rng, Eigen::Index n) {
  std::uniform_real_distribution<double> u(std::log(1e-3), 0.0);
  Eigen::VectorXd w(n);
  for (Eigen::Index i = 0; i < n; ++i) w[i] = std::exp(u(rng));
  return w / w.sum();
}

// The reported error against the long-double oracle: the solver's compensated sums are within 2 u
// of each row and column sum (u = 2^-53, relative to the sum), the oracle's within (n + m) 2^-63;
// both add up to 4 u mass over the rows and columns, plus 1e-300 for a plan that is exactly a
// coupling.
void expect_error_of_plan(const OTSolution& s, const Eigen::VectorXd& a, const Eigen::VectorXd& b) {
  ASSERT_TRUE(s.plan_formed);
  const double oracle = long_double_marginal_error(s.plan, a, b);
  const double slack = (4.0 + static_cast<double>(a.size() + b.size()) * 0x1p-10) * kUnit64 * 2.0 + 1e-300;
  EXPECT_NEAR(s.marginal_error, oracle, slack) << "reported " << s.marginal_error << ", the plan's " << oracle;
}

// The user's report: 5 x 6 Gaussian points, eps = 1e-12 and 1e-9, tol 1e-9. The exponents
// (f_i + g_j - C_ij) / eps have terms of size |C| / eps ~ 1e12..1e13, so each plan entry carries a
// relative error of ~u |C| / eps >= 1e-4 and the rounding floor 6 u <C, pi> / eps (stages.hpp:
// |f_i| + |g_j| >= |C_ij| on the support) is above tol unless the transport cost is below
// 1e-9 * 1e-9 / 6u ~ 1.5e-3 (at eps = 1e-12: 1.5e-6). Whatever the draw, converged must mean the
// plan's own error is below tol and tol above the floor.
TEST(Sinkhorn, TinyEpsilonIsNotReportedConverged) {
  for (int trial = 0; trial < 6; ++trial) {
    std::mt19937_64 rng(fresh_seed());
    const Measure<double> mu = gaussian_cloud(rng, 5, 1.0, 0.0), nu = gaussian_cloud(rng, 6, 1.0, 0.0);
    OTSolveOptions exact_options;
    exact_options.method = "exact";
    const double exact = solve_ot(mu, nu, CostKind::sqeuclidean, exact_options).cost;
    for (double eps : {1e-12, 1e-9}) {
      OTSolveOptions o;
      o.sinkhorn.epsilon = eps;
      o.sinkhorn.tol = 1e-9;
      const OTSolution s = solve_ot(mu, nu, CostKind::sqeuclidean, o);
      ASSERT_NE(s.status, "failed") << s.reason;
      expect_error_of_plan(s, mu.weights, nu.weights);
      // The floor belongs to the plan returned, at its epsilon: out of iterations, that may be an
      // intermediate stage of the schedule (epsilon_reached > eps, seen at eps = 1e-12: 0.099),
      // whose floor is that of its own, larger epsilon.
      EXPECT_GE(s.rounding_floor, 6.0 * kUnit64 * exact / s.epsilon_reached * 0.5)
          << "floor below its derivation at eps " << eps << ", the plan's epsilon " << s.epsilon_reached;
      if (s.converged) {
        EXPECT_LT(s.marginal_error, o.sinkhorn.tol);
        EXPECT_GT(o.sinkhorn.tol, s.rounding_floor);
      } else {
        EXPECT_NE(s.status, "converged");
        EXPECT_FALSE(ot_convergence_warning(s).empty());
      }
      if (s.rounding_floor >= o.sinkhorn.tol) {
        EXPECT_FALSE(s.converged);
        EXPECT_EQ(s.status, "below_floor");
      }
      if (eps == 1e-12 && exact > 1e-5) {
        EXPECT_FALSE(s.converged) << "floor " << s.rounding_floor;
        EXPECT_GT(s.marginal_error, 0.0);
      }
    }
  }
}

// The reported error is that of the plan returned (dense, plan formed) and, without a plan (or on
// the online operator), that of the plan the same potentials form: bit for bit the same number.
TEST(Sinkhorn, MarginalErrorIsThatOfTheReturnedPlan) {
  for (int trial = 0; trial < 12; ++trial) {
    std::mt19937_64 rng(fresh_seed());
    std::uniform_int_distribution<int> size(2, 9);
    std::uniform_real_distribution<double> log_ratio(-8.0, 0.0);
    Measure<double> mu = gaussian_cloud(rng, size(rng), 1.0, 0.0), nu = gaussian_cloud(rng, size(rng), 1.0, 1.0);
    mu.weights = claim_weights(rng, mu.n());
    nu.weights = claim_weights(rng, nu.n());
    OTSolveOptions o;
    o.sinkhorn.epsilon = std::pow(10.0, log_ratio(rng)) * 10.0;
    o.sinkhorn.tol = 1e-9;
    o.sinkhorn.max_iter = 3000;
    const OTSolution with_plan = solve_ot(mu, nu, CostKind::sqeuclidean, o);
    ASSERT_NE(with_plan.status, "failed") << with_plan.reason;
    expect_error_of_plan(with_plan, mu.weights, nu.weights);
    o.want_plan = false;
    const OTSolution without = solve_ot(mu, nu, CostKind::sqeuclidean, o);
    EXPECT_EQ(without.marginal_error, with_plan.marginal_error);
    EXPECT_EQ(without.converged, with_plan.converged);
    o.op = "online";
    o.want_plan = true;
    const OTSolution online = solve_ot(mu, nu, CostKind::sqeuclidean, o);
    expect_error_of_plan(online, mu.weights, nu.weights);
    o.want_plan = false;
    EXPECT_EQ(solve_ot(mu, nu, CostKind::sqeuclidean, o).marginal_error, online.marginal_error);
  }
}

// POT's test_sinkhorn_stabilization problem without POT's normalization of M: two 1-D Gaussian
// histograms on 100 bins (ot.datasets.make_1D_gauss(100, 30, 10) and (100, 40, 10)), C_ij = (i -
// j)^2, reg 1e-5.
struct PotStabilizationProblem {
  CostMatrix cost;
  Eigen::VectorXd a, b;
  PotStabilizationProblem() : cost(100, 100), a(100), b(100) {
    for (int i = 0; i < 100; ++i) {
      a[i] = std::exp(-(i - 30.0) * (i - 30.0) / (2.0 * 10.0 * 10.0));
      b[i] = std::exp(-(i - 40.0) * (i - 40.0) / (2.0 * 10.0 * 10.0));
      for (int j = 0; j < 100; ++j) cost(i, j) = static_cast<double>((i - j) * (i - j));
    }
    a /= a.sum();
    b /= b.sum();
  }
};

// At reg 1e-5 the rounding floor of any plan near the solution is at least 6 u <C, pi> / eps
// (stages.hpp) = 6 * 2^-53 * 99.3 / 1e-5 = 6.6e-9: tol 1e-9 cannot be honoured there, and the
// solve must not claim it. What it reaches within 20 000 iterations is returned as its best state:
// never the marginal error 2 of the last iterate of a failed final stage.
TEST(Sinkhorn, PotStabilizationProblemConverges) {
  const PotStabilizationProblem p;
  const double exact = exact_ot(p.cost, p.a, p.b).cost;
  EXPECT_NEAR(exact, 99.3153, 1e-3);
  EXPECT_GT(6.0 * kUnit64 * exact / 1e-5, 1e-9);
  OTSolveOptions o;
  o.sinkhorn.epsilon = 1e-5;
  o.sinkhorn.tol = 1e-9;
  o.sinkhorn.max_iter = 20000;
  const OTSolution s = solve_ot(CostMatrix(p.cost), p.a, p.b, o);
  ASSERT_NE(s.status, "failed") << s.reason;
  EXPECT_FALSE(s.converged);
  EXPECT_LE(*s.iterations, 20000);
  expect_error_of_plan(s, p.a, p.b);
  // The best state: an epsilon-scaling stage reached (error below epsilon_stage_tol = 1e-5 by its
  // estimate; the measured error within the floor of that) or better at 1e-5.
  EXPECT_LT(s.marginal_error, 2e-5) << "epsilon reached " << s.epsilon_reached;
  EXPECT_GE(s.epsilon_reached, o.sinkhorn.epsilon);
  // Its cost is that of a plan of marginal error e: not below the exact cost by more than e times
  // the cost range (9801).
  EXPECT_GE(s.cost, exact - s.marginal_error * 9801.0 - 1e-9);
  // At reg 0.1 (POT's normalized problem's scale) the default converges to 1e-8, above its floor.
  o.sinkhorn.epsilon = 0.1;
  o.sinkhorn.tol = 1e-8;
  const OTSolution coarse = solve_ot(CostMatrix(p.cost), p.a, p.b, o);
  EXPECT_TRUE(coarse.converged) << coarse.status << " " << coarse.marginal_error;
  expect_error_of_plan(coarse, p.a, p.b);
  EXPECT_LT(coarse.rounding_floor, o.sinkhorn.tol);
}

// Under a budget the solver returns its best state: never a plan worse than the last
// epsilon-scaling stage it reached, and epsilon_reached says which epsilon the plan has. At eps =
// 1 (1e-4 of the cost range) the final stage from a stalled schedule's exact start still has work
// (its plan is far from the exact one): the budgets lie below the 240 iterations it needs
// (measured: 100 ends at 1.5e-7, 300 converges); 3000 converges. (At eps = 1e-3 that start is
// the solution: 2 iterations converge.)
TEST(Sinkhorn, BudgetReturnsBestStage) {
  const PotStabilizationProblem p;
  OTSolveOptions enough;
  enough.sinkhorn.epsilon = 1.0;
  enough.sinkhorn.tol = 1e-8;
  enough.sinkhorn.max_iter = 3000;
  const OTSolution converged = solve_ot(CostMatrix(p.cost), p.a, p.b, enough);
  EXPECT_TRUE(converged.converged) << converged.status << " " << converged.marginal_error;
  expect_error_of_plan(converged, p.a, p.b);
  for (int budget : {10, 30, 60}) {
    OTSolveOptions o;
    o.sinkhorn.epsilon = 1.0;
    o.sinkhorn.tol = 1e-8;
    o.sinkhorn.max_iter = budget;
    const OTSolution s = solve_ot(CostMatrix(p.cost), p.a, p.b, o);
    ASSERT_NE(s.status, "failed") << s.reason;
    EXPECT_FALSE(s.converged);
    expect_error_of_plan(s, p.a, p.b);
    if (s.epsilon_reached > o.sinkhorn.epsilon) {
      EXPECT_LT(s.marginal_error, 2e-5) << "budget " << budget;
    }
    // The same budget without scaling ends at the plain loop's state at epsilon: the default's
    // best is not worse than the scaling stages it reached, and never worse than 2 (the largest
    // error): here it must be far below.
    EXPECT_LT(s.marginal_error, 1.0) << "budget " << budget;
  }
}

// A random small problem of the property below: n, m in [2, 8] points in R^2, weights in [1e-3,
// 1], clouds of spread 0.1 to 10; epsilon from 1e-3 to 10 times the cost range (half of the draws)
// or 0.1 (the other half, as in the report: epsilon-scaling then starts for the larger spreads).
struct RandomProblem {
  Measure<double> mu, nu;
  double epsilon = 0.0;
};

RandomProblem random_problem(std::mt19937_64& rng, bool relative_epsilon) {
  std::uniform_int_distribution<int> size(2, 8);
  std::uniform_real_distribution<double> log_spread(std::log(0.1), std::log(10.0)), unit(0.0, 1.0);
  RandomProblem r;
  const double sx = std::exp(log_spread(rng)), sy = std::exp(log_spread(rng));
  r.mu = gaussian_cloud(rng, size(rng), sx, 0.0);
  r.nu = gaussian_cloud(rng, size(rng), sy, sx * (unit(rng) - 0.5));
  r.mu.weights = claim_weights(rng, r.mu.n());
  r.nu.weights = claim_weights(rng, r.nu.n());
  const CostMatrix C = cost_matrix(r.mu.points, r.nu.points, CostKind::sqeuclidean);
  const double range = C.maxCoeff() - C.minCoeff();
  r.epsilon = relative_epsilon ? range * std::pow(10.0, -3.0 + 4.0 * unit(rng)) : 0.1;
  return r;
}

// The property: wherever the plain loop (overrelaxation 1, no epsilon-scaling) converges, the
// default converges, in at most its iterations (both count one iteration per soft-min pair of the
// loop that is counted: the default's plain loop beside runs the same iterations as the plain
// loop alone, stage.hpp's PlainLoop).
TEST(Sinkhorn, DefaultConvergesWhereThePlainLoopDoes) {
  std::mt19937_64 rng(fresh_seed());
  int plain_converged = 0, default_faster = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const RandomProblem r = random_problem(rng, trial % 2 == 0);
    OTSolveOptions o;
    o.sinkhorn.epsilon = r.epsilon;
    o.sinkhorn.tol = 1e-9;
    o.sinkhorn.max_iter = 10000;
    o.op = "dense";
    const OTSolution defaults = solve_ot(r.mu, r.nu, CostKind::sqeuclidean, o);
    o.sinkhorn.overrelaxation = 1.0;
    o.epsilon_start = "off";
    const OTSolution plain = solve_ot(r.mu, r.nu, CostKind::sqeuclidean, o);
    ASSERT_NE(defaults.status, "failed") << defaults.reason;
    ASSERT_NE(plain.status, "failed") << plain.reason;
    if (!plain.converged) continue;
    ++plain_converged;
    EXPECT_TRUE(defaults.converged) << "trial " << trial << ": plain loop converged in " << *plain.iterations
                                    << ", default " << defaults.status << " error " << defaults.marginal_error;
    EXPECT_LE(*defaults.iterations, *plain.iterations) << "trial " << trial << " epsilon " << r.epsilon;
    if (*defaults.iterations < *plain.iterations) ++default_faster;
  }
  EXPECT_GT(plain_converged, 150);  // the property is not vacuous
  std::printf("[ tokenflow ] plain loop converged on %d of 300; the default took fewer iterations on %d\n",
              plain_converged, default_faster);
}

// A converged plan's cost is not below the exact OT cost by more than its own error bound. The
// plan P returned (its doubles as they are) has row sums r and column sums c with |r - a|_1 +
// |c - b|_1 = e, the marginal error it reports (its columns are b only to the rounding floor,
// about u (|f| + |g| + |C|) / eps relative: 1e-11 at eps = 1.5e-3 and costs near 60). Take an
// optimal dual pair of W(a, b) in c-concave form with f in [0, R] (R = max C - min C), so that
// g_j = min_i (C_ij - f_i) lies in [min C - R, max C] and |g| <= max|C| + R. Since f_i + g_j <= C_ij
// and P >= 0:  <C, P> >= f.r + g.c = W + f.(r - a) + g.(c - b) >= W - e (max|C| + R).
// Rounding of the reported sum <C, P>: n m u <C, P> at most (n, m <= 8: below 1e-12 of it).
TEST(Sinkhorn, ConvergedCostNotBelowExact) {
  std::mt19937_64 rng(fresh_seed());
  int converged = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const RandomProblem r = random_problem(rng, true);
    OTSolveOptions o;
    o.sinkhorn.epsilon = r.epsilon * 1e-2;
    o.sinkhorn.tol = 1e-9;
    const OTSolution s = solve_ot(r.mu, r.nu, CostKind::sqeuclidean, o);
    ASSERT_NE(s.status, "failed") << s.reason;
    const CostMatrix C = cost_matrix(r.mu.points, r.nu.points, CostKind::sqeuclidean);
    const double exact = exact_ot(C, r.mu.weights, r.nu.weights).cost;
    const double range = C.maxCoeff() - C.minCoeff();
    if (!s.converged) continue;
    ++converged;
    EXPECT_GE(s.cost, exact - s.marginal_error * (range + C.cwiseAbs().maxCoeff()) -
                          1e-12 * std::abs(exact))
        << "trial " << trial << " epsilon " << o.sinkhorn.epsilon;
  }
  EXPECT_GT(converged, 30);
}

}  // namespace
}  // namespace tokenflow
