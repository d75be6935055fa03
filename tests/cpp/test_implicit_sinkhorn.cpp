// The converged Sinkhorn layer and its implicit backward (tokenflow/layers.hpp): against the
// reference solve of the full (n + m) system, against the unrolled layer's backward through many
// iterations, and against finite differences of the loss through the solve.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"
#include "tokenflow/gradient_check.hpp"
#include "tokenflow/layers.hpp"

namespace tokenflow {
namespace {

using testing::kUnit64;
using RowMatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct Problem {
  int n = 0, m = 0;
  double eps = 0.0;
  RowMatrixD cost;
  Eigen::VectorXd log_a, log_b;
  RowMatrixD G;  // a random upstream gradient d loss / d log_plan
};

// The cost -<Q, K> / sqrt(k) of the model (|c| of order 1), weights from U(0.5, 1.5).
Problem random_problem(std::mt19937_64& rng, int n, int m, double eps) {
  Problem p{n, m, eps, {}, {}, {}, {}};
  const Eigen::MatrixXd Q = testing::random_matrix(rng, n, 3, 1.0), K = testing::random_matrix(rng, m, 3, 1.0);
  p.cost = -(Q * K.transpose()) / std::sqrt(3.0);
  p.log_a = testing::random_weights(rng, n).array().log();
  p.log_b = testing::random_weights(rng, m).array().log();
  p.G = testing::random_matrix(rng, n, m, 1.0);
  return p;
}

RowMatrixD converged_log_plan(const Problem& p, double tol, nn::ConvergedSinkhornStats* stats = nullptr) {
  RowMatrixD log_plan(p.n, p.m);
  const SinkhornOptions options{.epsilon = p.eps,
                                .tol = tol,
                                .max_iter = 100000,
                                .epsilon_start = nn::kLearnedCostEpsilonStart};
  const auto s = nn::sinkhorn_converged_forward(log_plan.data(), p.cost.data(), p.log_a.data(),
                                                p.log_b.data(), options, p.n, p.m);
  if (stats) *stats = s;
  return log_plan;
}

// The condition number of the Schur system the backward solves (test_util.hpp): the amplification
// of its rounding (backward-stable LDLT: (m + 4) u |S| relative residual).
double schur_condition(const RowMatrixD& log_plan) {
  return testing::schur_condition(log_plan.data(), log_plan.rows(), log_plan.cols());
}

TEST(ImplicitSinkhorn, BackwardMatchesTheFullSystem) {
  // Both solve the same consistent system, one by the Schur complement and LDLT, the other by a
  // complete orthogonal decomposition of the full (n + m) matrix: their alpha_i + beta_j agree
  // to about kappa (n + m) u times the size of the solution, so dcost = (P (alpha + beta) -
  // G) / eps agrees to kappa (n + m) u (|G|_max + 1) / eps per entry, with a factor 16 for the
  // right-hand sides' and products' own roundings.
  std::mt19937_64 rng(testing::fresh_seed());
  for (double eps : {0.3, 1.0}) {
    const Problem p = random_problem(rng, 7, 5, eps);
    const RowMatrixD log_plan = converged_log_plan(p, 1e-12);
    RowMatrixD fast = RowMatrixD::Zero(p.n, p.m), ref = RowMatrixD::Zero(p.n, p.m);
    nn::sinkhorn_implicit_backward(fast.data(), p.G.data(), log_plan.data(), p.eps, p.n, p.m);
    nn::reference::sinkhorn_implicit_backward(ref.data(), p.G.data(), log_plan.data(), p.eps, p.n, p.m);
    const double kappa = schur_condition(log_plan);
    const double bound = 16.0 * kappa * (p.n + p.m) * kUnit64 * (p.G.cwiseAbs().maxCoeff() + 1.0) / eps;
    EXPECT_LE((fast - ref).cwiseAbs().maxCoeff(), bound) << "eps " << eps << ", kappa " << kappa;
    // The gauge: the gradient of a cost change that moves no plan entry, c_ij + s_i + t_j (it
    // only shifts the potentials), is zero: sum_j dcost_ij = 0 and sum_i dcost_ij = 0.
    EXPECT_LE(fast.rowwise().sum().cwiseAbs().maxCoeff(), 1e3 * bound);
    EXPECT_LE(fast.colwise().sum().cwiseAbs().maxCoeff(), 1e3 * bound);
  }
}

TEST(ImplicitSinkhorn, UnrolledBackwardThroughManyIterationsConvergesToIt) {
  // The unrolled layer differentiates its iterates; as iterations grow they converge to the
  // fixed point at Sinkhorn's rate, at most tanh(R / (4 eps))^2 per iteration (Birkhoff-Hopf, R =
  // the oscillation of the cost), and so do their derivatives. With R <~ 6 and eps = 1 that is
  // <= 0.82 per iteration: 400 iterations leave < 1e-34, so the difference is rounding: 400
  // iterations of (n + m)-term sums, u (n + m) per step on terms of size |G| / eps, amplified by
  // the contraction's 1 / (1 - rate) <= 6 and by kappa at the end.
  std::mt19937_64 rng(testing::fresh_seed());
  const Problem p = random_problem(rng, 6, 8, 1.0);
  const RowMatrixD log_plan = converged_log_plan(p, 1e-14);
  RowMatrixD implicit = RowMatrixD::Zero(p.n, p.m);
  nn::sinkhorn_implicit_backward(implicit.data(), p.G.data(), log_plan.data(), p.eps, p.n, p.m);
  constexpr int iters = 400;
  std::vector<double> lp(p.n * p.m), rw(iters * p.n * p.m), cw(iters * p.n * p.m), u(p.n), v(p.m),
      scratch(p.n + 2 * p.m);
  nn::sinkhorn_forward(lp.data(), rw.data(), cw.data(), u.data(), v.data(), p.cost.data(), p.log_a.data(),
                       p.log_b.data(), p.eps, iters, p.n, p.m);
  RowMatrixD unrolled = RowMatrixD::Zero(p.n, p.m);
  nn::sinkhorn_backward(unrolled.data(), scratch.data(), p.G.data(), rw.data(), cw.data(), p.eps, iters, p.n, p.m);
  const double scale = p.G.cwiseAbs().maxCoeff() / p.eps;
  const double bound = 6.0 * iters * (p.n + p.m) * kUnit64 * scale * schur_condition(log_plan);
  EXPECT_LE((unrolled - implicit).cwiseAbs().maxCoeff(), bound) << "scale " << scale;
}

TEST(ImplicitSinkhorn, LossGradientMatchesFiniteDifferencesThroughTheSolve) {
  // f(c) = <G, log_plan(c)>, a linear loss of the converged plan. Its evaluation error: rounding
  // along the solve (the last iteration's sums, (n + m) u per entry, times |G|) plus the solve's
  // own stopping error, which moves log_plan by at most about kappa times the marginal error
  // (the plan is the exact plan of marginals within tol of (a, b)); at tol 1e-14 both are of
  // the order of kappa 1e-14 |G|_1.
  std::mt19937_64 rng(testing::fresh_seed());
  const Problem p = random_problem(rng, 5, 4, 0.7);
  const double tol = 1e-14;
  auto f = [&](const Eigen::VectorXd& c) {
    Problem q = p;
    q.cost = Eigen::Map<const RowMatrixD>(c.data(), p.n, p.m);
    return (p.G.array() * converged_log_plan(q, tol).array()).sum();
  };
  const RowMatrixD log_plan = converged_log_plan(p, tol);
  RowMatrixD grad = RowMatrixD::Zero(p.n, p.m);
  nn::sinkhorn_implicit_backward(grad.data(), p.G.data(), log_plan.data(), p.eps, p.n, p.m);
  const Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(p.cost.data(), p.n * p.m);
  const Eigen::VectorXd g = Eigen::Map<const Eigen::VectorXd>(grad.data(), p.n * p.m);
  GradientCheckOptions opt;
  opt.f_scale = p.G.cwiseAbs().sum() * (1.0 + log_plan.cwiseAbs().maxCoeff());
  opt.function_error = schur_condition(log_plan) * (tol + (p.n + p.m) * kUnit64);
  const GradientCheckResult r = check_gradient(f, x, g, opt);
  EXPECT_TRUE(r.ok) << r.report();
  EXPECT_EQ(r.coordinates_checked, p.n * p.m);
}

TEST(ImplicitSinkhorn, ForwardIsTheOTLoopsPlanAndReportsItsSolve) {
  std::mt19937_64 rng(testing::fresh_seed());
  const Problem p = random_problem(rng, 9, 7, 0.5);
  nn::ConvergedSinkhornStats stats;
  const RowMatrixD plan = converged_log_plan(p, 1e-11, &stats).array().exp();
  EXPECT_TRUE(stats.converged);
  EXPECT_LT(stats.marginal_error, 1e-11);
  const Eigen::VectorXd a = p.log_a.array().exp(), b = p.log_b.array().exp();
  // Columns exact (an n-term sum's rounding), rows within tol.
  EXPECT_LE((plan.colwise().sum().transpose() - b).cwiseAbs().maxCoeff(), 4 * (p.n + 8) * kUnit64);
  // The solve's error plus the rounding of forming the plan from log_plan and summing its rows.
  EXPECT_LE((plan.rowwise().sum() - a).cwiseAbs().sum(), stats.marginal_error + 8.0 * p.n * p.m * kUnit64);
}

}  // namespace
}  // namespace tokenflow
