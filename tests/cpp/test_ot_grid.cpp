// The grid soft-min operator (ot.hpp, GridSoftMin) against the online operator's exact
// soft-mins, and Sinkhorn through it against the dense loop: fresh random clouds, anisotropic,
// shifted and of different widths, with random potentials and with Sinkhorn's own.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "test_util.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/ot_solve.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;
using GridPoints = GridSoftMin::PointMatrix;
// The grid is built when its cost is below this many multiply-adds per pair (GaussAverageOptions;
// the operator's default is 16): at these sizes (a few hundred points) a grid costs more than the
// exact sums it replaces, so the tests allow more to run it.
constexpr double kGridCostPerPair = 1e4;
constexpr double kGridRoundoff = 0x1p-53;

// n points in d dimensions: N(0, 1) scaled per axis by `width` times a factor in [0.3, 3], then
// shifted by up to `width` per axis.
GridPoints grid_test_cloud(std::mt19937_64& rng, Eigen::Index n, Eigen::Index d, double width) {
  std::uniform_real_distribution<double> factor(0.3, 3.0), shift(-1.0, 1.0);
  GridPoints x = testing::random_matrix(rng, n, d, 1.0);
  for (Eigen::Index a = 0; a < d; ++a)
    x.col(a) = x.col(a) * (width * factor(rng)) + Eigen::VectorXd::Constant(n, width * shift(rng));
  return x;
}

// |grid - exact| per entry, against the bound: the grid's sums carry relative error at most tol,
// so each soft-min is within eps tol / (1 - tol) of the exact one; the rest is rounding. The
// operator forms out = |t|^2 - eps (L + offset) from terms it keeps below 16 S (grid_softmin.cpp,
// kTermBound), S = max |t|^2 + eps max |h| <= range + eps max |h| (centred points); three such
// terms, each with a few roundings (the log of the sum, the products): at most 3 x 16 x 4 u S, and
// the online reference's log-sum-exp adds a few u S: 256 u S.
void expect_grid_within(const Eigen::VectorXd& grid, const Eigen::VectorXd& exact, double eps,
                        double tol, double range, const Eigen::VectorXd& h, const char* what) {
  const double bound =
      eps * tol / (1.0 - tol) + 256.0 * kGridRoundoff * (range + eps * h.cwiseAbs().maxCoeff());
  ASSERT_EQ(grid.size(), exact.size());
  for (Eigen::Index i = 0; i < grid.size(); ++i)
    ASSERT_LE(std::abs(grid[i] - exact[i]), bound) << what << " entry " << i;
}

TEST(GridSoftMin, SoftMinsWithinTheirRelativeTolerance) {
  std::mt19937_64 rng(fresh_seed());
  long long exact_rows = 0, all_rows = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const Eigen::Index d = 1 + trial % 3, n = 300 + 37 * trial, m = 250 + 41 * trial;
    const double width = trial % 4 == 0 ? 0.3 : trial % 4 == 1 ? 1.0 : 4.0;
    const GridPoints x = grid_test_cloud(rng, n, d, width), y = grid_test_cloud(rng, m, d, width);
    // eps from 0.2 to 2 squared widths (the grid's box spans the cloud in bandwidths sqrt(eps));
    // in 3-D 2 (a grid of p^3 terms per node pays at these sizes only for few nodes).
    const double eps = (trial % 2 == 0 && d < 3 ? 0.2 : 2.0) * width * width, tol = 1e-9;
    const OnlineSoftMin exact(x, y, CostKind::sqeuclidean);
    const GridSoftMin grid(x, y, tol, kGridCostPerPair);
    const double range = exact.cost_range();
    // Random potentials of the size of the costs, and Sinkhorn's after a few plain iterations.
    Eigen::VectorXd hy = testing::random_matrix(rng, m, 1, range / eps).col(0) * 0.1;
    Eigen::VectorXd hx = testing::random_matrix(rng, n, 1, range / eps).col(0) * 0.1;
    Eigen::VectorXd a_grid, a_exact, b_grid, b_exact;
    grid.softmin_rows(eps, hy, a_grid);
    exact.softmin_rows(eps, hy, a_exact);
    expect_grid_within(a_grid, a_exact, eps, tol, range, hy, "rows, random h");
    grid.softmin_cols(eps, hx, b_grid);
    exact.softmin_cols(eps, hx, b_exact);
    expect_grid_within(b_grid, b_exact, eps, tol, range, hx, "cols, random h");
    Eigen::VectorXd f = Eigen::VectorXd::Zero(n), g(m);
    const Eigen::VectorXd log_a = Eigen::VectorXd::Constant(n, -std::log(double(n)));
    const Eigen::VectorXd log_b = Eigen::VectorXd::Constant(m, -std::log(double(m)));
    for (int k = 0; k < 20; ++k) {
      exact.softmin_cols(eps, log_a + f / eps, g);
      exact.softmin_rows(eps, log_b + g / eps, f);
    }
    const long long exact_before = grid.rows_exact(), total_before = grid.rows_total();
    grid.softmin_rows(eps, log_b + g / eps, a_grid);
    exact.softmin_rows(eps, log_b + g / eps, a_exact);
    expect_grid_within(a_grid, a_exact, eps, tol, range, Eigen::VectorXd(log_b + g / eps),
                       "rows, Sinkhorn's g");
    grid.softmin_cols(eps, log_a + f / eps, b_grid);
    exact.softmin_cols(eps, log_a + f / eps, b_exact);
    expect_grid_within(b_grid, b_exact, eps, tol, range, Eigen::VectorXd(log_a + f / eps),
                       "cols, Sinkhorn's f");
    if (d < 3) {
      exact_rows += grid.rows_exact() - exact_before;
      all_rows += grid.rows_total() - total_before;
    }
    // The row means of the cost: each average within tol sum_j P_ij |(y_j, |y_j|^2)| (centred
    // points, so |v_j| <= |y_j - c| + |y_j - c|^2 <= sqrt(range) + range) of the exact one,
    // combined as |x|^2 - 2 <x, E y> + E |y|^2: at most (2 sqrt(range) + 1)(sqrt(range) + range)
    // tol, plus the rounding of those terms.
    Eigen::VectorXd mean_grid, mean_exact;
    grid.row_mean_cost(eps, log_b + g / eps, mean_grid);
    exact.row_mean_cost(eps, log_b + g / eps, mean_exact);
    const double root = std::sqrt(range);
    const double mean_bound =
        (2.0 * root + 1.0) * (root + range) * tol + 64.0 * kGridRoundoff * range;
    for (Eigen::Index i = 0; i < n; ++i)
      ASSERT_LE(std::abs(mean_grid[i] - mean_exact[i]), mean_bound) << i;
  }
  // On Sinkhorn's potentials in 1 and 2 dimensions the grid ran: most rows came from the expansion,
  // not from exact sums (random h, far from the quadratic the form fits, may leave every row to
  // the exact sums).
  EXPECT_LT(exact_rows, all_rows / 2);
}

TEST(GridSoftMin, SinkhornThroughTheGridReportsAnUpperBoundOfItsPlansError) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 4; ++trial) {
    const Eigen::Index d = 1 + trial % 3, n = 400 + 50 * trial, m = 350 + 30 * trial;
    const GridPoints x = grid_test_cloud(rng, n, d, 1.0), y = grid_test_cloud(rng, m, d, 1.0);
    const Eigen::VectorXd a = testing::random_weights(rng, n), b = testing::random_weights(rng, m);
    SinkhornOptions options;
    options.epsilon =
        d == 3 ? 2.0 : 0.3;  // in 3-D a grid pays at these sizes only for wide bandwidths
    options.tol = 1e-7;
    options.plain_beside = false;
    options.epsilon_start = -1.0;  // scaling from the cost range
    const GridSoftMin grid(x, y, options.tol / 16.0, kGridCostPerPair);
    const SinkhornResult r = sinkhorn(grid, a, b, options);
    EXPECT_TRUE(r.converged) << "marginal error " << r.marginal_error;
    EXPECT_LT(grid.rows_exact(), grid.rows_total());
    // The plan of the returned potentials, formed exactly: its marginal error is at most the one
    // reported (the reported one adds the grid's certified error to what it measured), up to the
    // rounding of forming the n m entries (the rounding floor).
    const CostMatrix C = cost_matrix(x, y, CostKind::sqeuclidean);
    const Eigen::MatrixXd P = reference_stabilized_kernel(C, a, b, r.f, r.g, options.epsilon);
    const double exact_error = (P.rowwise().sum() - a).cwiseAbs().sum() +
                               (P.colwise().sum().transpose() - b).cwiseAbs().sum();
    EXPECT_LE(exact_error, r.marginal_error + r.rounding_floor);
    // The cost of that plan: the grid reads it as sum_i r^_i m^_i, the row sums r^_i within
    // relative e = tol / 16 of the plan's and the row means m^_i of C within (2 sqrt(R) +
    // 1)(sqrt(R) + R) e (R = cost_range, as in SoftMinsWithinTheirRelativeTolerance), so with mass
    // ~1 the two differ by at most e R + (2 sqrt(R) + 1)(sqrt(R) + R) e, doubled for the masses'
    // own deviation and rounding.
    const double cost = (P.array() * C.array()).sum(), e = options.tol / 16.0,
                 R = grid.cost_range();
    EXPECT_NEAR(r.cost, cost, 2.0 * (e * R + (2.0 * std::sqrt(R) + 1.0) * (std::sqrt(R) + R) * e));
    // And the dense loop's answer at the same epsilon: objectives within marginal error times the
    // cost range of each other (ot.hpp, objective).
    const DenseSoftMin dense(C);
    const SinkhornResult s = sinkhorn(dense, a, b, options);
    EXPECT_NEAR(r.objective, s.objective,
                (r.marginal_error + s.marginal_error) * grid.cost_range() + 1e-12);
  }
}

// The symmetric self-transport through the grid at a tol near its floor (1e-9, the smallest
// Sinkhorn attention allows on the grid): the final stage stops on its estimate, which the plan's
// measure (with the grid's certified error) may exceed; the solve must go on until the measure is
// below tol, and the exactly formed plan must honour it.
TEST(GridSoftMin, SymmetricSinkhornConfirmsItsMeasuredError) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 3; ++trial) {
    const Eigen::Index d = 1 + trial % 2, n = 500 + 100 * trial;
    const GridPoints x = grid_test_cloud(rng, n, d, 1.0);
    const Eigen::VectorXd a = testing::random_weights(rng, n);
    SinkhornOptions options;
    options.epsilon = 0.5;
    options.tol = 1e-9;
    options.plain_beside = false;
    const GridSoftMin grid(x, x, grid_relative_tol(options.tol), kGridCostPerPair);
    const SinkhornResult r = sinkhorn_symmetric(grid, a, options);
    ASSERT_TRUE(r.converged) << "marginal error " << r.marginal_error << " floor "
                             << r.rounding_floor;
    EXPECT_LT(r.marginal_error, options.tol);
    const CostMatrix C = cost_matrix(x, x, CostKind::sqeuclidean);
    const Eigen::MatrixXd P = reference_stabilized_kernel(C, a, a, r.f, r.f, options.epsilon);
    const double exact_error = (P.rowwise().sum() - a).cwiseAbs().sum() +
                               (P.colwise().sum().transpose() - a).cwiseAbs().sum();
    EXPECT_LE(exact_error, r.marginal_error + r.rounding_floor);
  }
}

TEST(GridSoftMin, AutoChoosesTheGridForLargeSquaredEuclideanProblemsInTwoDimensionsOrFewer) {
  std::mt19937_64 rng(fresh_seed());
  const Eigen::Index n = 4100;  // n^2 > kDenseSoftMinMaxPairs
  ASSERT_GT(n * n, kDenseSoftMinMaxPairs);
  const GridPoints x2 = testing::random_matrix(rng, n, 2, 1.0),
                   x4 = testing::random_matrix(rng, n, 4, 1.0);
  std::string used;
  auto op = make_soft_min(x2, x2, CostKind::sqeuclidean, "auto", &used);
  EXPECT_EQ(used, "grid");
  const GridPoints x3 = testing::random_matrix(rng, n, 3, 1.0);
  op = make_soft_min(x3, x3, CostKind::sqeuclidean, "auto", &used);
  EXPECT_EQ(used, "online");  // 3-D: the grid only when asked for
  op = make_soft_min(x3.topRows(20), x3.topRows(20), CostKind::sqeuclidean, "grid", &used);
  EXPECT_EQ(used, "grid");
  EXPECT_NE(dynamic_cast<const GridSoftMin*>(op.get()), nullptr);
  op = make_soft_min(x2, x2, CostKind::euclidean, "auto", &used);
  EXPECT_EQ(used, "online");
  op = make_soft_min(x4, x4, CostKind::sqeuclidean, "auto", &used);
  EXPECT_EQ(used, "online");
  const GridPoints small = x2.topRows(10), small4 = x4.topRows(10);
  EXPECT_THROW(make_soft_min(small, small, CostKind::euclidean, "grid"), InputError);
  EXPECT_THROW(make_soft_min(small4, small4, CostKind::sqeuclidean, "grid"), InputError);
  op = make_soft_min(small, small, CostKind::sqeuclidean, "grid", &used);
  EXPECT_EQ(used, "grid");
}

}  // namespace
}  // namespace tokenflow
