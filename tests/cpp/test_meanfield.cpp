// Mean-field convergence: the log-log slope helper, and the n^{-1/2} rate on a small study.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.hpp"
#include "tokenflow/meanfield.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;
using testing::random_matrix;

TEST(MeanField, LogLogSlopeOfAPowerLaw) {
  const std::vector<double> x{10, 100, 1000}, y{3.0 * std::pow(10.0, -0.5), 3.0 * std::pow(100.0, -0.5),
                                                3.0 * std::pow(1000.0, -0.5)};
  EXPECT_NEAR(log_log_slope(x, y), -0.5, 1e-14);
  EXPECT_TRUE(std::isnan(log_log_slope({5.0}, {1.0})));
}

TEST(MeanField, ErrorsShrinkAtTheRateOneOverSqrtN) {
  // ns = {64, 1024}, 16 samples each. The squared Bures-Wasserstein error is, to leading order, a
  // quadratic form in ~ d + d (d + 1) / 2 = 5 asymptotically Gaussian moment errors, so its mean over
  // 16 samples has ~ 80 degrees of freedom: log RMS has standard deviation ~ 1 / sqrt(2 * 80) = 0.08
  // per n, and the slope between two n a factor 16 apart sqrt(2) 0.08 / log 16 = 0.04. The O(1/n)
  // biases (1/64 against the 1/8 fluctuation at n = 64) move it by < 0.02. We allow 0.25 (6 sd).
  std::mt19937_64 rng(fresh_seed());
  for (const std::string kind : {"softmax", "l2"}) {
    AttentionSpec s;
    s.kind = kind;
    s.Q = random_matrix(rng, 2, 2, 0.6);
    s.K = random_matrix(rng, 2, 2, 0.6);
    s.V = random_matrix(rng, 2, 2, 0.6);
    const AttentionParams p = make_attention(s, 2);
    RunSpec run;
    run.T = 0.3;
    run.dt = 0.1;
    MeanFieldSpec spec;
    spec.ns = {64, 1024};
    spec.seeds = 16;
    spec.seed = rng();
    const GaussianMoments g0{Eigen::Vector2d(0.3, -0.2), Eigen::Matrix2d{{0.6, 0.15}, {0.15, 0.4}}};
    const MeanFieldResult r = meanfield_study(p, run, g0, spec);
    ASSERT_EQ(r.rows.size(), 32u);
    for (const auto& row : r.rows) EXPECT_EQ(row.status, "finished");
    EXPECT_NEAR(r.slopes.bures_wasserstein, -0.5, 0.25) << kind;
    // The moment ODE itself: the same as solve_moments to T.
    GaussianRunSpec gs;
    gs.run.T = run.T;
    gs.run.integrator = Integrator::dopri5;
    const GaussianResult direct = solve_moments(p, gs, g0);
    // Both dopri5 at tol = 1e-10 (different first steps): a few steps of tol (1 + |S|) each.
    EXPECT_LE((direct.final.cov - r.ode_final.cov).norm(), 1e-8 * (1.0 + direct.final.cov.norm()));
  }
}

TEST(MeanFieldCli, WritesCsvAndSlope) {
  const auto dir = testing::temp_dir("meanfield-cli");
  auto r = testing::run_cli("meanfield --set 'meanfield.ns=[32, 128]' --set meanfield.seeds=2 --out " +
                            (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const auto s = testing::read_summary(dir / "out");
  for (const char* k : {"command", "status", "wall_seconds", "slope", "slopes", "theory_slope"}) EXPECT_TRUE(s.contains(k)) << k;
  std::ifstream csv(dir / "out" / "meanfield.csv");
  std::string line;
  int lines = 0;
  while (std::getline(csv, line)) ++lines;
  EXPECT_EQ(lines, 1 + 4);
  r = testing::run_cli("meanfield --set attention.kind=sigmoid --out " + (dir / "bad").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find("no Gaussian closure"), std::string::npos) << r.stderr_text;
  EXPECT_FALSE(std::filesystem::exists(dir / "bad"));
}

}  // namespace
}  // namespace tokenflow
