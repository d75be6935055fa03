// The multiscale schedule (ot_multiscale.hpp): the cells' centroids against a plain loop over the
// points, and Sinkhorn through it against the single-scale solve on fresh random clouds in 1 to 3
// dimensions (anisotropic, shifted, clustered), with uniform and random weights.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "test_util.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/ot_multiscale.hpp"
#include "tokenflow/measure.hpp"
#include "tokenflow/ot_solve.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;

// n points in d dimensions: half from an anisotropic, shifted Gaussian, half from three tight
// clusters (spread 0.05) at random centres.
CloudPoints mixed_cloud(std::mt19937_64& rng, Eigen::Index n, Eigen::Index d) {
  std::uniform_real_distribution<double> uni(-1.5, 1.5), axis(0.4, 1.6);
  std::normal_distribution<double> normal(0.0, 1.0);
  CloudPoints x(n, d), centres(3, d);
  for (Eigen::Index c = 0; c < 3; ++c)
    for (Eigen::Index k = 0; k < d; ++k) centres(c, k) = uni(rng);
  std::vector<double> scale(static_cast<std::size_t>(d)), shift(static_cast<std::size_t>(d));
  for (Eigen::Index k = 0; k < d; ++k) {
    scale[static_cast<std::size_t>(k)] = axis(rng);
    shift[static_cast<std::size_t>(k)] = 0.5 * uni(rng);
  }
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index k = 0; k < d; ++k)
      x(i, k) = i % 2 == 0 ? scale[static_cast<std::size_t>(k)] * normal(rng) + shift[static_cast<std::size_t>(k)]
                           : centres(i % 3, k) + 0.05 * normal(rng);
  return x;
}

Eigen::VectorXd random_weights(std::mt19937_64& rng, Eigen::Index n, bool uniform) {
  std::uniform_real_distribution<double> uni(0.2, 1.0);
  Eigen::VectorXd w(n);
  for (auto& v : w) v = uniform ? 1.0 : uni(rng);
  return w / w.sum();
}

// The reference: each point's cell by a plain floor per axis, the cells' sums in a std::map.
TEST(Multiscale, CellCentroidsAreThePlainCellSums) {
  std::mt19937_64 rng(fresh_seed());
  for (Eigen::Index d = 1; d <= 3; ++d) {
    const CloudPoints x = mixed_cloud(rng, 3000, d);
    const Eigen::VectorXd w = random_weights(rng, 3000, false);
    const double cell = std::uniform_real_distribution<double>(0.05, 0.5)(rng);
    const Eigen::RowVectorXd origin = x.colwise().minCoeff();
    const WeightedCloud c = cell_centroids(x, w, cell, origin);
    std::map<std::vector<long>, std::pair<std::vector<double>, double>> sums;
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      std::vector<long> key;
      for (Eigen::Index k = 0; k < d; ++k) key.push_back(static_cast<long>(std::floor((x(i, k) - origin[k]) / cell)));
      auto& [sum, mass] = sums[key];
      sum.resize(static_cast<std::size_t>(d), 0.0);
      for (Eigen::Index k = 0; k < d; ++k) sum[static_cast<std::size_t>(k)] += w[i] * x(i, k);
      mass += w[i];
    }
    ASSERT_EQ(c.points.rows(), static_cast<Eigen::Index>(sums.size()));
    Eigen::Index r = 0;
    for (const auto& [key, value] : sums) {  // lexicographic order, as cell_centroids'
      // The same sums in the same order (points sorted by cell, then by index): equal to rounding
      // of the division only.
      EXPECT_EQ(c.weights[r], value.second);
      for (Eigen::Index k = 0; k < d; ++k)
        EXPECT_NEAR(c.points(r, k), value.first[static_cast<std::size_t>(k)] / value.second, 1e-15 * (1 + std::abs(c.points(r, k))));
      ++r;
    }
    // The total weight and the weighted mean are kept (sums in another order: n u relative).
    EXPECT_NEAR(c.weights.sum(), 1.0, 3000 * 0x1p-52);
    const Eigen::RowVectorXd mean = w.transpose() * x, coarse_mean = c.weights.transpose() * c.points;
    EXPECT_LE((mean - coarse_mean).cwiseAbs().maxCoeff(), 3000 * 0x1p-52 * x.cwiseAbs().maxCoeff());
  }
}

// Sinkhorn through the multiscale schedule (here with the online operator on the points, which it
// accepts as any other) converges to tol on the given points, at the same
// optimum as the single-scale schedule: both plans are within tol of the unique fixed point, and
// potentials whose plans have row errors e1, e2 (columns exact) differ, in the gauge of the
// centering, by at most about eps (e1 + e2) / min(a) per entry (a row's potential moves by eps
// log(1 + e) for a relative error e of its row sum). We check the costs and the objectives,
// which move by at most (e1 + e2) times the cost range (docs/ot.md, "What the numbers mean").
TEST(Multiscale, SinkhornReachesTheSingleScaleOptimumWithFewerIterationsOnThePoints) {
  std::mt19937_64 rng(fresh_seed());
  for (Eigen::Index d = 1; d <= 3; ++d) {
    const Eigen::Index n = 1500 + 500 * d, m = 1500;
    const CloudPoints x = mixed_cloud(rng, n, d), y = mixed_cloud(rng, m, d);
    const Eigen::VectorXd a = random_weights(rng, n, d != 2), b = random_weights(rng, m, true);
    // The online operator on the points (exact soft-mins; the coarse clouds run dense here).
    const OnlineSoftMin op(x, y, CostKind::sqeuclidean);
    SinkhornOptions options;
    options.epsilon = d == 1 ? 0.01 : 0.05;
    options.tol = 1e-6;
    options.epsilon_start = op.cost_range();
    MultiscaleOptions ms;
    ms.min_points = 1000;
    std::vector<MultiscaleLevel> levels;
    const std::optional<SinkhornResult> multi = sinkhorn_multiscale(op, x, y, a, b, options, ms, &levels);
    ASSERT_TRUE(multi.has_value()) << "d = " << d;
    const SinkhornResult single = sinkhorn(op, a, b, options);
    ASSERT_TRUE(multi->converged && single.converged) << d;
    EXPECT_LT(multi->marginal_error, options.tol);
    ASSERT_FALSE(levels.empty());
    for (const MultiscaleLevel& l : levels) {
      EXPECT_LT(l.n, n);
      EXPECT_LT(l.m, m);
    }
    const double range = op.cost_range(), moved = (multi->marginal_error + single.marginal_error) * range;
    EXPECT_NEAR(multi->cost, single.cost, moved + 1e-12) << d;
    EXPECT_NEAR(multi->objective, single.objective, moved + 1e-12) << d;
    // The work on the given points: the whole schedule's iterations against the final solve's.
    EXPECT_LT(multi->iterations, single.iterations) << d;
  }
}

// Where the schedule does not apply, nullopt: the caller solves on the points.
TEST(Multiscale, DoesNotApplyWithoutScalingOrBelowItsSizeOrUnbalanced) {
  std::mt19937_64 rng(fresh_seed());
  const CloudPoints x = mixed_cloud(rng, 3000, 2), y = mixed_cloud(rng, 3000, 2);
  const Eigen::VectorXd w = random_weights(rng, 3000, true);
  const GridSoftMin op(x, y, 1e-7);
  SinkhornOptions options;
  options.epsilon = 0.01;
  options.tol = 1e-6;
  MultiscaleOptions ms;
  ms.min_points = 1000;
  EXPECT_FALSE(sinkhorn_multiscale(op, x, y, w, w, options, ms, nullptr).has_value());  // no scaling
  options.epsilon_start = op.cost_range();
  EXPECT_FALSE(sinkhorn_multiscale(op, x, y, w, w, options, MultiscaleOptions{}, nullptr).has_value());  // small
  SinkhornOptions unbalanced = options;
  unbalanced.marginal_penalty = 1.0;
  EXPECT_FALSE(sinkhorn_multiscale(op, x, y, w, w, unbalanced, ms, nullptr).has_value());
  EXPECT_TRUE(sinkhorn_multiscale(op, x, y, w, w, options, ms, nullptr).has_value());
}

// Clouds of a few repeated points (every cell grid keeps them few, down to any side): the finer
// grids stop at their bound, and the solve converges to the single-scale optimum.
TEST(Multiscale, CloudsOfRepeatedPoints) {
  std::mt19937_64 rng(fresh_seed());
  const Eigen::Index n = 2000;
  CloudPoints x(n, 2), y(n, 2);
  std::uniform_real_distribution<double> uni(-1.0, 1.0);
  const CloudPoints sites_x = testing::random_matrix(rng, 3, 2, 1.0), sites_y = testing::random_matrix(rng, 2, 2, 1.0);
  for (Eigen::Index i = 0; i < n; ++i) {
    x.row(i) = sites_x.row(i % 3);
    y.row(i) = sites_y.row(i % 2);
  }
  const Eigen::VectorXd w = random_weights(rng, n, false), v = random_weights(rng, n, true);
  const OnlineSoftMin op(x, y, CostKind::sqeuclidean);
  SinkhornOptions options;
  options.epsilon = 1e-3;
  options.tol = 1e-8;
  options.epsilon_start = op.cost_range();
  MultiscaleOptions ms;
  ms.min_points = 1000;
  std::vector<MultiscaleLevel> levels;
  const std::optional<SinkhornResult> multi = sinkhorn_multiscale(op, x, y, w, v, options, ms, &levels);
  ASSERT_TRUE(multi.has_value());
  const SinkhornResult single = sinkhorn(op, w, v, options);
  ASSERT_TRUE(multi->converged && single.converged);
  for (const MultiscaleLevel& l : levels) {
    EXPECT_LE(l.n, 3);
    EXPECT_LE(l.m, 2);
  }
  EXPECT_NEAR(multi->cost, single.cost, (multi->marginal_error + single.marginal_error) * op.cost_range() + 1e-12);
}

// solve_ot: the grid operator runs the schedule under multiscale = auto (its levels reported),
// not under off, and both converge to the same cost within the bound above.
TEST(Multiscale, SolveOtUsesItForTheGridOperator) {
  std::mt19937_64 rng(fresh_seed());
  const Eigen::Index n = 1 << 15;
  Measure<double> mu, nu;
  mu.points = mixed_cloud(rng, n, 1);  // one dimension: the grid's cheapest (the test is of the wiring)
  nu.points = mixed_cloud(rng, n, 1);
  mu.weights = nu.weights = Eigen::VectorXd::Constant(n, 1.0 / static_cast<double>(n));
  OTSolveOptions options;
  options.op = "grid";
  options.sinkhorn.epsilon = 0.2;
  options.sinkhorn.tol = 1e-4;
  options.epsilon_start = "range";  // scaling (auto starts it below 1e-3 of the range only)
  options.want_plan = false;
  const OTSolution multi = solve_ot(mu, nu, CostKind::sqeuclidean, options);
  options.multiscale = "off";
  const OTSolution single = solve_ot(mu, nu, CostKind::sqeuclidean, options);
  ASSERT_TRUE(multi.converged && single.converged);
  EXPECT_FALSE(multi.multiscale_levels.empty());
  EXPECT_TRUE(single.multiscale_levels.empty());
  const double range = OnlineSoftMin(mu.points, nu.points, CostKind::sqeuclidean).cost_range();
  const double moved = (multi.marginal_error + single.marginal_error) * range;
  EXPECT_NEAR(multi.cost, single.cost, moved);
  options.multiscale = "fast";
  EXPECT_THROW(solve_ot(mu, nu, CostKind::sqeuclidean, options), InputError);
}

}  // namespace
}  // namespace tokenflow
