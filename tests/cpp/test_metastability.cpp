// Softmax attention on the circle at large beta (include/tokenflow/metastability.hpp): Eq. (M1) and
// (M2) against the reference loops and the attention engine, the flow against the closed-form
// two-cluster escape time (Eq. M4), the energy's monotonicity and the staircase's levels.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

#include "test_util.hpp"
#include "tokenflow/attention.hpp"
#include "tokenflow/metastability.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;
using testing::kEps;

struct Tokens {
  std::vector<double> angles, weights;
};
Tokens random_tokens(std::mt19937_64& rng, std::size_t n) {
  std::uniform_real_distribution<double> angle(0.0, 6.283185307179586), weight(0.1, 1.0);
  Tokens t;
  for (std::size_t i = 0; i < n; ++i) {
    t.angles.push_back(angle(rng));
    t.weights.push_back(weight(rng));
  }
  return t;
}

TEST(Metastability, VelocityAgreesWithTheReferenceAndTheEngine) {
  for (int trial = 0; trial < 20; ++trial) {
    std::mt19937_64 rng(fresh_seed());
    const std::size_t n = std::uniform_int_distribution<std::size_t>(2, 12)(rng);
    const double beta = std::uniform_real_distribution<double>(0.5, 40.0)(rng);
    const Tokens tok = random_tokens(rng, n);
    const std::vector<double> ours = circle_velocity(tok.angles, tok.weights, beta);
    const std::vector<double> ref = reference_circle_velocity(tok.angles, tok.weights, beta);
    // The engine: attention.normalize = "sphere", Q = K = V = W = I, scale = beta, in R^2.
    AttentionSpec spec;
    spec.scale = beta;
    spec.normalize = "sphere";
    spec.summation = "dense";
    Points<double> x(static_cast<Eigen::Index>(n), 2);
    Vec<double> a(static_cast<Eigen::Index>(n));
    for (std::size_t i = 0; i < n; ++i) {
      x(static_cast<Eigen::Index>(i), 0) = std::cos(tok.angles[i]);
      x(static_cast<Eigen::Index>(i), 1) = std::sin(tok.angles[i]);
      a[static_cast<Eigen::Index>(i)] = tok.weights[i];
    }
    AttentionField<double> engine(make_attention(spec, 2), make_measure<double>(x, a));
    Points<double> v(static_cast<Eigen::Index>(n), 2);
    engine.velocity(0.0, x, v);
    // The x-form sums n terms of size <= 1 (absolute error n eps), projects (2 eps more) and its
    // logits beta <x_i, x_j> carry beta eps, which the exponentials turn into relative weight errors
    // of beta eps: the angular component is within (2 n + 4 beta + 8) eps of Eq. (M1) (whose own
    // rounding is relative, below that); allowed twice.
    const double tol = 2.0 * (2.0 * static_cast<double>(n) + 4.0 * beta + 8.0) * kEps;
    for (std::size_t i = 0; i < n; ++i) {
      const auto r = static_cast<Eigen::Index>(i);
      const double engine_angular = -x(r, 1) * v(r, 0) + x(r, 0) * v(r, 1);
      EXPECT_NEAR(ours[i], ref[i], tol) << "n = " << n << ", beta = " << beta;
      EXPECT_NEAR(ours[i], engine_angular, tol) << "n = " << n << ", beta = " << beta;
    }
    // Eq. (M2) against the reference and 2 e^{-beta} times the engine's interaction energy: sums of
    // n^2 positive terms (relative n^2 eps at most) whose exponents carry beta eps each.
    const double e = circle_energy(tok.angles, tok.weights, beta);
    Vec<double> an = a / a.sum();
    AttentionField<double> normalized(make_attention(spec, 2), make_measure<double>(x, an));
    const double rel = 2.0 * (static_cast<double>(n * n) + 4.0 * beta + 8.0) * kEps;
    EXPECT_NEAR(e, reference_circle_energy(tok.angles, tok.weights, beta), rel * e);
    EXPECT_NEAR(e, 2.0 * std::exp(-beta) * normalized.interaction_energy(0.0, x), rel * e);
  }
}

// The physical time at which two tokens of weights p, q (sum 1) first come within delta1: where
// the energy p^2 + q^2 + 2 p q k(delta) crosses its value at delta1, linearly interpolated between
// the two steps around it (an error below that step's duration, returned in `span`).
double crossing_time(double p, double q, double beta, double delta0, double delta1, double coarsening, double& span) {
  CircleFlowOptions o;
  o.beta = beta;
  o.stability *= coarsening;  // every step bound scaled alike, so that the steps scale alike
  o.max_angle_step *= coarsening;
  const CircleFlowPath path = run_circle_flow({0.0, delta0}, {p, q}, o);
  EXPECT_EQ(path.status, "one_cluster");
  const double target = p * p + q * q + 2.0 * p * q * std::exp(-beta * (1.0 - std::cos(delta1)));
  for (std::size_t k = 1; k < path.energy.size(); ++k) {
    if (path.energy[k] < target) continue;
    span = path.time[k] - path.time[k - 1];
    const double f = (target - path.energy[k - 1]) / (path.energy[k] - path.energy[k - 1]);
    return path.time[k - 1] + f * span;
  }
  ADD_FAILURE() << "the energy never reached its value at delta1";
  return NAN;
}

TEST(Metastability, TwoTokensMeetAtTheClosedFormTime) {
  // Two tokens of weights p, q at delta0: by Eq. (M4) their gap reaches delta1 at the time T of the
  // quadrature. The flow's crossing time must agree up to its RK4 error, which the difference of two
  // runs, the default one and one with steps twice as long, estimates (fourth order: the finer run's error is that difference
  // / 15; allowed twice), the quadrature's error (estimated the same way from 2^16 and 2^17 panels),
  // the interpolation inside one step, and the rounding of a sum of steps (64 eps T).
  for (int trial = 0; trial < 10; ++trial) {
    std::mt19937_64 rng(fresh_seed());
    const double beta = std::uniform_real_distribution<double>(20.0, 400.0)(rng);
    const double delta0 = std::uniform_real_distribution<double>(0.3, 0.8)(rng);
    const double p = std::uniform_real_distribution<double>(0.2, 0.8)(rng), q = 1.0 - p;
    const double delta1 = 0.5 / std::sqrt(beta);
    const double T = two_cluster_escape_time(p, q, beta, delta0, delta1, 1L << 17);
    const double quad_err = std::abs(T - two_cluster_escape_time(p, q, beta, delta0, delta1, 1L << 16)) / 15.0;
    double span_coarse = 0.0, span = 0.0;
    const double coarse = crossing_time(p, q, beta, delta0, delta1, 2.0, span_coarse);
    const double fine = crossing_time(p, q, beta, delta0, delta1, 1.0, span);
    const double tol = 2.0 / 15.0 * std::abs(fine - coarse) + quad_err + span + 64 * kEps * T;
    EXPECT_NEAR(fine, T, tol) << "beta = " << beta << ", delta0 = " << delta0 << ", p = " << p;
    EXPECT_LT(tol - span, 1e-4 * T);  // the check is not empty: the flow meets the closed form to 1e-4
  }
}

TEST(Metastability, EscapeTimeSlopeTendsToOneMinusCosDelta) {
  // Laplace: T ~ e^{beta (1 - cos delta0)} / (beta sin^2 delta0 (p/q + q/p)), so the relative gap
  // between quadrature and asymptotics is O(1 / (beta sin^2 delta0)) and log T - beta (1 - cos delta0)
  // + log(beta) stays bounded: the slope fitted over beta in [500, 4000] differs from 1 - cos delta0
  // by the slope of -log beta, (log 4000 - log 500) / 3500 ~ 6e-4, plus O(1 / beta).
  std::mt19937_64 rng(fresh_seed());
  const double delta0 = std::uniform_real_distribution<double>(0.3, 0.6)(rng);
  std::vector<double> betas{500, 1000, 1500, 2000, 3000, 4000}, logs;
  for (double b : betas) {
    const double T = two_cluster_escape_time(0.4, 0.6, b, delta0, 0.5 / std::sqrt(b));
    const double A = two_cluster_escape_asymptotic(0.4, 0.6, b, delta0);
    EXPECT_NEAR(T / A, 1.0, 4.0 / (b * std::sin(delta0) * std::sin(delta0))) << "beta = " << b;
    logs.push_back(std::log(T));
  }
  const LineFit fit = fit_line(betas, logs);
  EXPECT_NEAR(fit.slope, 1.0 - std::cos(delta0), std::log(8.0) / 3500.0 + 1e-4);
}

TEST(Metastability, FlowEscapesTwoClustersAtTheClosedFormTimeAtLargeBeta) {
  // Two groups of tokens (2 and 3, spread by 0.02 inside each group) 0.5 apart at beta = 500 .. 4000:
  // each group collapses in O(1) time, then the two clusters approach over a time e^{beta (1 - cos
  // delta)}. The flow's merge time against the quadrature from the clusters' separation right after
  // the groups merged (the physical time before that is O(1), counted in the allowance).
  std::mt19937_64 rng(fresh_seed());
  const double delta0 = std::uniform_real_distribution<double>(0.4, 0.6)(rng);
  for (double beta : {500.0, 2000.0, 4000.0}) {
    CircleFlowOptions o;
    o.beta = beta;
    const CircleFlowPath path =
        run_circle_flow({0.0, 0.02, delta0, delta0 + 0.01, delta0 + 0.02}, {1, 1, 1, 1, 1}, o);
    ASSERT_EQ(path.status, "one_cluster");
    const std::vector<Plateau> plateaus = find_plateaus(path);
    ASSERT_GE(plateaus.size(), 3u);
    const Plateau& two = plateaus[plateaus.size() - 2];
    ASSERT_EQ(two.clusters, 2);
    EXPECT_NEAR(two.energy_level, 13.0 / 25.0, 4 * kEps);  // (2/5)^2 + (3/5)^2
    // Each group is symmetric about its middle (0.01 and delta0 + 0.01), so its collapse keeps the
    // middle fixed (up to the pull of the other group, e^{-beta (1 - cos 0.4)} < e^{-39}): the
    // clusters start the plateau delta0 apart.
    const double T = two_cluster_escape_time(0.4, 0.6, beta, delta0, 1e-12);
    const double measured = two.t_end - two.t_start;
    // The RK4 error, estimated as in TwoTokensMeetAtTheClosedFormTime from a run with steps twice as long
    // (allowed 2/15 of the difference), the quadrature's (Simpson on 2^20 panels against 2^19), and the
    // O(1) times of the collapse inside the groups and past the merge gap, against T >= e^{50}.
    o.stability *= 2.0;
    o.max_angle_step *= 2.0;
    const std::vector<Plateau> coarse =
        find_plateaus(run_circle_flow({0.0, 0.02, delta0, delta0 + 0.01, delta0 + 0.02}, {1, 1, 1, 1, 1}, o));
    const double coarse_measured = coarse[coarse.size() - 2].t_end - coarse[coarse.size() - 2].t_start;
    const double quad_err = std::abs(T - two_cluster_escape_time(0.4, 0.6, beta, delta0, 1e-12, 1L << 19)) / 15.0;
    const double tol = 2.0 / 15.0 * std::abs(measured - coarse_measured) + quad_err + 100.0 + 64 * kEps * T;
    EXPECT_NEAR(measured, T, tol) << "beta = " << beta;
    EXPECT_LT(tol, 1e-4 * T);
  }
}

TEST(Metastability, EnergyNeverDecreasesAndReachesOne) {
  // Softmax on the sphere with Q = K = V = I is a gradient ascent of E (include/tokenflow/energy.hpp):
  // E must not decrease from step to step beyond the rounding of its n^2 terms (relative n^2 eps +
  // beta eps per exponent), and ends at 1 (one cluster).
  for (int trial = 0; trial < 10; ++trial) {
    std::mt19937_64 rng(fresh_seed());
    const double beta = std::uniform_real_distribution<double>(200.0, 2000.0)(rng);
    const std::vector<double> angles = staircase_angles(beta);
    CircleFlowOptions o;
    o.beta = beta;
    const CircleFlowPath path = run_circle_flow(angles, std::vector<double>(angles.size(), 1.0), o);
    ASSERT_EQ(path.status, "one_cluster") << "beta = " << beta;
    const double allowance = 2.0 * (25.0 + 4.0 * beta + 8.0) * kEps;
    for (std::size_t k = 1; k < path.energy.size(); ++k)
      ASSERT_GE(path.energy[k], path.energy[k - 1] * (1.0 - allowance)) << "step " << k << ", beta = " << beta;
    EXPECT_NEAR(path.energy.back(), 1.0, 4 * kEps);
    // The plateaus' levels are sums of squared cluster weights, multiples of 1/25 from 1/5 to 1.
    for (const Plateau& p : find_plateaus(path)) {
      const double m = p.energy_level * 25.0;
      EXPECT_NEAR(m, std::round(m), 1e-12);
      EXPECT_LE(p.energy_end, 1.0 + allowance);
    }
  }
}

TEST(Metastability, BadArgumentsAreRefused) {
  EXPECT_THROW(circle_velocity({0.0, 1.0}, {1.0}, 1.0), std::invalid_argument);
  EXPECT_THROW(circle_velocity({0.0, 1.0}, {1.0, 0.0}, 1.0), std::invalid_argument);
  EXPECT_THROW(circle_energy({0.0, NAN}, {1.0, 1.0}, 1.0), std::invalid_argument);
  CircleFlowOptions o;
  o.beta = 1.0;  // log beta = 0: no rescaled time
  EXPECT_THROW(run_circle_flow({0.0, 1.0}, {1.0, 1.0}, o), std::invalid_argument);
  EXPECT_THROW(two_cluster_escape_time(0.5, 0.5, 10.0, 0.1, 0.2), std::invalid_argument);
}

}  // namespace
}  // namespace tokenflow
