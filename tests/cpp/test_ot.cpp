// Sinkhorn: the dense and online operators against each other and the plain reference loop.
#include <gtest/gtest.h>

#include "test_util.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {
namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

TEST(Sinkhorn, DenseOnlineAndReferenceAgree) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (CostKind cost : {CostKind::sqeuclidean, CostKind::euclidean, CostKind::dot}) {
    const RowMatrix x = testing::random_matrix(rng, 70, 3, 1.0), y = testing::random_matrix(rng, 50, 3, 1.0);
    std::uniform_real_distribution<double> uni(0.5, 1.5);
    Eigen::VectorXd a(70), b(50);
    for (auto& v : a) v = uni(rng);
    for (auto& v : b) v = uni(rng);
    a /= a.sum();
    b /= b.sum();
    RowMatrix C(70, 50);
    for (int i = 0; i < 70; ++i)
      for (int j = 0; j < 50; ++j) C(i, j) = pair_cost(cost, &x(i, 0), &y(j, 0), 3);
    SinkhornOptions opt;
    opt.epsilon = 0.3;
    opt.tol = 1e-12;
    opt.want_plan = true;
    const SinkhornResult dense = sinkhorn(DenseSoftMin(C), a, b, opt);
    const SinkhornResult online = sinkhorn(OnlineSoftMin(x, y, cost), a, b, opt);
    const SinkhornResult ref = reference_sinkhorn(C, a, b, opt.epsilon, opt.tol, opt.max_iter);
    ASSERT_TRUE(dense.converged && online.converged && ref.converged);
    // The same iteration in all three; they differ only by the order of summation, so the
    // iterates agree to ~ m u |C| / eps per step (amplified little: Sinkhorn is a contraction).
    EXPECT_LE((dense.plan - online.plan).cwiseAbs().maxCoeff(), 1e-12);
    EXPECT_LE((dense.plan - ref.plan).cwiseAbs().maxCoeff(), 1e-12);
    EXPECT_NEAR(dense.cost, ref.cost, 1e-12 * std::abs(ref.cost) + 1e-14);
    EXPECT_NEAR(dense.objective, ref.objective, 1e-12 * std::abs(ref.objective) + 1e-14);
    EXPECT_LE(std::abs(dense.iterations - ref.iterations), 1);
    // Marginals of the returned plan: columns exact, rows within tol.
    EXPECT_LE((dense.plan.colwise().sum().transpose() - b).cwiseAbs().sum(), 1e-14);
    EXPECT_LE((dense.plan.rowwise().sum() - a).cwiseAbs().sum(), opt.tol);
  }
}

TEST(Sinkhorn, MaxIterReportedHonestly) {
  std::mt19937_64 rng(testing::fresh_seed());
  const RowMatrix x = testing::random_matrix(rng, 30, 2, 1.0);
  const Eigen::VectorXd a = Eigen::VectorXd::Constant(30, 1.0 / 30);
  SinkhornOptions opt;
  opt.epsilon = 0.01;
  opt.tol = 1e-14;
  opt.max_iter = 3;
  const SinkhornResult r = sinkhorn(OnlineSoftMin(x, x, CostKind::sqeuclidean), a, a, opt);
  EXPECT_FALSE(r.converged);
  EXPECT_EQ(r.iterations, 3);
  EXPECT_GT(r.marginal_error, opt.tol);
}

}  // namespace
}  // namespace tokenflow

namespace tokenflow {
namespace {

TEST(ExactOT, PermutationForUniformWeightsAndDuality) {
  // n = m with uniform weights: an optimal plan is a permutation (Birkhoff), the cost equals the
  // dual objective <f, a> + <g, b>, and f_i + g_j <= C_ij everywhere.
  std::mt19937_64 rng(testing::fresh_seed());
  const int n = 40;
  const RowMatrix x = testing::random_matrix(rng, n, 2, 1.0), y = testing::random_matrix(rng, n, 2, 1.0);
  RowMatrix C(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) C(i, j) = pair_cost(CostKind::sqeuclidean, &x(i, 0), &y(j, 0), 2);
  const Eigen::VectorXd a = Eigen::VectorXd::Constant(n, 1.0 / n);
  const ExactOTResult r = exact_ot(C, a, a);
  // Masses are carried in units of 2^-52 (one unit of rounding each), sums of n flows.
  EXPECT_LE((r.plan.rowwise().sum() - a).cwiseAbs().maxCoeff(), 4 * 0x1p-52);
  EXPECT_LE((r.plan.colwise().sum().transpose() - a).cwiseAbs().maxCoeff(), 4 * 0x1p-52);
  EXPECT_EQ((r.plan.array() > 1e-12).count(), n);
  EXPECT_NEAR(r.cost, r.f.dot(a) + r.g.dot(a), 1e-12 * r.cost);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) EXPECT_LE(r.f[i] + r.g[j], C(i, j) + 1e-12);
  // Sinkhorn's cost approaches the exact one from above as epsilon falls.
  SinkhornOptions opt;
  opt.epsilon = 0.01;
  opt.tol = 1e-10;
  const SinkhornResult s = sinkhorn(DenseSoftMin(C), a, a, opt);
  EXPECT_GE(s.cost, r.cost - 1e-12);
  EXPECT_LE(s.cost, 1.1 * r.cost);
}

}  // namespace
}  // namespace tokenflow
