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

// ---- the authors' protocol: normalized steps through the engine (Eq. M5) -----------------------

TEST(Metastability, NormalizedStepsAgreeWithTheReferenceStepByStep) {
  // One step of Eq. (M5) by the library (the engine's field) and by the reference (plain loops), from
  // the same state, along a reference trajectory. Each field is within b = (2 n + 4 beta + 8) eps of
  // the exact tangent velocity per component (the bound of VelocityAgreesWithTheReferenceAndTheEngine),
  // so they differ by 2 b per component and |dv| <= 2 b sqrt(2 n) over the 2 n components; the unit
  // direction v / |v| moves by at most 2 |dv| / |v|, and a token by h times that (renormalizing is
  // 1-Lipschitz outside the unit disc, where x + h u lies for a tangent u), plus the rounding of the
  // step, the renormalization and a merge's weighted mean (8 eps). Allowed twice.
  for (int trial = 0; trial < 10; ++trial) {
    std::mt19937_64 rng(fresh_seed());
    const std::size_t n = std::uniform_int_distribution<std::size_t>(2, 8)(rng);
    NormalizedStepOptions o;
    o.beta = std::uniform_real_distribution<double>(1.5, 40.0)(rng);
    o.step = std::uniform_real_distribution<double>(1e-3, 1e-2)(rng);
    o.steps = 1;
    o.merge_distance = 0.05;  // random tokens: some pairs merge at the start or after a step
    o.continue_with_angles = false;
    // Angles in an arc of width w with beta (1 - cos w) <= 10: every pull is above e^{-10}, far
    // above the engine's rounding floor (n eps), so the engine makes every step.
    Tokens tok = random_tokens(rng, n);
    const double width = o.beta <= 5.0 ? 3.0 : std::acos(1.0 - 10.0 / o.beta);
    for (double& t : tok.angles) t *= width / 6.283185307179586;
    for (int step = 0; step < 20; ++step) {
      const NormalizedStepPath lib = run_normalized_steps(tok.angles, tok.weights, o);
      const NormalizedStepPath ref = reference_normalized_steps(tok.angles, tok.weights, o);
      ASSERT_EQ(lib.status, ref.status) << "n = " << n << ", beta = " << o.beta << ", step " << step << ", angles "
                                        << ::testing::PrintToString(tok.angles);
      ASSERT_EQ(lib.final_angles.size(), ref.final_angles.size());
      if (lib.steps == 0) break;  // one cluster
      const double m = static_cast<double>(tok.angles.size());
      const double b = (2.0 * m + 4.0 * o.beta + 8.0) * kEps;
      const double tol = 2.0 * (o.step * 2.0 * 2.0 * b * std::sqrt(2.0 * m) / lib.speed.back() + 8.0 * kEps);
      for (std::size_t i = 0; i < ref.final_angles.size(); ++i) {
        EXPECT_NEAR(std::remainder(lib.final_angles[i] - ref.final_angles[i], 6.283185307179586), 0.0, tol)
            << "n = " << n << ", beta = " << o.beta << ", step " << step;
        EXPECT_NEAR(lib.final_weights[i], ref.final_weights[i], 4 * kEps);
      }
      tok.angles = ref.final_angles;
      tok.weights = ref.final_weights;
    }
  }
}

TEST(Metastability, NormalizedStepsKeepTheInvariantsAndClimbTheExactFlowsStaircase) {
  // The authors' start at a random beta through the protocol (step 1e-4 log beta: ten times the
  // authors', to stay cheap), recorded at every step:
  //  - |x_i| = 1 after every step, to the rounding of a renormalization (4 eps);
  //  - s = steps h / log beta, and the tokens' measured arclength agrees with it: a step turns token i
  //    by atan(h u_i) (engine) or h u_i (angles), with sum_i count_i u_i^2 = 1, so the arclength of a
  //    step lies in [h - h^3 / 3, h], and each turn is measured to 4 eps (atan2 of a cross product);
  //  - between merges E does not decrease by more than the step's second order: along u,
  //    d^2 E / dtau^2 >= -beta sum_ij a_i a_j k_ij (u_j - u_i)^2 >= -4 beta sum_i a_i u_i^2 = -4 beta / n
  //    (a_i = count_i / n), and the first-order term h <grad E, u> is >= 0 for the direction of
  //    Eq. (M1) (it is 2 beta h sum_i a_i N_i^2 / D_i / |F|) and off by at most 2 beta h gap / sqrt(n)
  //    for the engine's (|grad_i E| <= 2 beta a_i), so a step loses at most 2 beta h^2 / n +
  //    2 beta h gap / sqrt(n), plus E's rounding (relative 2 (n^2 + 4 beta + 8) eps);
  //  - the plateaus' levels, sums of squared cluster weights, are the exact flow's, in its order.
  for (int trial = 0; trial < 3; ++trial) {
    std::mt19937_64 rng(fresh_seed());
    NormalizedStepOptions o;
    o.beta = std::uniform_real_distribution<double>(200.0, 4000.0)(rng);
    o.step = 1e-4 * std::log(o.beta);
    o.record_every = 1;
    const std::vector<double> angles = staircase_angles(o.beta);
    const NormalizedStepPath path = run_normalized_steps(angles, std::vector<double>(5, 1.0), o);
    ASSERT_EQ(path.status, "one_cluster") << "beta = " << o.beta;
    EXPECT_LE(path.max_norm_error, 4 * kEps);
    const double log_beta = std::log(o.beta), h = o.step;
    for (std::size_t k = 0; k < path.step.size(); ++k) {
      ASSERT_EQ(path.rescaled[k], double(path.step[k]) * h / log_beta);
      const double steps = double(path.step[k]);
      EXPECT_NEAR(path.arclength[k], path.rescaled[k], steps * (h * h * h / 3.0 + 8.0 * std::sqrt(5.0) * kEps) / log_beta);
    }
    const double loss = 2.0 * o.beta * h * h / 5.0 + 2.0 * o.beta * h * path.max_direction_gap / std::sqrt(5.0);
    const double rounding = 2.0 * (25.0 + 4.0 * o.beta + 8.0) * kEps;
    for (std::size_t k = 1; k < path.step.size(); ++k) {
      if (path.clusters[k] != path.clusters[k - 1]) continue;  // a merge moves the tokens
      ASSERT_GE(path.energy[k], path.energy[k - 1] * (1.0 - rounding) - loss) << "step " << k << ", beta = " << o.beta;
    }
    EXPECT_NEAR(path.energy.back(), 1.0, 4 * kEps);
    CircleFlowOptions exact;
    exact.beta = o.beta;
    const std::vector<Plateau> flow = find_plateaus(run_circle_flow(angles, std::vector<double>(5, 1.0), exact));
    const std::vector<Plateau> ours = find_plateaus(path);
    ASSERT_EQ(ours.size(), flow.size()) << "beta = " << o.beta;
    for (std::size_t k = 0; k < ours.size(); ++k) {
      EXPECT_EQ(ours[k].clusters, flow[k].clusters) << "plateau " << k << ", beta = " << o.beta;
      EXPECT_NEAR(ours[k].energy_level, flow[k].energy_level, 4 * kEps) << "plateau " << k;
    }
    EXPECT_GT(path.engine_steps, 0);  // the engine made the first plateaus' steps
  }
}

// Two tokens of weights p, q at angle delta under Eq. (M5): by Eq. (M1) they move at F_A = q k s / (p
// + q k) and -F_B = -p k s / (q + p k) (k = e^{-beta (1 - cos delta)}, s = sin delta), the normalized
// step turns them by atan(h F_A / |F|) and atan(h F_B / |F|) (engine; h F / |F| along Eq. (M1)), so
// the gap follows the scalar recursion delta <- delta - (turn_A + turn_B) until it falls below the
// merge distance: the two-cluster closed form of the protocol.
long two_cluster_protocol_steps(double p, double q, double beta, double delta, double h, double merge, bool engine) {
  long steps = 0;
  while (delta >= merge) {
    const double k = std::exp(-beta * (1.0 - std::cos(delta))), s = std::sin(delta);
    const double fa = q * k * s / (p + q * k), fb = p * k * s / (q + p * k), norm = std::hypot(fa, fb);
    delta -= engine ? std::atan(h * fa / norm) + std::atan(h * fb / norm) : h * (fa + fb) / norm;
    ++steps;
  }
  return steps;
}

TEST(Metastability, NormalizedStepsCloseTwoClustersAsTheirClosedForm) {
  // Engine at moderate beta, Eq. (M1) past the engine's floor at the authors' beta (e^{-beta (1 - cos
  // delta)} < e^{-50}): the merge step is the recursion's, up to one step (the gap is rounded by
  // 8 eps per step against steps of 1e-3, so only a gap within that of the merge distance can flip);
  // the energy at the start is the two-cluster form p^2 + q^2 + 2 p q k(delta0) (relative rounding
  // 2 (4 + 4 beta + 8) eps) and the plateau's level is p^2 + q^2.
  for (int trial = 0; trial < 10; ++trial) {
    std::mt19937_64 rng(fresh_seed());
    const bool engine = trial % 2 == 0;
    NormalizedStepOptions o;
    o.beta = engine ? std::uniform_real_distribution<double>(5.0, 30.0)(rng)
                    : std::uniform_real_distribution<double>(500.0, 4000.0)(rng);
    o.engine = engine;
    o.step = 1e-3;
    // beta (1 - cos delta0) <= 490: the pull e^{-490} and its square's scale stay within float64.
    const double delta0 = std::uniform_real_distribution<double>(0.3, 0.5)(rng);
    const double p = std::uniform_real_distribution<double>(0.2, 0.8)(rng), q = 1.0 - p;
    const NormalizedStepPath path = run_normalized_steps({0.0, delta0}, {p, q}, o);
    ASSERT_EQ(path.status, "one_cluster") << "beta = " << o.beta;
    EXPECT_EQ(path.floor_clusters, 0);
    const long expected = two_cluster_protocol_steps(p, q, o.beta, delta0, o.step, o.merge_distance, engine);
    EXPECT_LE(std::abs(path.steps - expected), 1) << "beta = " << o.beta << ", delta0 = " << delta0 << ", p = " << p;
    const double e0 = p * p + q * q + 2.0 * p * q * std::exp(-o.beta * (1.0 - std::cos(delta0)));
    EXPECT_NEAR(path.energy.front(), e0, 2.0 * (4.0 + 4.0 * o.beta + 8.0) * kEps * e0);
    const std::vector<Plateau> plateaus = find_plateaus(path);
    ASSERT_EQ(plateaus.size(), 2u);
    EXPECT_NEAR(plateaus[0].energy_level, p * p + q * q, 4 * kEps);
    EXPECT_NEAR(path.energy.back(), 1.0, 4 * kEps);
  }
}

TEST(Metastability, EngineStepsStopAtTheirRoundingFloor) {
  // Two tokens 0.5 apart at beta = 4000 pull each other with e^{-490}: the engine's tangent velocity
  // is its rounding (n eps), so its direction is not Eq. (M1)'s, and the run says so.
  NormalizedStepOptions o;
  o.beta = 4000.0;
  o.continue_with_angles = false;
  const NormalizedStepPath path = run_normalized_steps({0.0, 0.5}, {1.0, 1.0}, o);
  EXPECT_EQ(path.status, "rounding_floor");
  EXPECT_EQ(path.floor_clusters, 2);
  EXPECT_EQ(path.steps, 0);
  o.continue_with_angles = true;
  o.steps = 100;
  const NormalizedStepPath cont = run_normalized_steps({0.0, 0.5}, {1.0, 1.0}, o);
  EXPECT_EQ(cont.status, "steps");
  EXPECT_EQ(cont.engine_steps, 0);
  // Along Eq. (M1) the two tokens approach symmetrically by h / sqrt(2) each per step.
  EXPECT_NEAR(cont.final_angles[1] - cont.final_angles[0], 0.5 - 100 * std::sqrt(2.0) * 1e-5 * std::log(4000.0), 1e-12);
}

TEST(Metastability, BadArgumentsAreRefused) {
  EXPECT_THROW(circle_velocity({0.0, 1.0}, {1.0}, 1.0), std::invalid_argument);
  EXPECT_THROW(circle_velocity({0.0, 1.0}, {1.0, 0.0}, 1.0), std::invalid_argument);
  EXPECT_THROW(circle_energy({0.0, NAN}, {1.0, 1.0}, 1.0), std::invalid_argument);
  CircleFlowOptions o;
  o.beta = 1.0;  // log beta = 0: no rescaled time
  EXPECT_THROW(run_circle_flow({0.0, 1.0}, {1.0, 1.0}, o), std::invalid_argument);
  EXPECT_THROW(two_cluster_escape_time(0.5, 0.5, 10.0, 0.1, 0.2), std::invalid_argument);
  NormalizedStepOptions n;
  n.beta = 1.0;
  EXPECT_THROW(run_normalized_steps({0.0, 1.0}, {1.0, 1.0}, n), std::invalid_argument);
  n.beta = 10.0;
  n.record_every = 0;
  EXPECT_THROW(run_normalized_steps({0.0, 1.0}, {1.0, 1.0}, n), std::invalid_argument);
}

}  // namespace
}  // namespace tokenflow
