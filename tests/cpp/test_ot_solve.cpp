// solve_ot / solve_wasserstein (tokenflow/ot_solve.hpp): the one path that `tokenflow ot`,
// `tokenflow wasserstein` and Python share. Its parts are tested against the loop they wrap.
#include "tokenflow/ot_solve.hpp"

#include <gtest/gtest.h>

#include <random>
#include <type_traits>

#include "test_util.hpp"
#include "tokenflow/model.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;
using testing::random_measure;

TEST(OtSolve, CostMatrixIsPairCostEntryByEntry) {
  std::mt19937_64 rng(fresh_seed());
  const Measure<double> mu = random_measure(rng, 7, 3, false), nu = random_measure(rng, 5, 3, false);
  for (CostKind kind : {CostKind::sqeuclidean, CostKind::euclidean, CostKind::dot}) {
    const CostMatrix C = cost_matrix(mu.points, nu.points, kind);
    for (Eigen::Index i = 0; i < 7; ++i)
      for (Eigen::Index j = 0; j < 5; ++j)
        EXPECT_EQ(C(i, j), pair_cost(kind, &mu.points(i, 0), &nu.points(j, 0), 3));
  }
}

TEST(OtSolve, OperatorChoiceBySize) {
  std::mt19937_64 rng(fresh_seed());
  const Measure<double> mu = random_measure(rng, 6, 2, false);
  std::string used;
  auto op = make_soft_min(mu.points, mu.points, CostKind::sqeuclidean, "auto", &used);
  EXPECT_EQ(used, "dense");
  EXPECT_NE(dynamic_cast<const DenseSoftMin*>(op.get()), nullptr);
  op = make_soft_min(mu.points, mu.points, CostKind::sqeuclidean, "online", &used);
  EXPECT_EQ(used, "online");
  EXPECT_NE(dynamic_cast<const OnlineSoftMin*>(op.get()), nullptr);
  EXPECT_THROW(make_soft_min(mu.points, mu.points, CostKind::sqeuclidean, "gpu"), InputError);
}

// The point-cloud path is the Sinkhorn loop on the dense operator of cost_matrix, with the
// options as given (epsilon-scaling off here): the same numbers, bit for bit, as calling it
// directly; and as solve_ot on the cost matrix itself.
// Sinkhorn at epsilon and tol without epsilon-scaling.
OTSolveOptions unscaled_sinkhorn(double epsilon, double tol) {
  OTSolveOptions options;
  options.sinkhorn.epsilon = epsilon;
  options.sinkhorn.tol = tol;
  options.epsilon_start = "off";
  return options;
}

TEST(OtSolve, PointsPathIsTheLoopOnTheDenseOperator) {
  std::mt19937_64 rng(fresh_seed());
  const Measure<double> mu = random_measure(rng, 9, 2, true), nu = random_measure(rng, 11, 2, true);
  const OTSolveOptions options = unscaled_sinkhorn(0.3, 1e-11);
  const OTSolution s = solve_ot(mu, nu, CostKind::sqeuclidean, options);
  SinkhornOptions direct;
  direct.epsilon = 0.3;
  direct.tol = 1e-11;
  direct.want_plan = true;
  const DenseSoftMin op(cost_matrix(mu.points, nu.points, CostKind::sqeuclidean));
  const SinkhornResult r = sinkhorn(op, mu.weights, nu.weights, direct);
  EXPECT_EQ(s.f, r.f);
  EXPECT_EQ(s.g, r.g);
  EXPECT_EQ(s.plan, r.plan);
  EXPECT_EQ(s.cost, r.cost);
  EXPECT_EQ(*s.iterations, r.iterations);
  EXPECT_EQ(s.op_used, "dense");
  EXPECT_TRUE(s.plan_formed);
  const OTSolution m =
      solve_ot(cost_matrix(mu.points, nu.points, CostKind::sqeuclidean), mu.weights, nu.weights, options);
  EXPECT_EQ(m.plan, s.plan);
  EXPECT_EQ(m.ground_cost, "matrix");
  // The marginal error reported is that of the plan returned, up to the order of the sums: the
  // loop sums the same entries in another order. Row sums of m entries and column sums of n
  // entries of a plan of mass 1 each carry at most (n + m) u of rounding in total per side, so the
  // two readings differ by at most 2 (n + m) u (u = 2^-53), doubled for the final |.| sums.
  EXPECT_NEAR(s.marginal_error, plan_marginal_error(s.plan, mu.weights, nu.weights),
              4.0 * (9 + 11) * 1.12e-16);
}

TEST(OtSolve, DivergenceIsSinkhornDivergenceOfTheSameProblems) {
  // solve_ot forms S_eps with sinkhorn_divergence: the same self-transport solves (cold, no plan)
  // on the dense operators, so every number agrees to the bit.
  std::mt19937_64 rng(fresh_seed());
  const Measure<double> mu = random_measure(rng, 12, 2, true), nu = random_measure(rng, 10, 2, true);
  OTSolveOptions options = unscaled_sinkhorn(0.2, 1e-9);
  options.divergence = true;
  const OTSolution s = solve_ot(mu, nu, CostKind::sqeuclidean, options);
  ASSERT_TRUE(s.divergence.has_value());
  SinkhornOptions direct;
  direct.epsilon = 0.2;
  direct.tol = 1e-9;
  const auto dense = [](const Measure<double>& x, const Measure<double>& y) {
    return DenseSoftMin(cost_matrix(x.points, y.points, CostKind::sqeuclidean));
  };
  const SinkhornDivergence d =
      sinkhorn_divergence(dense(mu, nu), dense(mu, mu), dense(nu, nu), mu.weights, nu.weights, direct);
  EXPECT_EQ(*s.divergence, d.value);
  EXPECT_EQ(s.objective, d.xy.objective);
  EXPECT_EQ(s.xx.objective, d.xx.objective);
  EXPECT_EQ(s.yy.iterations, d.yy.iterations);
  EXPECT_EQ(s.xx.plan.size(), 0);  // the self terms form no plan
}

TEST(OtSolve, EveryEntryPointChecksTheSinkhornOptionsAlike) {
  // One check (check_sinkhorn_options) behind sinkhorn, sinkhorn_symmetric, check_ot_options and
  // solve_wasserstein: each bad value is refused with the same key everywhere.
  std::mt19937_64 rng(fresh_seed());
  const Measure<double> mu = random_measure(rng, 4, 2, false), nu = random_measure(rng, 4, 2, false);
  const DenseSoftMin op(cost_matrix(mu.points, nu.points, CostKind::sqeuclidean));
  auto key_of = [](const auto& call) {
    try {
      call();
    } catch (const InputError& e) {
      return e.key();
    }
    return std::string("none");
  };
  struct Bad {
    const char* key;
    double epsilon, tol;
    int max_iter;
  };
  for (const Bad& bad : {Bad{"epsilon", -1.0, 1e-9, 100}, Bad{"epsilon", INFINITY, 1e-9, 100},
                         Bad{"tol", 0.1, 0.0, 100}, Bad{"max_iter", 0.1, 1e-9, 0}}) {
    SCOPED_TRACE(bad.key);
    SinkhornOptions so;
    so.epsilon = bad.epsilon;
    so.tol = bad.tol;
    so.max_iter = bad.max_iter;
    EXPECT_EQ(key_of([&] { check_sinkhorn_options(so); }), bad.key);
    EXPECT_EQ(key_of([&] { sinkhorn(op, mu.weights, nu.weights, so); }), bad.key);
    EXPECT_EQ(key_of([&] { sinkhorn_symmetric(op, mu.weights, so); }), bad.key);
    OTSolveOptions o;
    o.sinkhorn.epsilon = bad.epsilon;
    o.sinkhorn.tol = bad.tol;
    o.sinkhorn.max_iter = bad.max_iter;
    EXPECT_EQ(key_of([&] { check_ot_options(o, false, CostKind::sqeuclidean); }), bad.key);
    WassersteinOptions w;
    w.method = WassersteinMethod::sinkhorn;
    w.sinkhorn.epsilon = bad.epsilon;
    w.sinkhorn.tol = bad.tol;
    w.sinkhorn.max_iter = bad.max_iter;
    EXPECT_EQ(key_of([&] { solve_wasserstein(mu, nu, 2.0, w, false); }), bad.key);
  }
  SinkhornOptions so;
  so.epsilon_start = -1.0;  // scaling from the cost range: the decay is read
  so.epsilon_decay = 1.0;
  EXPECT_EQ(key_of([&] { sinkhorn(op, mu.weights, nu.weights, so); }), "epsilon_decay");
  so.epsilon_start = 0.0;
  so.kernel_mode = true;
  so.overrelaxation = 2.0;
  EXPECT_EQ(key_of([&] { sinkhorn(op, mu.weights, nu.weights, so); }), "overrelaxation");
  so.overrelaxation = 1.5;
  EXPECT_EQ(key_of([&] { check_sinkhorn_options(so); }), "none");
}

// Sinkhorn's options are one type: tokenflow ot's (so Python's tokenflow.sinkhorn and
// tokenflow.torch), tokenflow wasserstein's and the model's Sinkhorn layer hold a SinkhornOptions,
// whose defaults are written once (ot.hpp's kSinkhorn*). Wasserstein's epsilon 0 means "from the
// cost scale", and the model's epsilon is model.epsilon's default 1.
TEST(OtSolve, SinkhornOptionsAreOneTypeWithOneSetOfDefaults) {
  static_assert(std::is_same_v<decltype(OTSolveOptions::sinkhorn), SinkhornOptions>);
  static_assert(std::is_same_v<decltype(WassersteinOptions::sinkhorn), SinkhornOptions>);
  static_assert(std::is_same_v<decltype(ModelConfig::sinkhorn), SinkhornOptions>);
  const SinkhornOptions ot = OTSolveOptions{}.sinkhorn, w = WassersteinOptions{}.sinkhorn,
                        model = ModelConfig{}.sinkhorn;
  EXPECT_EQ(ot.epsilon, kSinkhornEpsilon);
  EXPECT_EQ(w.epsilon, 0.0);
  EXPECT_EQ(model.epsilon, 1.0);
  for (const SinkhornOptions& o : {ot, w, model}) {
    EXPECT_EQ(o.tol, kSinkhornTol);
    EXPECT_EQ(o.max_iter, kSinkhornMaxIter);
    EXPECT_EQ(o.epsilon_decay, kSinkhornEpsilonDecay);
    EXPECT_EQ(o.anderson_depth, SinkhornOptions{}.anderson_depth);
  }
  EXPECT_EQ(model.epsilon_start, nn::kLearnedCostEpsilonStart);
}

TEST(OtSolve, ExactPathAndDualObjective) {
  std::mt19937_64 rng(fresh_seed());
  const Measure<double> mu = random_measure(rng, 8, 2, true), nu = random_measure(rng, 6, 2, true);
  OTSolveOptions options;
  options.method = "exact";
  const OTSolution s = solve_ot(mu, nu, CostKind::euclidean, options);
  const ExactOTResult r = exact_ot(cost_matrix(mu.points, nu.points, CostKind::euclidean), mu.weights, nu.weights);
  EXPECT_EQ(s.plan, r.plan);
  EXPECT_EQ(s.cost, r.cost);
  EXPECT_EQ(s.status, "optimal");
  EXPECT_FALSE(s.iterations.has_value());
  // The pivots: the initial ones (one arc into each of the 6 sinks at most) and the improving ones;
  // a basis of n + m - 1 = 13 arcs with positive weights everywhere needs at least one pivot.
  EXPECT_EQ(s.pivots, r.pivots);
  EXPECT_GE(s.pivots, 1);
  // Strong duality: f.a + g.b equals the optimal cost up to the rounding of two dot products of
  // n and m terms bounded by max |C|: (n + m) eps max|C| (the masses are exact multiples of 2^-52).
  const double maxC = cost_matrix(mu.points, nu.points, CostKind::euclidean).cwiseAbs().maxCoeff();
  EXPECT_NEAR(s.dual_objective, s.cost, 4.0 * (8 + 6) * 2.2e-16 * maxC);
}

TEST(OtSolve, OptionErrorsNameTheArgument) {
  auto key_of = [](const OTSolveOptions& o, bool matrix = false, CostKind cost = CostKind::sqeuclidean) {
    try {
      check_ot_options(o, matrix, cost);
    } catch (const InputError& e) {
      return e.key();
    }
    return std::string("none");
  };
  OTSolveOptions o;
  EXPECT_EQ(key_of(o), "none");
  o.method = "emd";
  EXPECT_EQ(key_of(o), "method");
  o = {};
  o.sinkhorn.epsilon = 0.0;
  EXPECT_EQ(key_of(o), "epsilon");
  o = {};
  o.sinkhorn.max_iter = 0;
  EXPECT_EQ(key_of(o), "max_iter");
  o = {};
  o.epsilon_start = "soon";
  EXPECT_EQ(key_of(o), "epsilon_start");
  o = {};
  o.sinkhorn.epsilon_decay = 1.0;
  EXPECT_EQ(key_of(o), "epsilon_decay");
  o.epsilon_start = "off";  // no scaling: the decay is not used
  EXPECT_EQ(key_of(o), "none");
  o = {};
  o.divergence = true;
  EXPECT_EQ(key_of(o, false, CostKind::dot), "divergence");
  EXPECT_EQ(key_of(o, true), "divergence");
  o = {};
  o.op = "online";
  EXPECT_EQ(key_of(o, true), "operator");
  o = {};
  o.method = "exact";
  o.sinkhorn.epsilon = -1.0;  // not a Sinkhorn run: epsilon is not read
  EXPECT_EQ(key_of(o), "none");
}

TEST(OtSolve, WassersteinChecksAndConditional) {
  std::mt19937_64 rng(fresh_seed());
  const Measure<double> mu = random_measure(rng, 6, 2, false), nu = random_measure(rng, 6, 2, false);
  WassersteinOptions options;
  EXPECT_THROW(solve_wasserstein(mu, nu, 0.5, options, false), InputError);
  options.method = WassersteinMethod::sorted;
  EXPECT_THROW(solve_wasserstein(mu, nu, 2.0, options, false), InputError);  // d = 2
  options.method = WassersteinMethod::automatic;
  const WassersteinSolution s = solve_wasserstein(mu, nu, 2.0, options, false);
  EXPECT_EQ(s.result.method, WassersteinMethod::exact);
  EXPECT_EQ(s.result.value, wasserstein_exact(mu.points, nu.points, mu.weights, nu.weights, 2.0));
  options.method = WassersteinMethod::sinkhorn;
  EXPECT_THROW(solve_wasserstein(mu, nu, 2.0, options, true), InputError);  // conditional is exact
}

}  // namespace
}  // namespace tokenflow
