// The plan's adjoint system (tokenflow/plan_adjoint.hpp): the Schur complement against the full
// system, the equations themselves, the gauge, batches against single calls, and bad shapes.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "test_util.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/plan_adjoint.hpp"

namespace tokenflow {
namespace {

using testing::kUnit64;

struct Problem {
  PlanMatrix plan, weighted;  // pi and P = G o pi
};

// A converged plan of a random problem: pi_ij = a_i b_j exp((f_i + g_j - |x_i - y_j|^2) / eps) for
// clouds in R^2 (x anisotropic: axes 1 and `spread`, y shifted by 0.5), weights from U(0.5, 1.5)
// (sum 1), (f, g) from plain log-domain Sinkhorn until the marginals are a and b to 1e-13 in l1
// (or 10^5 iterations). G ~ N(0, 1), P = G o pi.
Problem random_problem(std::mt19937_64& rng, Eigen::Index n, Eigen::Index m, double eps, double spread) {
  Eigen::MatrixXd x = testing::random_matrix(rng, n, 2, 1.0), y = testing::random_matrix(rng, m, 2, 1.0);
  x.col(1) *= spread;
  y.array() += 0.5;
  const Eigen::VectorXd a = testing::random_weights(rng, n), b = testing::random_weights(rng, m);
  Eigen::MatrixXd C(n, m);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j) C(i, j) = (x.row(i) - y.row(j)).squaredNorm();
  // softmin(h, w)_k = -eps log sum_l w_l exp((h_l - C_kl) / eps) over l, with a log-sum-exp shift.
  const auto softmin = [eps](const Eigen::MatrixXd& cost, const Eigen::VectorXd& h, const Eigen::VectorXd& w) {
    Eigen::VectorXd out(cost.rows());
    for (Eigen::Index k = 0; k < cost.rows(); ++k) {
      const Eigen::ArrayXd e = w.array().log() + (h.array() - cost.row(k).transpose().array()) / eps;
      const double top = e.maxCoeff();
      out[k] = -eps * (top + std::log((e - top).exp().sum()));
    }
    return out;
  };
  Eigen::VectorXd f = Eigen::VectorXd::Zero(n), g(m);
  Problem p{PlanMatrix(n, m), PlanMatrix(n, m)};
  for (int it = 0; it < 100000; ++it) {
    g = softmin(C.transpose(), f, a);
    f = softmin(C, g, b);
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j < m; ++j) p.plan(i, j) = a[i] * b[j] * std::exp((f[i] + g[j] - C(i, j)) / eps);
    if ((p.plan.colwise().sum().transpose() - b).lpNorm<1>() < 1e-13) break;
  }
  p.weighted = testing::random_matrix(rng, n, m, 1.0).cwiseProduct(p.plan);
  return p;
}

// The condition number of H without its last row and column (the system both routes solve).
double reduced_condition(const PlanMatrix& plan) {
  const Eigen::Index n = plan.rows(), m = plan.cols(), size = n + m - 1;
  Eigen::MatrixXd H = Eigen::MatrixXd::Zero(size, size);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j) {
      H(i, i) += plan(i, j);
      if (j == m - 1) continue;
      H(n + j, n + j) += plan(i, j);
      H(i, n + j) = H(n + j, i) = plan(i, j);
    }
  const Eigen::VectorXd ev = linalg::symmetric_eigenvalues(H);
  return ev.cwiseAbs().maxCoeff() / ev.cwiseAbs().minCoeff();
}

Eigen::VectorXd stacked(const PlanAdjoint& w) {
  Eigen::VectorXd z(w.w1.size() + w.w2.size());
  z << w.w1, w.w2;
  return z;
}

TEST(PlanAdjoint, SchurComplementMatchesTheFullSystem) {
  // Both routes are backward stable for the same nonsingular system H' z = r (H' = H without its
  // last row and column). The Schur route's extra roundings: S = diag(b) - B^T B with B^T B <=
  // diag(b) in the PSD order, so each entry of S is off by (n + 2) u max(b) <= (n + 2) u |H'|; its
  // right side P^T 1 - pi^T (P 1 / a) by (n + 2) u 2 max(b) max|G|; and S's condition is at most
  // H''s (S^-1 is a principal block of H'^-1, and S <= H'_22). So the two solutions differ by at
  // most cond(H') (n + m) u times (|z|_2 + sqrt(n + m) max|G|), with a factor 16 for the
  // back-substitution w1 = (P 1 - pi w2) / a and the factorizations' own constants.
  std::mt19937_64 rng(testing::fresh_seed());
  const struct {
    Eigen::Index n, m;
    double eps, spread;
  } cases[] = {{40, 25, 1.0, 1.0}, {25, 40, 1.0, 1.0}, {30, 30, 0.1, 3.0}, {60, 1, 0.5, 1.0},
               {1, 50, 0.5, 1.0}, {1, 1, 1.0, 1.0},  {200, 150, 0.2, 0.3}, {150, 220, 0.5, 5.0}};
  for (const auto& c : cases) {
    const Problem p = random_problem(rng, c.n, c.m, c.eps, c.spread);
    const PlanAdjoint fast = plan_adjoint(p.plan, p.weighted), ref = reference_plan_adjoint(p.plan, p.weighted);
    ASSERT_EQ(fast.w1.size(), c.n);
    ASSERT_EQ(fast.w2.size(), c.m);
    EXPECT_EQ(fast.w2[c.m - 1], 0.0) << "the gauge w2[m - 1] = 0";
    const double kappa = reduced_condition(p.plan);
    const double max_g = (p.weighted.array() / p.plan.array()).abs().maxCoeff();
    const Eigen::VectorXd z = stacked(ref);
    const double bound = 16.0 * kappa * static_cast<double>(c.n + c.m) * kUnit64 *
                         (z.norm() + std::sqrt(static_cast<double>(c.n + c.m)) * max_g);
    EXPECT_LE((stacked(fast) - z).norm(), bound)
        << c.n << " x " << c.m << ", eps " << c.eps << ", cond " << kappa;
  }
}

TEST(PlanAdjoint, SolvesItsEquations) {
  // a o w1 + pi w2 = P 1 and b o w2 + pi^T w1 = P^T 1 with a = pi 1, b = pi^T 1: the residual of a
  // backward-stable solve is (n + m) u |H| |z| (plus the right side's own sums), entry by entry.
  std::mt19937_64 rng(testing::fresh_seed());
  for (const auto& [n, m] : {std::pair<Eigen::Index, Eigen::Index>{120, 70}, {70, 120}}) {
    const Problem p = random_problem(rng, n, m, 0.5, 2.0);
    const PlanAdjoint w = plan_adjoint(p.plan, p.weighted);
    const Eigen::VectorXd a = p.plan.rowwise().sum(), b = p.plan.colwise().sum().transpose();
    const Eigen::VectorXd r1 = a.cwiseProduct(w.w1) + p.plan * w.w2 - p.weighted.rowwise().sum();
    const Eigen::VectorXd r2 = b.cwiseProduct(w.w2) + p.plan.transpose() * w.w1 - p.weighted.colwise().sum().transpose();
    const double scale = stacked(w).cwiseAbs().maxCoeff() + (p.weighted.array() / p.plan.array()).abs().maxCoeff();
    const double tol = 64.0 * static_cast<double>(n + m) * kUnit64 * scale;
    for (Eigen::Index i = 0; i < n; ++i) EXPECT_LE(std::abs(r1[i]), tol * 2.0 * a[i]) << "row " << i;
    for (Eigen::Index j = 0; j < m; ++j) EXPECT_LE(std::abs(r2[j]), tol * 2.0 * b[j]) << "column " << j;
  }
}

TEST(PlanAdjoint, BatchIsEachProblemAloneBitForBitAtAnyThreadCount) {
  std::mt19937_64 rng(testing::fresh_seed());
  std::vector<PlanMatrix> plans, weighted;
  std::uniform_int_distribution<int> size(1, 90);
  for (int k = 0; k < 9; ++k) {
    Problem p = random_problem(rng, size(rng), size(rng), 0.4, 1.5);
    plans.push_back(std::move(p.plan));
    weighted.push_back(std::move(p.weighted));
  }
  const std::vector<PlanView> plan_views(plans.begin(), plans.end()), weighted_views(weighted.begin(), weighted.end());
  const int threads = omp_get_max_threads();
  const std::vector<PlanAdjoint> batch = plan_adjoint_batch(plan_views, weighted_views);
  omp_set_num_threads(1);
  const std::vector<PlanAdjoint> serial = plan_adjoint_batch(plan_views, weighted_views);
  omp_set_num_threads(threads);
  ASSERT_EQ(batch.size(), plans.size());
  for (std::size_t k = 0; k < plans.size(); ++k) {
    const PlanAdjoint alone = plan_adjoint_batch({PlanView(plans[k])}, {PlanView(weighted[k])})[0];
    EXPECT_EQ(stacked(batch[k]), stacked(alone)) << "problem " << k;
    EXPECT_EQ(stacked(batch[k]), stacked(serial[k])) << "problem " << k;
    // The same problem read from memory one double off Eigen's alignment (a numpy view, say).
    const Eigen::Index n = plans[k].rows(), m = plans[k].cols();
    std::vector<double> storage(static_cast<std::size_t>(2 * n * m + 1));
    Eigen::Map<PlanMatrix> shifted_plan(storage.data() + 1, n, m), shifted_weighted(storage.data() + 1 + n * m, n, m);
    shifted_plan = plans[k];
    shifted_weighted = weighted[k];
    EXPECT_EQ(stacked(plan_adjoint(shifted_plan, shifted_weighted)), stacked(alone)) << "problem " << k;
  }
}

TEST(PlanAdjoint, RejectsBadShapesAndEmptyRows) {
  std::mt19937_64 rng(testing::fresh_seed());
  const Problem p = random_problem(rng, 5, 4, 1.0, 1.0);
  EXPECT_THROW(plan_adjoint(p.plan, PlanMatrix::Zero(5, 3)), std::invalid_argument);
  EXPECT_THROW(plan_adjoint(PlanMatrix(0, 4), PlanMatrix(0, 4)), std::invalid_argument);
  PlanMatrix holed = p.plan;
  holed.row(2).setZero();
  EXPECT_THROW(plan_adjoint(holed, p.weighted), std::invalid_argument);
  EXPECT_THROW(plan_adjoint_batch({PlanView(p.plan)}, {}), std::invalid_argument);
  for (const double bad : {-1e-300, std::nan(""), std::numeric_limits<double>::infinity()}) {
    PlanMatrix spoiled = p.plan;
    spoiled(3, 1) = bad;
    EXPECT_THROW(plan_adjoint(spoiled, p.weighted), std::invalid_argument) << bad;
    try {  // a batch names the problem that failed
      plan_adjoint_batch({PlanView(p.plan), PlanView(spoiled)}, {PlanView(p.weighted), PlanView(p.weighted)});
      ADD_FAILURE() << "no throw for " << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("problem 1:"), std::string::npos) << e.what();
    }
  }
}

// D = pi o (w1 + w2^T) - P from the reference's potentials, the gradient both routes compute.
PlanMatrix reference_cost_gradient(const Problem& p) {
  const PlanAdjoint ref = reference_plan_adjoint(p.plan, p.weighted);
  PlanMatrix D(p.plan.rows(), p.plan.cols());
  for (Eigen::Index i = 0; i < D.rows(); ++i)
    for (Eigen::Index j = 0; j < D.cols(); ++j) D(i, j) = p.plan(i, j) * (ref.w1[i] + ref.w2[j]) - p.weighted(i, j);
  return D;
}

// On ordinary plans the reference's potentials are accurate to the bound of
// SchurComplementMatchesTheFullSystem (cond (n + m) u (|z| + sqrt(n + m) max|G|), times 16), so its
// D to max(pi) times twice that (w1_i + w2_j) plus the rounding of its own sum, (n + m) u max|P|.
// The tree's route is an exact rewriting of the same system (the cut basis): the same bound holds
// for it with its own factorization's constants (included in the 16).
double cost_gradient_bound(const Problem& p) {
  const double kappa = reduced_condition(p.plan);
  const double max_g = (p.weighted.array() / p.plan.array()).abs().maxCoeff();
  const Eigen::VectorXd z = stacked(reference_plan_adjoint(p.plan, p.weighted));
  const double n_m = static_cast<double>(p.plan.rows() + p.plan.cols());
  return 2.0 * p.plan.maxCoeff() * 16.0 * kappa * n_m * kUnit64 * (z.norm() + std::sqrt(n_m) * max_g) +
         n_m * kUnit64 * p.weighted.cwiseAbs().maxCoeff();
}

TEST(PlanCostGradient, BothRoutesMatchTheFullSystem) {
  std::mt19937_64 rng(testing::fresh_seed());
  const struct {
    Eigen::Index n, m;
    double eps, spread;
  } cases[] = {{12, 9, 1.0, 1.0}, {9, 12, 0.3, 2.0}, {20, 20, 0.1, 3.0}, {15, 1, 0.5, 1.0}, {1, 7, 0.5, 1.0},
               {1, 1, 1.0, 1.0}, {40, 30, 0.2, 0.3}};
  for (const auto& c : cases) {
    const Problem p = random_problem(rng, c.n, c.m, c.eps, c.spread);
    const PlanMatrix ref = reference_cost_gradient(p);
    const double bound = cost_gradient_bound(p), n_m = static_cast<double>(c.n + c.m);
    for (const auto& [name, D] : {std::pair<const char*, PlanMatrix>{"hybrid", plan_cost_gradient(p.plan, p.weighted)},
                                  {"tree", plan_cost_gradient_by_tree(p.plan, p.weighted)}}) {
      ASSERT_EQ(D.rows(), c.n);
      ASSERT_EQ(D.cols(), c.m);
      EXPECT_LE((D - ref).cwiseAbs().maxCoeff(), bound) << name << ", " << c.n << " x " << c.m;
      // The system's equations: D's rows and columns sum to 0 (to the rounding of the sums).
      const double sums = 4.0 * n_m * kUnit64 * (D.cwiseAbs().sum() + p.weighted.cwiseAbs().sum());
      EXPECT_LE(D.rowwise().sum().cwiseAbs().maxCoeff(), sums) << name;
      EXPECT_LE(D.colwise().sum().cwiseAbs().maxCoeff(), sums) << name;
    }
  }
}

TEST(PlanCostGradient, DisconnectedPlanCarriesNoFlowBetweenItsBlocks) {
  // Entries that underflowed to 0 can split the plan into blocks; a weighted matrix whose blocks
  // balance on their own gives the blocks' own gradients (each solved as a problem alone) and 0
  // between them (no edge crosses, so no flow does).
  std::mt19937_64 rng(testing::fresh_seed());
  const Problem top = random_problem(rng, 5, 4, 0.5, 1.0), bottom = random_problem(rng, 3, 6, 0.5, 1.0);
  Problem p{PlanMatrix::Zero(8, 10), PlanMatrix::Zero(8, 10)};
  p.plan.topLeftCorner(5, 4) = top.plan;
  p.plan.bottomRightCorner(3, 6) = bottom.plan;
  p.weighted.topLeftCorner(5, 4) = top.weighted;
  p.weighted.bottomRightCorner(3, 6) = bottom.weighted;
  const PlanMatrix D = plan_cost_gradient_by_tree(p.plan, p.weighted);
  const PlanMatrix Dt = reference_cost_gradient(top), Db = reference_cost_gradient(bottom);
  EXPECT_LE((D.topLeftCorner(5, 4) - Dt).cwiseAbs().maxCoeff(), cost_gradient_bound(top));
  EXPECT_LE((D.bottomRightCorner(3, 6) - Db).cwiseAbs().maxCoeff(), cost_gradient_bound(bottom));
  EXPECT_EQ(D.topRightCorner(5, 6).cwiseAbs().maxCoeff(), 0.0);
  EXPECT_EQ(D.bottomLeftCorner(3, 4).cwiseAbs().maxCoeff(), 0.0);
}

TEST(PlanCostGradient, BatchIsEachProblemAloneAndRejectsBadInput) {
  std::mt19937_64 rng(testing::fresh_seed());
  std::vector<PlanMatrix> plans, weighted;
  for (int k = 0; k < 5; ++k) {
    Problem p = random_problem(rng, 3 + 4 * k, 11 - 2 * k, 0.4, 1.5);
    plans.push_back(std::move(p.plan));
    weighted.push_back(std::move(p.weighted));
  }
  const std::vector<PlanView> pv(plans.begin(), plans.end()), wv(weighted.begin(), weighted.end());
  const std::vector<PlanMatrix> batch = plan_cost_gradient_batch(pv, wv);
  for (std::size_t k = 0; k < plans.size(); ++k) EXPECT_EQ(batch[k], plan_cost_gradient(plans[k], weighted[k])) << k;
  EXPECT_THROW(plan_cost_gradient(plans[0], PlanMatrix::Zero(2, 2)), std::invalid_argument);
  EXPECT_THROW(plan_cost_gradient_by_tree(plans[0], PlanMatrix::Zero(2, 2)), std::invalid_argument);
  PlanMatrix holed = plans[1];
  holed.col(0).setZero();
  EXPECT_THROW(plan_cost_gradient_by_tree(holed, weighted[1]), std::invalid_argument);
  EXPECT_THROW(plan_cost_gradient_batch(pv, {}), std::invalid_argument);
}

}  // namespace
}  // namespace tokenflow
