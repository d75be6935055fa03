// The equiangular reduction (include/tokenflow/equiangular.hpp) against closed forms and against
// the particle flow itself.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

#include "equiangular_run.hpp"
#include "test_util.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/equiangular.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;
using testing::simulate_equiangular;
using testing::kEps;

// A random equiangular start: n in [2, 40], beta in [0, 10], rho in (-1/(n - 1), 1).
struct Draw {
  long n;
  double beta, rho;
};
Draw draw(std::mt19937_64& rng) {
  const long n = std::uniform_int_distribution<long>(2, 40)(rng);
  const double lo = -1.0 / static_cast<double>(n - 1);
  return {n, std::uniform_real_distribution<double>(0.0, 10.0)(rng),
          std::uniform_real_distribution<double>(lo, 1.0)(rng)};
}

// Eq. (E1) against the particle flow's d<x_1, x_2>/dt formed with plain loops, and against the
// literal formula, on 200 fresh equiangular configurations.
TEST(Equiangular, VelocityIsThePairRateOfTheParticles) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 200; ++trial) {
    const Draw c = draw(rng);
    const EquiangularModel model{static_cast<double>(c.n), c.beta};
    const double F = equiangular_velocity(model, c.rho);
    // The points' inner products are within 4 n eps of rho (a, b rounded; n-term dot products),
    // and |dF/drho| <= 2 (beta + 2 n) on [-1, 1] (each factor of Eq. (E1) is Lipschitz with
    // constant <= beta or n over the denominator), so the configuration moves F by at most
    // 8 n (beta + 2 n) eps; the loops (n weights, n-term dot products of vectors of norm <= 1)
    // add at most 8 (n + n) eps. Doubled for the slack of these crude constants.
    const double n = static_cast<double>(c.n);
    const double bound = 2.0 * (8.0 * n * (c.beta + 2.0 * n) + 16.0 * n) * kEps;
    EXPECT_NEAR(F, reference_equiangular_pair_rate(c.n, c.beta, c.rho), bound)
        << "n = " << c.n << ", beta = " << c.beta << ", rho = " << c.rho;
    // Same formula, two roundings: exp(-beta u) against exp(beta rho) / exp(beta) differ by the
    // exponents' rounding (beta eps each), n - (n - 1) u against 1 + (n - 1) rho by n eps over
    // their size (they cancel near the simplex), and a dozen operations.
    const double factor = std::abs(1.0 + (n - 1.0) * c.rho);
    EXPECT_NEAR(F, reference_equiangular_velocity(n, c.beta, c.rho),
                ((16.0 + 4.0 * c.beta) * kEps + 4.0 * n * kEps / factor) * std::abs(F) + 1e-300);
  }
}

TEST(Equiangular, FixedPointsAndTheRateAtTheCluster) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 50; ++trial) {
    const Draw c = draw(rng);
    const EquiangularModel model{static_cast<double>(c.n), c.beta};
    EXPECT_EQ(equiangular_velocity(model, 1.0), 0.0);
    // The simplex: 1 + (n - 1) rho vanishes up to the rounding of -1/(n - 1) (n eps).
    EXPECT_NEAR(equiangular_velocity(model, -1.0 / (model.n - 1.0)), 0.0, 8.0 * model.n * kEps);
    EXPECT_EQ(equiangular_log_gap_rate(model, 0.0), kEquiangularRate);
    // G(u) = 2 + O((beta + n) u): at u = 1e-12 within 4 (beta + n) 1e-12.
    EXPECT_NEAR(equiangular_log_gap_rate(model, 1e-12), 2.0, 4.0 * (c.beta + model.n) * 1e-12);
  }
}

// beta = 0: rho' = 2 (1 - rho)(1 + (n - 1) rho) / n, so (1 + (n - 1) rho) / (1 - rho) = C e^{2t}
// and 1 - rho(t) = n / (C e^{2t} + n - 1).
TEST(Equiangular, SolutionAtBetaZeroIsTheClosedForm) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 20; ++trial) {
    Draw c = draw(rng);
    const double n = static_cast<double>(c.n), rho0 = std::max(c.rho, -1.0 / (n - 1.0) + 1e-3);
    const EquiangularModel model{n, 0.0};
    std::vector<double> times;
    for (int k = 0; k <= 40; ++k) times.push_back(0.5 * k);
    const double tol = 1e-13;
    const EquiangularPath path = solve_equiangular(model, rho0, times, tol);
    const double C = (1.0 + (n - 1.0) * rho0) / (1.0 - rho0);
    // Global error in v = log(1 - rho): at most the sum of the local errors tol (1 + |v|) over the
    // steps (the flow in v is non-expansive: dG/dv <= 0 at beta = 0), |v| <= 2 t_max + log n + 1.
    const double v_bound = 4.0 * static_cast<double>(path.steps + 1) * tol * (1.0 + 2.0 * times.back() + std::log(n) + 1.0);
    for (std::size_t k = 0; k < times.size(); ++k) {
      const double gap = n / (C * std::exp(2.0 * times[k]) + n - 1.0);
      EXPECT_NEAR(path.gap[k] / gap - 1.0, 0.0, v_bound + 64 * kEps) << "t = " << times[k];
    }
    // The clustering time to rho_target: (1/2) log(C(rho_target) / C(rho0)).
    const double target = 1.0 - 1e-6;
    const double t_closed = 0.5 * std::log((1.0 + (n - 1.0) * target) / (1.0 - target) / C);
    const double t_found = equiangular_clustering_time(model, rho0, target, 1e-12);
    EXPECT_NEAR(t_found / t_closed - 1.0, 0.0, 1e-9) << "n = " << n << ", rho0 = " << rho0;
  }
}

// The decay rate of 1 - rho at the cluster is 2 for every n and beta: the slope of log(1 - rho)
// between t1 and t2 late in the run, where |G(u) - 2| <= 4 (beta + n) u(t1).
TEST(Equiangular, GapDecaysAtRateTwo) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 20; ++trial) {
    Draw c = draw(rng);
    c.beta = std::min(c.beta, 6.0);
    const double n = static_cast<double>(c.n), rho0 = std::max(c.rho, 0.0);
    const EquiangularModel model{n, c.beta};
    const double t1 = equiangular_clustering_time(model, rho0, 1.0 - 1e-9), t2 = t1 + 5.0;
    const EquiangularPath path = solve_equiangular(model, rho0, {t1, t2}, 1e-13);
    const double slope = -(std::log(path.gap[1]) - std::log(path.gap[0])) / (t2 - t1);
    // Integration: |error in v| <= 4 steps tol (1 + |v|), |v| <= 35, over t2 - t1 = 5.
    const double bound = 4.0 * (c.beta + n) * path.gap[0] + 8.0 * path.steps * 1e-13 * 36.0 / 5.0;
    EXPECT_NEAR(slope, kEquiangularRate, bound) << "n = " << n << ", beta = " << c.beta;
    EXPECT_NEAR(path.gap[0] / 1e-9, 1.0, 1e-6);  // the clustering time and the solution agree
  }
}

// Long context, beta = gamma log n, rho0 = 1/2 (gamma_c = 2). Below gamma_c the clustering time
// tends to the logistic one, T_inf = (1/2) log(rho* (1 - rho0) / ((1 - rho*) rho0)), since F ->
// 2 rho (1 - rho); the relative deviation of 1/F is at most 1/q + 1/((n - 1) rho0), q = (n - 1)
// e^{-beta u0} >= n^{1 - gamma u0} / 2. Above, Laplace's method at rho0 gives
// T ~ n^{gamma u0 - 1} / (2 rho0 u0 gamma log n) (1 + h''/(2 h lambda^2) + ...) with
// h = 1 / (rho (1 - rho)) (h'(1/2) = 0, h''/h = 8) and lambda = gamma log n.
TEST(Equiangular, LongContextTimesFollowTheTheory) {
  const double rho0 = 0.5, u0 = 0.5, target = 1.0 - 1e-3;
  EXPECT_DOUBLE_EQ(long_context_critical_gamma(rho0), 2.0);
  const double t_inf = 0.5 * std::log(target * (1.0 - rho0) / ((1.0 - target) * rho0));
  for (double gamma : {0.5, 1.0}) {
    for (double n : {1e8, 1e12}) {
      const double T = equiangular_clustering_time(long_context_model(n, gamma), rho0, target);
      const double dev = 2.0 * std::pow(n, -(1.0 - gamma * u0)) + 2.0 / ((n - 1.0) * rho0);
      EXPECT_NEAR(T / t_inf - 1.0, 0.0, 2.0 * dev + 1e-9) << "gamma = " << gamma << ", n = " << n;
    }
  }
  for (double gamma : {3.0, 4.0}) {
    EXPECT_DOUBLE_EQ(long_context_exponent_theory(gamma, rho0), gamma * u0 - 1.0);
    for (double n : {1e10, 1e14}) {
      const double lambda = gamma * std::log(n);
      const double laplace = std::pow(n, gamma * u0 - 1.0) / (2.0 * rho0 * u0 * lambda);
      const double T = equiangular_clustering_time(long_context_model(n, gamma), rho0, target);
      // First correction 8/lambda^2 (h''/h = 8, times 1/lambda^2 from the Laplace series), the
      // rest of the series bounded by the same again; the end of the path (rho where (n - 1)
      // outgrows n^{gamma (1 - rho)}) adds O(log n / n^{gamma u0 - 1}).
      const double bound = 16.0 / (lambda * lambda) + 4.0 * std::log(n) / std::pow(n, gamma * u0 - 1.0);
      EXPECT_NEAR(T / laplace - 1.0, 8.0 / (lambda * lambda), bound) << "gamma = " << gamma << ", n = " << n;
    }
  }
  EXPECT_DOUBLE_EQ(long_context_exponent_theory(1.5, rho0), 0.0);
}

// From orthogonal tokens (rho0 = 0) the first stretch, up to rho ~ 1/n, sets the time:
// with r = n rho, T ~ (n^{gamma - 1} / 2) int_0^inf e^{-(lambda / n) r} / (1 + r) dr
// = (n^{gamma - 1} / 2)(log(n / lambda) - Euler's gamma) above gamma = 1 (relative corrections
// O(1 / lambda), lambda = gamma log n), and (1/2) log n + O(1) below. At n = 1e15 this needs
// 1 + (n - 1) rho to full relative accuracy at rho ~ 1e-15.
TEST(Equiangular, LongContextFromOrthogonalTokens) {
  const double target = 0.99;
  for (double n : {1e12, 1e15}) {
    for (double gamma : {2.0, 3.0}) {
      const double lambda = gamma * std::log(n);
      const double closed = std::pow(n, gamma - 1.0) / 2.0 * (std::log(n / lambda) - 0.5772156649015329);
      const double T = equiangular_clustering_time(long_context_model(n, gamma), 0.0, target);
      EXPECT_NEAR(T / closed, 1.0, 2.0 / lambda) << "n = " << n << ", gamma = " << gamma;
    }
    // Below: T - (1/2) log n settles (corrections n^{-(1 - gamma)} = 1e-6 at gamma = 1/2).
    const double a = equiangular_clustering_time(long_context_model(n, 0.5), 0.0, target) - 0.5 * std::log(n);
    const double b = equiangular_clustering_time(long_context_model(n / 10, 0.5), 0.0, target) - 0.5 * std::log(n / 10);
    EXPECT_NEAR(a, b, 1e-3) << "n = " << n;
  }
}

TEST(Equiangular, PointsAreEquiangularAndGapsKeepTheirDigits) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 20; ++trial) {
    const Draw c = draw(rng);
    const Points<double> x = equiangular_points(c.n, c.rho);
    const double n = static_cast<double>(c.n);
    for (long i = 0; i < c.n; ++i) EXPECT_NEAR(x.row(i).norm(), 1.0, 4.0 * n * kEps);
    EXPECT_LE(equiangular_deviation(x, c.rho), 8.0 * n * kEps);
  }
  // A gap of about 1e-12 (1 - rho0 is exact in floating point, Sterbenz): |x_i - x_j| = sqrt(2) a
  // up to the rounding of b + a (eps |b| / a relative, a = 1e-6), so the gap keeps about 1e-10
  // relative accuracy where 1 - <x_i, x_j> would keep about 1e-4.
  const double rho0 = 1.0 - 1e-12;
  const Points<double> x = equiangular_points(16, rho0);
  EXPECT_NEAR(mean_pair_gap(x) / (1.0 - rho0), 1.0, 8.0 * kEps / 1e-6);
}

TEST(Equiangular, ParticlesFollowTheReduction) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 3; ++trial) {
    const long n = std::uniform_int_distribution<long>(3, 12)(rng);
    const double beta = std::uniform_real_distribution<double>(0.5, 5.0)(rng);
    const double rho0 = std::uniform_real_distribution<double>(0.0, 0.8)(rng);
    const SimulationResult<double> r = simulate_equiangular(n, beta, rho0, 1.0, "sphere");
    ASSERT_EQ(r.status, "finished");
    const EquiangularPath path = solve_equiangular({static_cast<double>(n), beta}, rho0, r.times, 1e-13);
    double gap = 0.0;
    for (std::size_t f = 0; f < r.frames.size(); ++f) gap = std::max(gap, equiangular_deviation(r.frames[f], path.rho[f]));
    // Both integrations: global error <= 4 sum of local errors (steps tol (1 + |y|), |y| <= 1 for
    // the points, <= 1 + |log(1 - rho)| <= 30 for the ODE), and rounding of n-term dot products and
    // the renormalization (8 n eps per step).
    const double bound = 4.0 * (static_cast<double>(r.steps) * 1e-12 * 2.0 + static_cast<double>(path.steps) * 1e-13 * 31.0) +
                         8.0 * static_cast<double>(n * r.steps) * kEps;
    EXPECT_LE(gap, bound) << "n = " << n << ", beta = " << beta << ", rho0 = " << rho0;
    EXPECT_LE(gap, 1e-8);
  }
}

TEST(Equiangular, RefusesBadArguments) {
  EXPECT_THROW(solve_equiangular({1.0, 1.0}, 0.0, {1.0}), std::invalid_argument);
  EXPECT_THROW(solve_equiangular({4.0, -1.0}, 0.0, {1.0}), std::invalid_argument);
  EXPECT_THROW(solve_equiangular({4.0, 1.0}, 1.0, {1.0}), std::invalid_argument);
  EXPECT_THROW(solve_equiangular({4.0, 1.0}, -0.5, {1.0}), std::invalid_argument);
  EXPECT_THROW(solve_equiangular({4.0, 1.0}, 0.0, {2.0, 1.0}), std::invalid_argument);
  EXPECT_THROW(equiangular_clustering_time({4.0, 1.0}, 0.5, 0.4), std::invalid_argument);
  EXPECT_THROW(equiangular_points(1, 0.0), std::invalid_argument);
  EXPECT_EQ(equiangular_clustering_time({4.0, 1.0}, -1.0 / 3.0, 0.5), std::numeric_limits<double>::infinity());
}

}  // namespace
}  // namespace tokenflow
