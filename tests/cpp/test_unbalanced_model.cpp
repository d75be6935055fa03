// The Sinkhorn Transformer's unbalanced final layer (model.marginal_penalty; layers.hpp): the
// unrolled layer with the damping tau against its plain reference and finite differences, the
// converged layer's implicit backward against the full system and finite differences, and the
// unbalanced plan adjoint against the dense solve.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "test_util.hpp"
#include "tokenflow/gradient_check.hpp"
#include "tokenflow/layers.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/plan_adjoint.hpp"

namespace tokenflow {
namespace {

using testing::kUnit64;
using RowMatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct LayerProblem {
  int n = 0, m = 0;
  double eps = 0.0, rho = 0.0;
  RowMatrixD cost, G;
  Eigen::VectorXd log_a, log_b;
};

// The model's cost -<Q, K> / sqrt(k) (|c| of order 1), weights from U(0.5, 1.5) summing to 1, rho
// log-uniform in [0.1, 10].
LayerProblem random_layer_problem(std::mt19937_64& rng, int n, int m, double eps) {
  LayerProblem p;
  p.n = n;
  p.m = m;
  p.eps = eps;
  const Eigen::MatrixXd Q = testing::random_matrix(rng, n, 3, 1.0), K = testing::random_matrix(rng, m, 3, 1.0);
  p.cost = -(Q * K.transpose()) / std::sqrt(3.0);
  p.log_a = testing::random_weights(rng, n).array().log();
  p.log_b = testing::random_weights(rng, m).array().log();
  p.G = testing::random_matrix(rng, n, m, 1.0);
  std::uniform_real_distribution<double> log_rho(std::log(0.1), std::log(10.0));
  p.rho = std::exp(log_rho(rng));
  return p;
}

double tau_of(const LayerProblem& p) { return std::isinf(p.rho) ? 1.0 : p.rho / (p.rho + p.eps); }

RowMatrixD unrolled_log_plan(const LayerProblem& p, const RowMatrixD& cost, int iters) {
  RowMatrixD out(p.n, p.m);
  std::vector<double> rw(static_cast<std::size_t>(iters * p.n * p.m)), cw(rw.size()), u(p.n), v(p.m);
  nn::sinkhorn_forward(out.data(), rw.data(), cw.data(), u.data(), v.data(), cost.data(), p.log_a.data(),
                       p.log_b.data(), p.eps, iters, p.n, p.m, tau_of(p));
  return out;
}

TEST(UnbalancedSinkhornLayer, UnrolledMatchesTheReference) {
  // The same iterations in a different order of summation: each half step's log-sum-exp over n or
  // m terms of size |C| / eps + |log w| + |potential| carries (n + m + 8) u of that size, and the
  // damped maps contract (factor tau), so the errors add over the iterations: forward within
  // iters (n + m + 8) u S, S the terms' size; backward twice that, times |dout| / eps.
  std::mt19937_64 rng(testing::fresh_seed());
  constexpr int iters = 9;
  const LayerProblem p = random_layer_problem(rng, 5, 6, 0.6);
  std::vector<double> uh(iters * p.n), vh(iters * p.m), ref(p.n * p.m), ref_grad(p.n * p.m, 0.0);
  nn::reference::sinkhorn_forward(ref.data(), uh.data(), vh.data(), p.cost.data(), p.log_a.data(), p.log_b.data(),
                                  p.eps, iters, p.n, p.m, tau_of(p));
  nn::reference::sinkhorn_backward(ref_grad.data(), p.G.data(), uh.data(), vh.data(), p.cost.data(), p.log_a.data(),
                                   p.log_b.data(), p.eps, iters, p.n, p.m, tau_of(p));
  const RowMatrixD fast = unrolled_log_plan(p, p.cost, iters);
  std::vector<double> rw(iters * p.n * p.m), cw(rw.size()), u(p.n), v(p.m), lp(p.n * p.m), scratch(p.n + 2 * p.m),
      grad(p.n * p.m, 0.0);
  nn::sinkhorn_forward(lp.data(), rw.data(), cw.data(), u.data(), v.data(), p.cost.data(), p.log_a.data(),
                       p.log_b.data(), p.eps, iters, p.n, p.m, tau_of(p));
  nn::sinkhorn_backward(grad.data(), scratch.data(), p.G.data(), rw.data(), cw.data(), p.eps, iters, p.n, p.m,
                        tau_of(p));
  const double S = p.cost.cwiseAbs().maxCoeff() / p.eps + p.log_a.cwiseAbs().maxCoeff() +
                   p.log_b.cwiseAbs().maxCoeff() + Eigen::Map<Eigen::VectorXd>(u.data(), p.n).cwiseAbs().maxCoeff() +
                   Eigen::Map<Eigen::VectorXd>(v.data(), p.m).cwiseAbs().maxCoeff() + 1.0;
  const double path = iters * (p.n + p.m + 8) * kUnit64 * S;
  for (int k = 0; k < p.n * p.m; ++k) {
    EXPECT_NEAR(fast.data()[k], ref[k], path) << k;
    EXPECT_NEAR(grad[k], ref_grad[k], 2.0 * path * p.G.cwiseAbs().maxCoeff() * (p.n + p.m) / p.eps) << k;
  }
  // tau changes the layer: the damped plan is not the balanced one.
  LayerProblem balanced = p;
  balanced.rho = INFINITY;
  EXPECT_GT((unrolled_log_plan(balanced, p.cost, iters) - fast).cwiseAbs().maxCoeff(), 1e3 * path);
}

TEST(UnbalancedSinkhornLayer, UnrolledGradientMatchesFiniteDifferences) {
  // f(c) = <G, log_plan(c)> through 9 damped iterations: smooth, evaluated to (n + m + 8) u S per
  // entry per iteration (above), summed against |G|_1.
  std::mt19937_64 rng(testing::fresh_seed());
  constexpr int iters = 9;
  const LayerProblem p = random_layer_problem(rng, 4, 5, 0.8);
  auto f = [&](const Eigen::VectorXd& c) {
    const RowMatrixD cost = Eigen::Map<const RowMatrixD>(c.data(), p.n, p.m);
    return (p.G.array() * unrolled_log_plan(p, cost, iters).array()).sum();
  };
  std::vector<double> rw(iters * p.n * p.m), cw(rw.size()), u(p.n), v(p.m), lp(p.n * p.m), scratch(p.n + 2 * p.m);
  RowMatrixD grad = RowMatrixD::Zero(p.n, p.m);
  nn::sinkhorn_forward(lp.data(), rw.data(), cw.data(), u.data(), v.data(), p.cost.data(), p.log_a.data(),
                       p.log_b.data(), p.eps, iters, p.n, p.m, tau_of(p));
  nn::sinkhorn_backward(grad.data(), scratch.data(), p.G.data(), rw.data(), cw.data(), p.eps, iters, p.n, p.m,
                        tau_of(p));
  const Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(p.cost.data(), p.n * p.m);
  const Eigen::VectorXd g = Eigen::Map<const Eigen::VectorXd>(grad.data(), p.n * p.m);
  GradientCheckOptions opt;
  opt.f_scale = p.G.cwiseAbs().sum() * (1.0 + Eigen::Map<Eigen::VectorXd>(lp.data(), p.n * p.m).cwiseAbs().maxCoeff());
  opt.function_error = iters * (p.n + p.m + 8) * kUnit64 * (p.cost.cwiseAbs().maxCoeff() / p.eps + 8.0);
  const GradientCheckResult r = check_gradient(f, x, g, opt);
  EXPECT_TRUE(r.ok) << r.report();
}

// tol 1e-14 can lie below the rounding floor of a problem: the solve then stops at the floor
// (not "converged"); *achieved keeps the largest marginal error reached, which the bounds use.
RowMatrixD converged_unbalanced_log_plan(const LayerProblem& p, const RowMatrixD& cost, double tol,
                                         double* achieved = nullptr) {
  RowMatrixD log_plan(p.n, p.m);
  SinkhornOptions options{.epsilon = p.eps, .tol = tol, .max_iter = 100000,
                          .epsilon_start = nn::kLearnedCostEpsilonStart};
  options.marginal_penalty = p.rho;
  const auto s = nn::sinkhorn_converged_forward(log_plan.data(), cost.data(), p.log_a.data(), p.log_b.data(), options,
                                                p.n, p.m);
  if (achieved != nullptr) {
    EXPECT_TRUE(std::isfinite(s.marginal_error));
    *achieved = std::max(*achieved, s.marginal_error);
  } else {
    EXPECT_TRUE(s.converged);
  }
  return log_plan;
}

// The condition of H_kappa (dense, test sizes): the amplification of the solves' rounding.
double unbalanced_adjoint_condition(const RowMatrixD& plan, double kappa) {
  const Eigen::Index n = plan.rows(), m = plan.cols();
  Eigen::MatrixXd H = Eigen::MatrixXd::Zero(n + m, n + m);
  H.topRightCorner(n, m) = plan;
  H.bottomLeftCorner(m, n) = plan.transpose();
  H.diagonal().head(n) = kappa * plan.rowwise().sum();
  H.diagonal().tail(m) = kappa * plan.colwise().sum().transpose();
  const Eigen::VectorXd ev = linalg::symmetric_eigenvalues(H);
  return ev.maxCoeff() / ev.minCoeff();
}

TEST(UnbalancedSinkhornLayer, ImplicitBackwardMatchesTheFullSystem) {
  // The Schur complement by Cholesky against the full (n + m) system: both backward stable, so
  // alpha_i + beta_j agree to cond(H_kappa) (n + m) u times the solution's size, and dcost to that
  // times (|G| + 1) / eps, with 16 for the right sides' and products' own roundings.
  std::mt19937_64 rng(testing::fresh_seed());
  for (double eps : {0.3, 1.0}) {
    const LayerProblem p = random_layer_problem(rng, 7, 5, eps);
    const RowMatrixD log_plan = converged_unbalanced_log_plan(p, p.cost, 1e-12);
    RowMatrixD fast = RowMatrixD::Zero(p.n, p.m), ref = RowMatrixD::Zero(p.n, p.m);
    nn::sinkhorn_implicit_backward(fast.data(), p.G.data(), log_plan.data(), p.eps, p.n, p.m, p.rho);
    nn::reference::sinkhorn_implicit_backward(ref.data(), p.G.data(), log_plan.data(), p.eps, p.n, p.m, p.rho);
    const double cond = unbalanced_adjoint_condition(log_plan.array().exp().matrix(), 1.0 + eps / p.rho);
    const double bound = 16.0 * cond * (p.n + p.m) * kUnit64 * (p.G.cwiseAbs().maxCoeff() + 1.0) / eps;
    EXPECT_LE((fast - ref).cwiseAbs().maxCoeff(), bound) << "eps " << eps << ", rho " << p.rho << ", cond " << cond;
  }
}

TEST(UnbalancedSinkhornLayer, ImplicitGradientMatchesFiniteDifferencesThroughTheSolve) {
  // f(c) = <G, log_plan(c)> of the converged unbalanced plan: its evaluation error is the solve's
  // (tol 1e-14 on the marginals, moving log_plan by about cond(H_kappa) tol) plus rounding.
  std::mt19937_64 rng(testing::fresh_seed());
  const LayerProblem p = random_layer_problem(rng, 5, 4, 0.7);
  const double tol = 1e-14;
  double achieved = tol;
  auto f = [&](const Eigen::VectorXd& c) {
    const RowMatrixD cost = Eigen::Map<const RowMatrixD>(c.data(), p.n, p.m);
    return (p.G.array() * converged_unbalanced_log_plan(p, cost, tol, &achieved).array()).sum();
  };
  const RowMatrixD log_plan = converged_unbalanced_log_plan(p, p.cost, tol, &achieved);
  RowMatrixD grad = RowMatrixD::Zero(p.n, p.m);
  nn::sinkhorn_implicit_backward(grad.data(), p.G.data(), log_plan.data(), p.eps, p.n, p.m, p.rho);
  const Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(p.cost.data(), p.n * p.m);
  const Eigen::VectorXd g = Eigen::Map<const Eigen::VectorXd>(grad.data(), p.n * p.m);
  GradientCheckOptions opt;
  opt.f_scale = p.G.cwiseAbs().sum() * (1.0 + log_plan.cwiseAbs().maxCoeff());
  opt.function_error =
      unbalanced_adjoint_condition(log_plan.array().exp().matrix(), 1.0 + p.eps / p.rho) * (tol + (p.n + p.m) * kUnit64);
  const GradientCheckResult r = check_gradient(f, x, g, opt);
  if (achieved > tol) {  // some evaluations stopped at their floor: bound them by what they reached
    opt.function_error *= (achieved + (p.n + p.m) * kUnit64) / (tol + (p.n + p.m) * kUnit64);
    EXPECT_TRUE(check_gradient(f, x, g, opt).ok) << "at the floor " << achieved;
    return;
  }
  EXPECT_TRUE(r.ok) << r.report();
}

// ---- the gradient in the relaxation lambda = eps / rho (model.learn_marginal_penalty) -------------
// <G, log_plan> of the unrolled layer at tau = 1 / (1 + lambda), and its analytic d / d lambda
// (sinkhorn_backward's dtau times d tau / d lambda = -tau^2).
double unrolled_relaxation_objective(const LayerProblem& p, double lambda, int iters, double* dlambda = nullptr) {
  const double tau = 1.0 / (1.0 + lambda);
  std::vector<double> rw(static_cast<std::size_t>(iters * p.n * p.m)), cw(rw.size()), u(p.n), v(p.m),
      history(static_cast<std::size_t>(iters * (p.n + p.m))), scratch(p.n + 2 * p.m), dcost(p.n * p.m, 0.0);
  RowMatrixD lp(p.n, p.m);
  nn::sinkhorn_forward(lp.data(), rw.data(), cw.data(), u.data(), v.data(), p.cost.data(), p.log_a.data(),
                       p.log_b.data(), p.eps, iters, p.n, p.m, tau, history.data());
  if (dlambda != nullptr) {
    double dtau = 0.0;
    nn::sinkhorn_backward(dcost.data(), scratch.data(), p.G.data(), rw.data(), cw.data(), p.eps, iters, p.n, p.m,
                          tau, &dtau, history.data());
    *dlambda = -tau * tau * dtau;
  }
  return (p.G.array() * lp.array()).sum();
}

TEST(UnbalancedSinkhornLayer, UnrolledRelaxationGradientMatchesFiniteDifferences) {
  // The unrolled layer is smooth in lambda > -1, also through 0 (the balanced layer): central
  // differences at lambda = eps / rho and at 0, with the evaluation error of the test above.
  std::mt19937_64 rng(testing::fresh_seed());
  constexpr int iters = 9;
  const LayerProblem p = random_layer_problem(rng, 4, 5, 0.8);
  for (double lambda : {p.eps / p.rho, 0.0}) {
    double analytic = 0.0;
    unrolled_relaxation_objective(p, lambda, iters, &analytic);
    auto f = [&](const Eigen::VectorXd& x) { return unrolled_relaxation_objective(p, x[0], iters); };
    GradientCheckOptions opt;
    opt.f_scale = p.G.cwiseAbs().sum() * (1.0 + std::abs(f(Eigen::VectorXd::Constant(1, lambda))) / p.G.cwiseAbs().sum());
    opt.function_error = iters * (p.n + p.m + 8) * kUnit64 * (p.cost.cwiseAbs().maxCoeff() / p.eps + 8.0);
    const GradientCheckResult r =
        check_gradient(f, Eigen::VectorXd::Constant(1, lambda), Eigen::VectorXd::Constant(1, analytic), opt);
    EXPECT_TRUE(r.ok) << "lambda " << lambda << ": " << r.report();
  }
}

// <G, log_plan> of the converged layer at lambda (rho = eps / lambda; 0: balanced), and its
// analytic d / d lambda from the implicit backward.
double converged_relaxation_objective(const LayerProblem& p, double lambda, double tol, double* achieved,
                                      double* dlambda = nullptr) {
  LayerProblem q = p;
  q.rho = lambda > 0.0 ? p.eps / lambda : INFINITY;
  RowMatrixD log_plan(p.n, p.m);
  SinkhornOptions options{.epsilon = p.eps, .tol = tol, .max_iter = 100000,
                          .epsilon_start = nn::kLearnedCostEpsilonStart};
  options.marginal_penalty = q.rho;
  std::vector<double> potentials(p.n + p.m);
  const auto s = nn::sinkhorn_converged_forward(log_plan.data(), p.cost.data(), p.log_a.data(), p.log_b.data(),
                                                options, p.n, p.m, potentials.data());
  EXPECT_TRUE(std::isfinite(s.marginal_error));
  *achieved = std::max(*achieved, s.marginal_error);
  if (dlambda != nullptr) {
    RowMatrixD dcost = RowMatrixD::Zero(p.n, p.m);
    *dlambda = 0.0;
    nn::sinkhorn_implicit_backward(dcost.data(), p.G.data(), log_plan.data(), p.eps, p.n, p.m, q.rho, dlambda,
                                   potentials.data());
  }
  return (p.G.array() * log_plan.array()).sum();
}

TEST(UnbalancedSinkhornLayer, ImplicitRelaxationGradientMatchesFiniteDifferences) {
  // Central differences in lambda of the converged plan (solved to 1e-14): the evaluation error of
  // the implicit test above, cond(H_kappa) (tol + (n + m) u), with tol raised to what the solves
  // reached where they stopped at their floor.
  std::mt19937_64 rng(testing::fresh_seed());
  const LayerProblem p = random_layer_problem(rng, 5, 4, 0.7);
  const double lambda = p.eps / p.rho, tol = 1e-14;
  double achieved = tol, analytic = 0.0;
  converged_relaxation_objective(p, lambda, tol, &achieved, &analytic);
  auto f = [&](const Eigen::VectorXd& x) { return converged_relaxation_objective(p, x[0], tol, &achieved); };
  const double value = f(Eigen::VectorXd::Constant(1, lambda));
  GradientCheckOptions opt;
  opt.f_scale = p.G.cwiseAbs().sum() * (1.0 + std::abs(value));
  const double cond = unbalanced_adjoint_condition(converged_unbalanced_log_plan(p, p.cost, tol, &achieved).array().exp().matrix(),
                                                   1.0 + lambda);
  opt.function_error = cond * (achieved + (p.n + p.m) * kUnit64);
  const GradientCheckResult r = check_gradient(f, Eigen::VectorXd::Constant(1, lambda), Eigen::VectorXd::Constant(1, analytic), opt);
  EXPECT_TRUE(r.ok) << "lambda " << lambda << ", cond " << cond << ", reached " << achieved << ": " << r.report();
}

TEST(UnbalancedSinkhornLayer, ImplicitRelaxationGradientAtZeroIsTheLimitOfTheUnbalancedOnes) {
  // At lambda = 0 (balanced) the gradient is one-sided; it must be the limit of the unbalanced
  // layer's as lambda -> 0+, which fixes the potentials' gauge (<a, phi> = <b, gamma>). With g(x)
  // = g0 + g1 x + g2 x^2 + ..., e(d) = 2 g(d) - g(2 d) = g0 - 2 g2 d^2, so e(d) is within
  // |e(d) - e(2 d)| / 3 of g0 (up to O(d^3)); each g(d) carries the solves' error, cond(H_kappa)
  // (tol + (n + m) u) / d times |G|_1, kappa = 1 + d (cond ~ 1 / d).
  std::mt19937_64 rng(testing::fresh_seed());
  const LayerProblem p = random_layer_problem(rng, 6, 5, 0.9);
  const double tol = 1e-13;
  double achieved = tol, g0 = 0.0;
  converged_relaxation_objective(p, 0.0, tol, &achieved, &g0);
  const double d = 1e-3;
  double g[3];
  for (int k = 0; k < 3; ++k) converged_relaxation_objective(p, d * (1 << k), tol, &achieved, &g[k]);
  const double e1 = 2.0 * g[0] - g[1], e2 = 2.0 * g[1] - g[2];
  double plan_cond = 0.0;
  {
    LayerProblem q = p;
    q.rho = p.eps / d;
    plan_cond = unbalanced_adjoint_condition(converged_unbalanced_log_plan(q, p.cost, tol, &achieved).array().exp().matrix(),
                                             1.0 + d);
  }
  const double rounding = 6.0 * plan_cond * (achieved + (p.n + p.m) * kUnit64) * p.G.cwiseAbs().sum() / d;
  EXPECT_LE(std::abs(g0 - e1), 2.0 * (std::abs(e1 - e2) / 3.0 + rounding))
      << "g(0) " << g0 << ", extrapolated " << e1 << " / " << e2 << ", g(d) " << g[0];
  // The gradient is not trivially 0: the relaxation changes the plan.
  EXPECT_GT(std::abs(g0), 10.0 * (std::abs(e1 - e2) + rounding));
}

TEST(UnbalancedSinkhornLayer, AnUnalignedWordNeedNotSendItsWeight) {
  // A word that the cost keeps apart (its column raised by c): the balanced layer still sends it its
  // whole weight b_j; the unbalanced one need not. At the unbalanced fixed point the column's mass
  // is b_j e^{-g_j/rho} with g_j = -tau eps log sum_i a_i e^{(f_i - C_ij)/eps} >= tau (c - max f - R)
  // (R = max |C - c| on the column, sum a = 1), so it is at most b_j e^{-(c - max f - R)/(rho + eps)},
  // f read back from the plan's rows (row mass a_i e^{-f_i/rho}).
  std::mt19937_64 rng(testing::fresh_seed());
  LayerProblem p = random_layer_problem(rng, 6, 5, 0.7);
  const int j = p.m - 1;
  const double R = p.cost.cwiseAbs().maxCoeff(), c = 20.0 * (p.rho + p.eps) + 4.0 * R, tol = 1e-12;
  p.cost.col(j).array() += c;
  const double b_j = std::exp(p.log_b[j]);
  {
    RowMatrixD log_plan(p.n, p.m);
    const SinkhornOptions options{.epsilon = p.eps, .tol = tol, .max_iter = 100000,
                                  .epsilon_start = nn::kLearnedCostEpsilonStart};
    const auto s = nn::sinkhorn_converged_forward(log_plan.data(), p.cost.data(), p.log_a.data(), p.log_b.data(),
                                                  options, p.n, p.m);
    ASSERT_TRUE(s.converged);
    EXPECT_NEAR(log_plan.col(j).array().exp().sum(), b_j, s.marginal_error) << "balanced";
  }
  double achieved = tol;
  const RowMatrixD plan = converged_unbalanced_log_plan(p, p.cost, tol, &achieved).array().exp();
  const Eigen::VectorXd f = -p.rho * (plan.rowwise().sum().array().log() - p.log_a.array());
  const double bound = b_j * std::exp(-(c - f.maxCoeff() - R) / (p.rho + p.eps));
  // The fixed point holds within the solve's l1 marginal error `achieved`: the column's mass is off
  // by at most that, and each row's by at most that, which moves f_i by rho achieved / row_i at
  // most (to first order), and the bound by the factor e^{achieved / min row}.
  const double slack = achieved / plan.rowwise().sum().minCoeff();
  EXPECT_LE(plan.col(j).sum(), bound * std::exp(2.0 * slack) + achieved) << "rho " << p.rho;
  EXPECT_LT(plan.col(j).sum(), 0.5 * b_j) << "rho " << p.rho;
}

TEST(UnbalancedPlanAdjoint, SolvesTheSystemOnBothSides) {
  // Residual of H_kappa w = [P 1; P^T 1] for tall and wide plans: a backward-stable solve leaves
  // (n + m) u cond |H| |w| at most; kappa = 1 is refused (the balanced system has a gauge).
  std::mt19937_64 rng(testing::fresh_seed());
  for (auto [n, m] : {std::pair{6, 4}, std::pair{3, 7}}) {
    const RowMatrixD plan = testing::random_matrix(rng, n, m, 1.0).array().abs() + 0.01;
    const RowMatrixD P = testing::random_matrix(rng, n, m, 1.0);
    const double kappa = 1.3;
    const PlanAdjoint w = unbalanced_plan_adjoint(plan, P, kappa);
    const Eigen::VectorXd r1 = kappa * plan.rowwise().sum().cwiseProduct(w.w1) + plan * w.w2 - P.rowwise().sum();
    const Eigen::VectorXd r2 =
        kappa * plan.colwise().sum().transpose().cwiseProduct(w.w2) + plan.transpose() * w.w1 - P.colwise().sum().transpose();
    const double size = (plan.cwiseAbs().sum() + 1.0) * (w.w1.cwiseAbs().maxCoeff() + w.w2.cwiseAbs().maxCoeff());
    const double bound = 16.0 * (n + m) * kUnit64 * unbalanced_adjoint_condition(plan, kappa) * size;
    EXPECT_LE(r1.cwiseAbs().maxCoeff(), bound);
    EXPECT_LE(r2.cwiseAbs().maxCoeff(), bound);
    EXPECT_THROW(unbalanced_plan_adjoint(plan, P, 1.0), std::invalid_argument);
  }
}

}  // namespace
}  // namespace tokenflow
