// The interaction energy along the flow: it never decreases when softmax attention has the
// gradient-flow structure (A symmetric, V = A; the sphere with Q = K = V = I), and it does
// decrease without it (V = -A).
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "test_util.hpp"
#include "tokenflow/energy.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;
using testing::random_matrix;

// Q = I, K = G symmetric: A = scale G symmetric; V = value (W = I).
AttentionParams symmetric_params(const Eigen::MatrixXd& G, double value_factor) {
  const Eigen::Index d = G.rows();
  AttentionSpec s;
  s.Q = Eigen::MatrixXd::Identity(d, d);
  s.K = G;
  s.scale = 1.0 / std::sqrt(double(d));
  s.V = value_factor * *s.scale * G;  // V = value_factor A
  return make_attention(s, static_cast<int>(d));
}

Eigen::MatrixXd random_symmetric(std::mt19937_64& rng, int d) {
  const Eigen::MatrixXd R = random_matrix(rng, d, d, 0.6);
  return 0.5 * (R + R.transpose());
}

SimulationResult<double> run(const AttentionParams& p, const Measure<double>& mu, double T) {
  RunSpec r;
  r.T = T;
  r.dt = 0.05;  // few steps: each one is a parallel region, slow on an oversubscribed machine
  r.integrator = Integrator::rk4;
  r.save_every = 1;
  return simulate(p, r, mu);
}

TEST(Energy, StructureDetection) {
  std::mt19937_64 rng(fresh_seed());
  const Eigen::MatrixXd G = random_symmetric(rng, 3);
  EXPECT_TRUE(has_energy_gradient_structure(symmetric_params(G, 1.0)));
  EXPECT_TRUE(has_energy_gradient_structure(symmetric_params(G, 2.5)));   // C = c A, c > 0
  EXPECT_FALSE(has_energy_gradient_structure(symmetric_params(G, -1.0))); // c < 0
  AttentionSpec sphere;
  sphere.normalize = "sphere";
  EXPECT_TRUE(has_energy_gradient_structure(make_attention(sphere, 3)));  // Q = K = V = I
  AttentionSpec general;
  general.V = random_matrix(rng, 3, 3, 0.5);
  EXPECT_FALSE(has_energy_gradient_structure(make_attention(general, 3)));
  AttentionSpec asymmetric;
  asymmetric.K = random_matrix(rng, 3, 3, 0.5);
  EXPECT_FALSE(has_energy_gradient_structure(make_attention(asymmetric, 3)));
}

TEST(Energy, NeverDecreasesWithSymmetricAAndVEqualsA) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 2; ++trial) {
    const AttentionParams p = symmetric_params(random_symmetric(rng, 2), 1.0);
    ASSERT_TRUE(has_energy_gradient_structure(p));
    const Measure<double> mu = testing::random_measure(rng, 150, 2, /*weighted=*/true);
    const auto r = run(p, mu, 1.0);
    ASSERT_EQ(r.status, "finished");
    const EnergyMonotonicity e = energy_monotonicity(r.diagnostics, p, mu.n(), false);
    EXPECT_TRUE(e.monotone) << "largest relative decrease " << e.largest_relative_decrease << " allowance "
                            << e.allowance;
    // Not trivially constant: the energy grows along the run.
    EXPECT_GT(r.diagnostics.back().energy, r.diagnostics.front().energy * (1.0 + 1e3 * e.allowance));
  }
}

TEST(Energy, NeverDecreasesOnTheSphereWithIdentityParameters) {
  std::mt19937_64 rng(fresh_seed());
  AttentionSpec s;
  s.normalize = "sphere";
  s.scale = 2.0;
  const AttentionParams p = make_attention(s, 3);
  const Measure<double> mu = make_measure<double>(sample_sphere(150, 3, rng()));
  const auto r = run(p, mu, 1.0);
  const EnergyMonotonicity e = energy_monotonicity(r.diagnostics, p, mu.n(), false);
  EXPECT_TRUE(e.monotone) << "largest relative decrease " << e.largest_relative_decrease;
  EXPECT_GT(r.diagnostics.back().energy, r.diagnostics.front().energy * (1.0 + 1e3 * e.allowance));
}

TEST(Energy, DecreasesWithoutTheStructure) {
  // V = -A: dE/dt = -sum_i a_i Z_i |A ybar_i|^2 < 0, so E decreases at every frame.
  std::mt19937_64 rng(fresh_seed());
  const AttentionParams p = symmetric_params(random_symmetric(rng, 2), -1.0);
  ASSERT_FALSE(has_energy_gradient_structure(p));
  const Measure<double> mu = testing::random_measure(rng, 150, 2, true);
  const auto r = run(p, mu, 1.0);
  const EnergyMonotonicity e = energy_monotonicity(r.diagnostics, p, mu.n(), false);
  EXPECT_FALSE(e.monotone);
  EXPECT_GT(e.largest_relative_decrease, 1e3 * e.allowance);
}

TEST(Energy, SimulateReportsItInTheSummary) {
  const auto dir = testing::temp_dir("energy-cli");
  const auto r = testing::run_cli(
      "simulate --set init.n=100 --set run.T=0.5 --set run.dt=0.05 --set run.save_every=1 --set 'attention.K=[[0.5, 0.2], [0.2, -0.3]]' "
      "--set 'attention.V=[[0.5, 0.2], [0.2, -0.3]]' --set attention.scale=1.0 --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const auto s = testing::read_summary(dir / "out");
  EXPECT_EQ(s["gradient_flow"], true);
  EXPECT_EQ(s["energy_monotone"], true);
  EXPECT_TRUE(s.contains("energy_largest_relative_decrease"));
}

// ---- energy_rates against plain loops ----------------------------------------------------------

struct ReferenceRates {
  double energy = 0.0, rate = 0.0, slope_squared = 0.0;
  double rate_size = 0.0, slope_size = 0.0;  // the same sums with every term in absolute value
};

// Eqs. (1) and (2) of energy.hpp written out with loops, no shift, A and C from Q, K, V, W.
ReferenceRates reference_rates(const AttentionParams& p, const Measure<double>& mu) {
  const HeadBlocks& b = p.layers[0].heads[0];
  const Eigen::MatrixXd A = p.scale * b.K.transpose() * b.Q, C = b.W * b.V;
  const Eigen::Index n = mu.n(), d = mu.d();
  const auto& x = mu.points;
  const auto& a = mu.weights;
  const auto logit = [&](Eigen::Index i, Eigen::Index j) {  // s_ij = x_j^T A x_i
    double s = 0.0;
    for (Eigen::Index k = 0; k < d; ++k)
      for (Eigen::Index l = 0; l < d; ++l) s += x(j, k) * A(k, l) * x(i, l);
    return s;
  };
  const double c = C.norm() / A.norm();
  const double a_norm = std::max(A.cwiseAbs().rowwise().sum().maxCoeff(), A.cwiseAbs().colwise().sum().maxCoeff());
  ReferenceRates r;
  for (Eigen::Index i = 0; i < n; ++i) {
    Eigen::VectorXd grad = Eigen::VectorXd::Zero(d), ybar = Eigen::VectorXd::Zero(d), size = Eigen::VectorXd::Zero(d);
    double Z = 0.0;
    for (Eigen::Index j = 0; j < n; ++j) {
      const double e_ij = std::exp(logit(i, j)), e_ji = std::exp(logit(j, i));
      r.energy += 0.5 * a[i] * a[j] * e_ij;
      Z += a[j] * e_ij;
      ybar += a[j] * e_ij * x.row(j).transpose();
      grad += 0.5 * a[i] * (a[j] * e_ij * A.transpose() * x.row(j).transpose() + a[j] * e_ji * A * x.row(j).transpose());
      // |(A x_j)_k|, |(A^T x_j)_k| <= max(|A|_inf, |A|_1) max_l |x_jl|
      size += Eigen::VectorXd::Constant(d, 0.5 * a[i] * a[j] * (e_ij + e_ji) * a_norm * x.row(j).cwiseAbs().maxCoeff());
    }
    ybar /= Z;
    const Eigen::VectorXd gamma = C * ybar;
    r.rate += grad.dot(gamma);
    r.rate_size += size.dot((C.cwiseAbs() * ybar.cwiseAbs()));
    r.slope_squared += c * grad.squaredNorm() / (a[i] * Z);
    r.slope_size += c * size.squaredNorm() / (a[i] * Z);
  }
  return r;
}

TEST(EnergyRates, MatchPlainLoopsForAnyAttention) {
  // Random A (not symmetric) and C: the formulas hold for any softmax head.
  // Tolerance. Both sides sum the same terms in other orders and form the logits differently (a
  // d x d product then d-term dots, against d^2 terms): each logit differs by <= 2 (d^2 + d) u |A|_max
  // R^2 (R = max |x_i|), and energy_rates' shift s_ij - max s adds u |s_ij - max s| <= 2 d u |A|_max R^2;
  // each exponential then differs by that, relative; each sum over j or i of n terms adds n u, the
  // products with A, C and the dots 3 d u. So every quantity differs by at most
  //   u ((2 d^2 + 4 d) |A|_max R^2 + 2 n + 6 d + 10)
  // relative to the sum of its terms' absolute values (energy: E itself; rate, slope: *_size above).
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 6; ++trial) {
    const int d = 2 + trial % 3;
    AttentionSpec s;
    s.Q = random_matrix(rng, d, d, 0.5);
    s.K = random_matrix(rng, d, d, 0.5);
    s.V = random_matrix(rng, d, d, 0.5);
    s.W = random_matrix(rng, d, d, 0.5);
    const AttentionParams p = make_attention(s, d);
    const Measure<double> mu = testing::random_measure(rng, 40 + 7 * trial, d, /*weighted=*/trial % 2 == 1);
    const EnergyRates got = energy_rates(p, mu);
    const ReferenceRates want = reference_rates(p, mu);
    const Eigen::MatrixXd A = p.scale * s.K->transpose() * *s.Q;
    const double R = mu.points.rowwise().norm().maxCoeff();
    const double rel = 0.5 * std::numeric_limits<double>::epsilon() *
                       ((2.0 * d * d + 4.0 * d) * A.cwiseAbs().maxCoeff() * R * R + 2.0 * double(mu.n()) + 6.0 * d + 10.0);
    EXPECT_LE(std::abs(got.energy - want.energy), rel * want.energy) << trial;
    // rate and slope are products of two such quantities (grad . Gamma, |grad|^2): twice the bound.
    EXPECT_LE(std::abs(got.rate - want.rate), 2.0 * rel * want.rate_size) << trial;
    EXPECT_LE(std::abs(got.slope_squared - want.slope_squared), 2.0 * rel * want.slope_size) << trial;
  }
}

TEST(EnergyRates, RateIsTheSlopeSquaredExactlyUnderTheStructure) {
  // A symmetric, C = c A: dE/dt = |dE|^2 at every measure (rounding apart, the bound of the test
  // above, for each side against the exact value: the sum of both, relative to rate_size + slope_size);
  // C = -A: dE/dt = -|dE|^2; C = R A with R the rotation by 90 degrees in d = 2: dE/dt = 0.
  std::mt19937_64 rng(fresh_seed());
  const Eigen::MatrixXd G = random_symmetric(rng, 2);
  const Measure<double> mu = testing::random_measure(rng, 50, 2, true);
  const double u = 0.5 * std::numeric_limits<double>::epsilon();
  const double R = mu.points.rowwise().norm().maxCoeff();
  const auto tolerance = [&](const AttentionParams& p) {
    const ReferenceRates ref = reference_rates(p, mu);
    const Eigen::MatrixXd A = p.scale * p.layers[0].heads[0].K.transpose() * p.layers[0].heads[0].Q;
    return 4.0 * u * (16.0 * A.cwiseAbs().maxCoeff() * R * R + 2.0 * 50 + 22.0) * (ref.rate_size + ref.slope_size);
  };
  for (double c : {0.5, 1.0, 3.0}) {
    const EnergyRates r = energy_rates(symmetric_params(G, c), mu);
    EXPECT_GT(r.slope_squared, 0.0);
    EXPECT_LE(std::abs(r.rate - r.slope_squared), tolerance(symmetric_params(G, c))) << c;
  }
  const EnergyRates minus = energy_rates(symmetric_params(G, -1.0), mu);
  EXPECT_LE(std::abs(minus.rate + minus.slope_squared), tolerance(symmetric_params(G, -1.0)));
  AttentionSpec s;
  s.Q = Eigen::MatrixXd::Identity(2, 2);
  s.K = G;
  s.scale = 1.0;
  s.V = (Eigen::Matrix2d() << 0.0, -1.0, 1.0, 0.0).finished() * G;
  const EnergyRates rotated = energy_rates(make_attention(s, 2), mu);
  EXPECT_LE(std::abs(rotated.rate), tolerance(make_attention(s, 2)));
  EXPECT_GT(rotated.slope_squared, 0.0);
}

TEST(EnergyRates, RefuseWhatHasNoSlope) {
  const Measure<double> mu = make_measure<double>(Points<double>::Ones(3, 2));
  const auto key_of = [&](const AttentionSpec& s) {
    try {
      energy_rates(make_attention(s, 2), mu);
    } catch (const InputError& e) {
      return e.key();
    }
    return std::string("none");
  };
  AttentionSpec l2;
  l2.kind = "l2";
  EXPECT_EQ(key_of(l2), "attention.kind");
  AttentionSpec heads;
  heads.heads = 2;  // two heads of k = kv = 1 in d = 2
  heads.Q = heads.K = heads.V = heads.W = Eigen::MatrixXd::Identity(2, 2);
  EXPECT_EQ(key_of(heads), "attention.heads");
  AttentionSpec causal;
  causal.mask = "causal";
  EXPECT_EQ(key_of(causal), "attention.mask");
  AttentionSpec zero;
  zero.V = Eigen::MatrixXd::Zero(2, 2);
  EXPECT_EQ(key_of(zero), "attention.V");
}

}  // namespace
}  // namespace tokenflow
