// Unbalanced Sinkhorn (ot.hpp, Eq. (U1)): the dense, online and grid operators against the plain
// reference loop, the rho -> inf limit, empty bins, epsilon-scaling and warm starts, the marginal
// error and rounding floor of the returned plan, the unbalanced divergence, and the iterations
// against the balanced solve of the same problem.
//
// Bound used throughout (derived here once). The damped soft-mins F_r(g) = tau T_r(g) and F_c(f) =
// tau T_c(f) are tau-Lipschitz in the sup norm (a soft-min is 1-Lipschitz), so the plain loop's map
// f -> F_r(F_c(f)) contracts by tau^2 toward the fixed point f*: for returned potentials (f, g) and
// f_new = F_r(F_c(f)), |f - f*| <= |f - f_new| + tau^2 |f - f*|, i.e. |f - f*| <= D / (1 - tau^2) with
// D = max_i |f_i - f_new_i|, and |g - g*| <= |g - F_c(f)| + tau |f - f*|. Each plan entry's exponent
// (f_i + g_j - C_ij) / eps is then within delta = ((1 + tau) D / (1 - tau^2) + D_g) / eps, D_g =
// max_j |g_j - F_c(f)_j|, of the fixed point's, and |pi_ij - pi*_ij| <= expm1(delta) pi*_ij.
// solution_bound() evaluates D and D_g by applying the maps once to the returned potentials, not from
// the marginal error: a row whose target a_i e^{-f_i / rho} lies below the marginal error (with a
// small rho, down to 1e-17) is not pinned by the error, but is by its displacement. Zero-weight rows
// and columns enter no soft-min, so they are left out of D and D_g.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_util.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {
namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

struct UnbalancedProblem {
  RowMatrix x, y, C;
  Eigen::VectorXd a, b;
  double eps = 0.0, rho = 0.0;
};

// Random clouds in R^d, weights of unequal masses (a sums to about 0.7, b to about 1.3), eps in
// [0.05, 0.5] and rho in [0.1, 10] (log-uniform), the range of POT's tests in the issue.
UnbalancedProblem random_unbalanced_problem(std::mt19937_64& rng, Eigen::Index n, Eigen::Index m, Eigen::Index d,
                                            CostKind cost) {
  UnbalancedProblem p;
  p.x = testing::random_matrix(rng, n, d, 1.0);
  p.y = testing::random_matrix(rng, m, d, 1.0);
  p.C.resize(n, m);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j) p.C(i, j) = pair_cost(cost, &p.x(i, 0), &p.y(j, 0), d);
  std::uniform_real_distribution<double> uni(0.5, 1.5), log_eps(std::log(0.05), std::log(0.5)),
      log_rho(std::log(0.1), std::log(10.0));
  p.a.resize(n);
  p.b.resize(m);
  for (auto& v : p.a) v = uni(rng);
  for (auto& v : p.b) v = uni(rng);
  p.a *= 0.7 / p.a.sum();
  p.b *= 1.3 / p.b.sum();
  p.eps = std::exp(log_eps(rng));
  p.rho = std::exp(log_rho(rng));
  return p;
}

// out_k = tau * (-eps log sum_l w_l exp((h_l - C_kl) / eps)), over the columns l of C when `rows`,
// else over its rows (log-sum-exp written out; zero weights drop out).
Eigen::VectorXd damped_softmin(const UnbalancedProblem& p, bool rows, const Eigen::VectorXd& w, const Eigen::VectorXd& h) {
  const double tau = p.rho / (p.rho + p.eps);
  Eigen::VectorXd out(rows ? p.C.rows() : p.C.cols());
  for (Eigen::Index k = 0; k < out.size(); ++k) {
    double mx = -INFINITY, s = 0.0;
    for (Eigen::Index l = 0; l < h.size(); ++l)
      if (w[l] > 0.0) mx = std::max(mx, std::log(w[l]) + (h[l] - (rows ? p.C(k, l) : p.C(l, k))) / p.eps);
    for (Eigen::Index l = 0; l < h.size(); ++l)
      if (w[l] > 0.0) s += std::exp(std::log(w[l]) + (h[l] - (rows ? p.C(k, l) : p.C(l, k))) / p.eps - mx);
    out[k] = -tau * p.eps * (mx + std::log(s));
  }
  return out;
}

// delta of the header for the potentials of r on the problem p. Its own rounding (a few units in
// the last place of exponents of size max|C| / eps) is within expect_plans_agree's rounding term.
double solution_bound(const SinkhornResult& r, const UnbalancedProblem& p) {
  const double tau = p.rho / (p.rho + p.eps);
  const Eigen::VectorXd g_of_f = damped_softmin(p, false, p.a, r.f);
  const Eigen::VectorXd f_new = damped_softmin(p, true, p.b, g_of_f);
  double D = 0.0, D_g = 0.0;
  for (Eigen::Index i = 0; i < p.a.size(); ++i)
    if (p.a[i] > 0.0) D = std::max(D, std::abs(r.f[i] - f_new[i]));
  for (Eigen::Index j = 0; j < p.b.size(); ++j)
    if (p.b[j] > 0.0) D_g = std::max(D_g, std::abs(r.g[j] - g_of_f[j]));
  return ((1.0 + tau) * D / (1.0 - tau * tau) + D_g) / p.eps;
}

SinkhornOptions unbalanced_options(const UnbalancedProblem& p, double tol) {
  SinkhornOptions opt;
  opt.epsilon = p.eps;
  opt.marginal_penalty = p.rho;
  opt.tol = tol;
  opt.want_plan = true;
  opt.max_iter = 100000;
  return opt;
}

// The marginal error of a formed plan against the fixed point of its potentials, recomputed here.
double fixed_point_error(const SinkhornResult& r, const Eigen::VectorXd& a, const Eigen::VectorXd& b, double rho) {
  const Eigen::VectorXd rows = r.plan.rowwise().sum(), cols = r.plan.colwise().sum().transpose();
  double e = 0.0;
  for (Eigen::Index i = 0; i < a.size(); ++i) e += std::abs(rows[i] - a[i] * std::exp(-r.f[i] / rho));
  for (Eigen::Index j = 0; j < b.size(); ++j) e += std::abs(cols[j] - b[j] * std::exp(-r.g[j] / rho));
  return e;
}

// |P - Q| <= (expm1(dP) + expm1(dQ)) max(P, Q) entrywise, plus rounding: each entry's exponent
// carries (n + m) u (1 + max|C| / eps) from the sums' order (the iterates of two loops differ by it).
void expect_plans_agree(const SinkhornResult& P, double dP, const SinkhornResult& Q, double dQ, const UnbalancedProblem& p,
                        const char* what) {
  const double rounding = 8.0 * static_cast<double>(p.C.rows() + p.C.cols()) * testing::kUnit64 *
                          (1.0 + p.C.cwiseAbs().maxCoeff() / p.eps) / (1.0 - std::pow(p.rho / (p.rho + p.eps), 2));
  const double bound = std::expm1(dP) + std::expm1(dQ) + rounding;
  ASSERT_TRUE(std::isfinite(bound)) << what;
  for (Eigen::Index i = 0; i < p.C.rows(); ++i)
    for (Eigen::Index j = 0; j < p.C.cols(); ++j)
      ASSERT_LE(std::abs(P.plan(i, j) - Q.plan(i, j)), bound * std::max(P.plan(i, j), Q.plan(i, j)) + 1e-300)
          << what << " at (" << i << ", " << j << "), eps " << p.eps << ", rho " << p.rho;
}

TEST(UnbalancedSinkhorn, OperatorsMatchTheReferenceLoop) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (CostKind cost : {CostKind::sqeuclidean, CostKind::euclidean, CostKind::dot}) {
    const UnbalancedProblem p = random_unbalanced_problem(rng, 40, 30, 2, cost);
    // tol relative to the plan's mass: the rounding floor grows with it (stages.hpp), and with the dot
    // cost (negative costs) and a small rho the plan creates mass (measured: up to 3 10^4 at rho 0.12).
    SinkhornOptions pilot = unbalanced_options(p, 1e-6);
    pilot.want_plan = false;
    const double mass = sinkhorn(DenseSoftMin(p.C), p.a, p.b, pilot).plan_mass;
    SinkhornOptions opt = unbalanced_options(p, 1e-12 * std::max(1.0, mass));
    opt.overrelaxation = 1.0;  // the plain loop, the reference's iteration
    const SinkhornResult ref = reference_sinkhorn_unbalanced(p.C, p.a, p.b, p.eps, p.rho, opt.tol, opt.max_iter);
    const SinkhornResult dense = sinkhorn(DenseSoftMin(p.C), p.a, p.b, opt);
    const SinkhornResult online = sinkhorn(OnlineSoftMin(p.x, p.y, cost), p.a, p.b, opt);
    SinkhornOptions accelerated = opt;  // the default acceleration, epsilon-scaled: the same fixed point
    accelerated.overrelaxation = 0.0;
    accelerated.epsilon_start = 2.0 * p.C.maxCoeff() - p.C.minCoeff();
    const SinkhornResult fast = sinkhorn(DenseSoftMin(p.C), p.a, p.b, accelerated);
    ASSERT_TRUE(ref.converged && dense.converged && online.converged && fast.converged)
        << to_string(cost) << " eps " << p.eps << " rho " << p.rho;
    const double d_ref = solution_bound(ref, p);
    expect_plans_agree(dense, solution_bound(dense, p), ref, d_ref, p, "dense");
    expect_plans_agree(online, solution_bound(online, p), ref, d_ref, p, "online");
    expect_plans_agree(fast, solution_bound(fast, p), ref, d_ref, p, "accelerated");
    // The objective is a sum of the plan's entries times terms of size max|C| + |f| + |g| (+ the
    // penalties' logs): it inherits the entries' relative bound.
    const double scale = (p.C.cwiseAbs().maxCoeff() + ref.f.cwiseAbs().maxCoeff() + ref.g.cwiseAbs().maxCoeff() +
                          p.eps + p.rho) * ref.plan.sum();
    EXPECT_NEAR(dense.objective, ref.objective, 4.0 * (std::expm1(d_ref) + (p.C.size() + 8) * testing::kUnit64) * scale);
    EXPECT_NEAR(dense.cost, ref.cost, 4.0 * (std::expm1(d_ref) + (p.C.size() + 8) * testing::kUnit64) * scale);
    // The returned error is the returned plan's, against its own fixed point.
    EXPECT_NEAR(dense.marginal_error, fixed_point_error(dense, p.a, p.b, p.rho), 1e-13 * std::max(1.0, mass));
    EXPECT_LT(dense.marginal_error, opt.tol);
    EXPECT_GT(dense.rounding_floor, 0.0);
    EXPECT_LT(dense.rounding_floor, opt.tol);
  }
}

TEST(UnbalancedSinkhorn, GridMatchesDense) {
  std::mt19937_64 rng(testing::fresh_seed());
  const UnbalancedProblem p = random_unbalanced_problem(rng, 60, 50, 2, CostKind::sqeuclidean);
  SinkhornOptions opt = unbalanced_options(p, 1e-10);
  const SinkhornResult dense = sinkhorn(DenseSoftMin(p.C), p.a, p.b, opt);
  // Every soft-min through the grid (max_cost_per_pair +inf), each sum within 1e-12 relative: the
  // marginal error it reports includes that (ot.hpp), so the header's bound holds with it.
  const SinkhornResult grid = sinkhorn(GridSoftMin(p.x, p.y, 1e-12, INFINITY), p.a, p.b, opt);
  ASSERT_TRUE(dense.converged && grid.converged) << "eps " << p.eps << " rho " << p.rho;
  expect_plans_agree(grid, solution_bound(grid, p), dense, solution_bound(dense, p),
                     p, "grid");
}

// rho -> inf: the fixed point's marginals a e^{-f/rho} -> a, and the plan tends to the balanced
// plan as 1 / rho (first order in the marginals' deviation, about |f| / rho). Measured as the
// largest entry difference at rho = 1e3, 1e4, 1e5: each tenfold rho divides it by 10 (9.9-10.0 seen).
TEST(UnbalancedSinkhorn, LargePenaltyReproducesTheBalancedPlan) {
  std::mt19937_64 rng(testing::fresh_seed());
  UnbalancedProblem p = random_unbalanced_problem(rng, 30, 25, 2, CostKind::sqeuclidean);
  p.a /= p.a.sum();  // the balanced problem needs equal masses
  p.b /= p.b.sum();
  p.eps = 0.2;
  SinkhornOptions bal;
  bal.epsilon = p.eps;
  bal.tol = 1e-13;
  bal.want_plan = true;
  const SinkhornResult balanced = sinkhorn(DenseSoftMin(p.C), p.a, p.b, bal);
  ASSERT_TRUE(balanced.converged);
  std::vector<double> gaps;
  for (double rho : {1e3, 1e4, 1e5}) {
    SinkhornOptions opt = bal;
    opt.marginal_penalty = rho;
    const SinkhornResult r = sinkhorn(DenseSoftMin(p.C), p.a, p.b, opt);
    ASSERT_TRUE(r.converged) << rho;
    gaps.push_back((r.plan - balanced.plan).cwiseAbs().maxCoeff());
    // The objectives too: the penalties vanish as |f|^2 / rho.
    EXPECT_NEAR(r.objective, balanced.objective, 10.0 * (1.0 + balanced.f.squaredNorm()) / rho);
  }
  // First order in 1 / rho: the ratio of successive gaps is 10 up to the second-order term (1/rho
  // relative) and the gaps' own tol (1e-13 per entry, far below them).
  EXPECT_NEAR(gaps[0] / gaps[1], 10.0, 2.0);
  EXPECT_NEAR(gaps[1] / gaps[2], 10.0, 2.0);
}

// Zero weights: their rows and columns are 0 and the rest is the plan of the problem without them.
TEST(UnbalancedSinkhorn, ZeroWeightsAreEmptyBins) {
  std::mt19937_64 rng(testing::fresh_seed());
  UnbalancedProblem p = random_unbalanced_problem(rng, 20, 16, 2, CostKind::sqeuclidean);
  p.a[3] = 0.0;
  p.b[0] = 0.0;
  p.b[9] = 0.0;
  const SinkhornOptions opt = unbalanced_options(p, 1e-12);
  const SinkhornResult full = sinkhorn(DenseSoftMin(p.C), p.a, p.b, opt);
  ASSERT_TRUE(full.converged);
  EXPECT_EQ(full.plan.row(3).cwiseAbs().maxCoeff(), 0.0);
  EXPECT_EQ(full.plan.col(0).cwiseAbs().maxCoeff(), 0.0);
  EXPECT_EQ(full.plan.col(9).cwiseAbs().maxCoeff(), 0.0);
  std::vector<Eigen::Index> rows, cols;
  for (Eigen::Index i = 0; i < 20; ++i)
    if (p.a[i] > 0.0) rows.push_back(i);
  for (Eigen::Index j = 0; j < 16; ++j)
    if (p.b[j] > 0.0) cols.push_back(j);
  UnbalancedProblem q = p;
  q.C = p.C(rows, cols);
  q.a = p.a(rows);
  q.b = p.b(cols);
  const SinkhornResult reduced = sinkhorn(DenseSoftMin(q.C), q.a, q.b, opt);
  ASSERT_TRUE(reduced.converged);
  SinkhornResult restricted = full;
  restricted.plan = full.plan(rows, cols);
  restricted.f = full.f(rows);
  restricted.g = full.g(cols);
  // The restriction is a solution of the reduced problem: empty bins add nothing to any soft-min, so
  // its potentials are the reduced problem's fixed point to tol, and a solve started there stops at once.
  SinkhornOptions warm_opt = opt;
  warm_opt.f_init = restricted.f;
  warm_opt.g_init = restricted.g;
  const SinkhornResult warm = sinkhorn(DenseSoftMin(q.C), q.a, q.b, warm_opt);
  ASSERT_TRUE(warm.converged);
  EXPECT_LE(warm.iterations, 2);
  // And it is the cold reduced solve's plan, within the header's bound.
  expect_plans_agree(restricted, solution_bound(restricted, q), reduced, solution_bound(reduced, q), q, "empty bins");
}

TEST(UnbalancedSinkhorn, WarmStartFromConvergedPotentialsStopsAtOnce) {
  std::mt19937_64 rng(testing::fresh_seed());
  const UnbalancedProblem p = random_unbalanced_problem(rng, 30, 20, 2, CostKind::sqeuclidean);
  SinkhornOptions opt = unbalanced_options(p, 1e-10);
  const SinkhornResult cold = sinkhorn(DenseSoftMin(p.C), p.a, p.b, opt);
  ASSERT_TRUE(cold.converged);
  opt.f_init = cold.f;
  opt.g_init = cold.g;
  const SinkhornResult warm = sinkhorn(DenseSoftMin(p.C), p.a, p.b, opt);
  ASSERT_TRUE(warm.converged);
  // From the fixed point the first iterate's error is already below tol (both loops count it).
  EXPECT_LE(warm.iterations, 2);
}

// A tol at or below the rounding floor is refused as converged (below_floor), as for balanced solves.
TEST(UnbalancedSinkhorn, TolBelowTheRoundingFloorIsReported) {
  std::mt19937_64 rng(testing::fresh_seed());
  const UnbalancedProblem p = random_unbalanced_problem(rng, 12, 10, 2, CostKind::sqeuclidean);
  SinkhornOptions opt = unbalanced_options(p, 1e-22);
  opt.max_iter = 3000;
  const SinkhornResult r = sinkhorn(DenseSoftMin(p.C), p.a, p.b, opt);
  EXPECT_FALSE(r.converged);
  EXPECT_TRUE(r.below_floor);
  EXPECT_GT(r.rounding_floor, opt.tol);
}

TEST(UnbalancedSinkhorn, BadPenaltyIsAnInputError) {
  const RowMatrix C = RowMatrix::Zero(2, 2);
  const Eigen::VectorXd a = Eigen::VectorXd::Constant(2, 0.5);
  for (double rho : {0.0, -1.0, std::nan("")}) {
    SinkhornOptions opt;
    opt.marginal_penalty = rho;
    try {
      sinkhorn(DenseSoftMin(C), a, a, opt);
      ADD_FAILURE() << rho;
    } catch (const InputError& e) {
      EXPECT_EQ(e.key(), "marginal_penalty");
    }
  }
}

// Sejourne et al.'s divergence (ot.hpp): 0 for equal measures, >= 0 otherwise (the sqeuclidean
// kernel is positive definite), and its mass term for measures of different masses on the same points.
TEST(UnbalancedSinkhorn, DivergenceZeroForEqualMeasuresAndNonNegative) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (int trial = 0; trial < 3; ++trial) {
    const UnbalancedProblem p = random_unbalanced_problem(rng, 25, 20, 2, CostKind::sqeuclidean);
    SinkhornOptions opt = unbalanced_options(p, 1e-11);
    opt.want_plan = false;
    const OnlineSoftMin xy(p.x, p.y, CostKind::sqeuclidean), xx(p.x, p.x, CostKind::sqeuclidean),
        yy(p.y, p.y, CostKind::sqeuclidean);
    const SinkhornDivergence d = sinkhorn_divergence(xy, xx, yy, p.a, p.b, opt);
    ASSERT_TRUE(d.xy.converged && d.xx.converged && d.yy.converged);
    // Each objective within about its marginal error times the size of its potentials' terms.
    const double slack = 1e-8;
    EXPECT_GE(d.value, -slack);
    const SinkhornDivergence same = sinkhorn_divergence(xx, xx, xx, p.a, p.a, opt);
    EXPECT_NEAR(same.value, 0.0, slack);
    // By its definition from the three objectives.
    const double gap = p.a.sum() - p.b.sum();
    EXPECT_DOUBLE_EQ(d.value, d.xy.objective - 0.5 * (d.xx.objective + d.yy.objective) + 0.5 * p.eps * gap * gap);
  }
}

// The speed claim, on the same problem: the unbalanced solve (default options) takes at
// most 1.5 times the balanced solve's iterations (plus one: the confirmation iterate), over the
// issue's ranges of eps and rho. The damped map contracts by tau^2 < 1 where the balanced one only
// by the plan's spectral gap, so it needs no more iterations in exact arithmetic; the acceleration
// acts on both alike.
TEST(UnbalancedSinkhorn, IterationsWithinOneAndAHalfTimesBalanced) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (int trial = 0; trial < 6; ++trial) {
    UnbalancedProblem p = random_unbalanced_problem(rng, 60, 50, 2, CostKind::sqeuclidean);
    SinkhornOptions opt = unbalanced_options(p, 1e-9);
    opt.want_plan = false;
    SinkhornOptions bal = opt;
    bal.marginal_penalty = kSinkhornBalanced;
    const Eigen::VectorXd a1 = p.a / p.a.sum(), b1 = p.b / p.b.sum();
    const SinkhornResult balanced = sinkhorn(DenseSoftMin(p.C), a1, b1, bal);
    const SinkhornResult unbalanced = sinkhorn(DenseSoftMin(p.C), p.a, p.b, opt);
    ASSERT_TRUE(balanced.converged && unbalanced.converged);
    EXPECT_LE(unbalanced.iterations, 1.5 * balanced.iterations + 1)
        << "eps " << p.eps << " rho " << p.rho << ": " << unbalanced.iterations << " against "
        << balanced.iterations;
  }
}

}  // namespace
}  // namespace tokenflow
