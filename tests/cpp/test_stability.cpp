// W_2 stability: a case with an exact answer (l2 attention with Q = K is translation-equivariant),
// the shift perturbation, the Gaussian-fit method, and the CLI.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.hpp"
#include "tokenflow/stability.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;

// l2 attention with Q = K = I, V = W = I: the logits -|x - y|^2 do not change when every point
// moves by v, so Gamma_{mu + v}(x + v) = Gamma_mu(x) + v (the weights sum to 1). A shifted copy
// nu_0 = mu_0 + delta e_1 stays a shifted copy, nu_t = mu_t + v(t) with v' = v, and RK4 with step h
// applies to v exactly its stability polynomial R(h) = 1 + h + h^2/2 + h^3/6 + h^4/24 per step:
// W_2(mu_t, nu_t) / delta = R(h)^k after k steps (the optimal coupling of a translate is the
// translation). Only rounding remains: the costs |x_i - y_j|^2 of diagonal pairs carry an absolute
// error ~ 4 eps |x|^2 against |v|^2 ~ 1e-4, i.e. ~1e-11 relative; we allow 1e-8.
TEST(Stability, TranslationEquivariantFlowGrowsExactlyLikeExpT) {
  std::mt19937_64 rng(fresh_seed());
  AttentionSpec s;
  s.kind = "l2";
  const AttentionParams p = make_attention(s, 2);
  const Measure<double> mu = testing::random_measure(rng, 200, 2, /*weighted=*/true);
  RunSpec run;
  run.T = 1.0;
  run.dt = 0.1;
  run.save_every = 2;
  StabilitySpec spec;
  spec.perturbation = "shift";
  spec.delta = 1e-2;
  for (long exact_max_n : {2000L, 100L}) {  // exact OT, then the Gaussian fits (which see the shift too)
    spec.exact_max_n = exact_max_n;
    const StabilityResult r = stability_study(p, run, mu, spec);
    EXPECT_EQ(r.method, exact_max_n >= 200 ? "exact" : "gaussian");
    ASSERT_EQ(r.rows.size(), 6u);
    const double h = run.dt, R = 1 + h + h * h / 2 + h * h * h / 6 + h * h * h * h / 24;
    EXPECT_NEAR(r.w2_initial, spec.delta, 1e-8 * spec.delta);
    for (std::size_t f = 0; f < r.rows.size(); ++f)
      EXPECT_NEAR(r.rows[f].ratio, std::pow(R, 2.0 * double(f)), 1e-8 * std::exp(1.0)) << "frame " << f;
    EXPECT_NEAR(r.growth_constant, std::pow(R, 10), 1e-8 * std::exp(1.0));
    EXPECT_NEAR(r.growth_rate, 10.0 * std::log(R), 1e-7);  // ~ 1 - h^4 / 120
  }
}

TEST(Stability, NoisePerturbationIsWithinDelta) {
  std::mt19937_64 rng(fresh_seed());
  AttentionSpec s;
  const AttentionParams p = make_attention(s, 2);
  const Measure<double> mu = testing::random_measure(rng, 150, 2, false);
  RunSpec run;
  run.T = 0.2;
  run.dt = 0.05;
  StabilitySpec spec;
  spec.seed = rng();
  const StabilityResult r = stability_study(p, run, mu, spec);
  // The identity coupling costs delta exactly, so the optimal one costs at most that (up to the
  // network simplex's integer masses, 2^-52 relative).
  EXPECT_LE(r.w2_initial, spec.delta * (1 + 1e-12));
  EXPECT_GT(r.w2_initial, 0.5 * spec.delta);  // n = 150 points moved by ~ delta: hardly any rematching
  EXPECT_EQ(r.rows.front().ratio, 1.0);
  EXPECT_GE(r.growth_constant, 1.0);
}

TEST(Stability, RefusesDopri5AndBadSettings) {
  std::mt19937_64 rng(fresh_seed());
  const AttentionParams p = make_attention(AttentionSpec{}, 2);
  const Measure<double> mu = testing::random_measure(rng, 20, 2, false);
  RunSpec run;
  run.integrator = Integrator::dopri5;
  EXPECT_THROW(stability_study(p, run, mu, StabilitySpec{}), InputError);
  run.integrator = Integrator::rk4;
  StabilitySpec bad;
  bad.delta = -1.0;
  EXPECT_THROW(stability_study(p, run, mu, bad), InputError);
  bad.delta = 1e-2;
  bad.perturbation = "twist";
  EXPECT_THROW(stability_study(p, run, mu, bad), InputError);
}

TEST(StabilityCli, WritesCsvAndSummaryAndRejectsDopri5) {
  const auto dir = testing::temp_dir("stability-cli");
  auto r = testing::run_cli("stability --set init.n=64 --set run.T=0.2 --set run.dt=0.05 --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  const auto s = testing::read_summary(dir / "out");
  for (const char* k : {"command", "status", "wall_seconds", "method", "w2_initial", "growth_constant", "growth_rate"})
    EXPECT_TRUE(s.contains(k)) << k;
  EXPECT_EQ(s["method"], "exact");
  std::ifstream csv(dir / "out" / "stability.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header, "t,w2,ratio,w2_over_delta");
  r = testing::run_cli("stability --set run.integrator=dopri5 --out " + (dir / "bad").string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.stderr_text.find("run.integrator"), std::string::npos) << r.stderr_text;
  EXPECT_FALSE(std::filesystem::exists(dir / "bad"));
}

}  // namespace
}  // namespace tokenflow
