// The interaction energy along the flow: it never decreases when softmax attention has the
// gradient-flow structure (A symmetric, V = A; the sphere with Q = K = V = I), and it does
// decrease without it (V = -A).
#include <gtest/gtest.h>

#include <fstream>
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

}  // namespace
}  // namespace tokenflow
