// The one memory check (tokenflow/memory_budget.hpp) and weights normalized without overflow
// (tokenflow/measure.hpp's normalized_weights), on inputs drawn fresh each run.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "test_util.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/measure.hpp"
#include "tokenflow/memory_budget.hpp"
#include "tokenflow/ot_solve.hpp"

namespace tokenflow {
namespace {

TEST(MemoryBudget, RefusesAboveTheLimitNamingTheKeyAndTheSize) {
  const auto limit = static_cast<long double>(memory_limit_bytes());
  ASSERT_GT(limit, 0);
  EXPECT_NO_THROW(check_memory(0, "nothing", "", "key"));
  EXPECT_NO_THROW(check_memory(limit, "all of it", "", "key"));
  std::mt19937_64 rng(testing::fresh_seed());
  for (int trial = 0; trial < 20; ++trial) {
    const long double over = limit * (1 + std::uniform_real_distribution<double>(1e-3, 1e6)(rng));
    try {
      check_memory(over, "the thing", "file.toml", "some.key", "ask for less");
      ADD_FAILURE() << "no refusal of " << static_cast<double>(over) << " bytes";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.key(), "some.key");
      EXPECT_EQ(e.source(), "file.toml");
      EXPECT_NE(what.find("the thing needs "), std::string::npos) << what;
      EXPECT_NE(what.find(", more than " + memory_limit_text() + "; ask for less"), std::string::npos) << what;
    }
  }
  // Sizes that are no number refuse too (an estimate that overflowed is no estimate).
  EXPECT_THROW(check_memory(std::numeric_limits<long double>::infinity(), "x", "", "k"), InputError);
  EXPECT_THROW(check_memory(std::numeric_limits<long double>::quiet_NaN(), "x", "", "k"), InputError);
  EXPECT_FALSE(fits_in_memory(-1));
}

// A plan asked for on points whose n x m float64 entries exceed the limit is refused before any
// solve (it was solved for, then its allocation failed).
TEST(MemoryBudget, AnOversizedPlanIsRefusedBeforeTheSolve) {
  const auto limit = static_cast<long double>(memory_limit_bytes());
  const auto n = static_cast<Eigen::Index>(std::ceil(std::sqrt(2 * limit / 8)));
  if (n > (Eigen::Index{1} << 31)) GTEST_SKIP() << "no limit below 2^62 bytes here";
  const Measure<double> mu = make_transport_measure(Points<double>::Zero(n, 1));
  OTSolveOptions options;
  options.want_plan = true;
  try {
    solve_ot(mu, mu, CostKind::sqeuclidean, options);
    ADD_FAILURE() << "the plan was not refused";
  } catch (const InputError& e) {
    EXPECT_EQ(e.key(), "plan");
    EXPECT_NE(std::string(e.what()).find("the plan of " + std::to_string(n) + " x " + std::to_string(n)),
              std::string::npos)
        << e.what();
  }
}

TEST(NormalizedWeights, WeightsUpToTheLargestDoubleNormalize) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (int trial = 0; trial < 200; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 50)(rng);
    // Magnitudes from tiny to the largest double, so that some sums overflow and some do not.
    const double scale = std::pow(10.0, std::uniform_real_distribution<double>(-300, 308.25)(rng));
    Eigen::VectorXd w(n);
    for (auto& v : w) v = std::min(std::numeric_limits<double>::max(), scale * std::uniform_real_distribution<double>(0, 1)(rng));
    w[0] = std::max(w[0], scale * 0.5);  // at least one positive weight
    const Eigen::VectorXd p = normalized_weights(w);
    // The reference: long double sums (range to 1e4932), so no overflow.
    long double total = 0;
    for (double v : w) total += v;
    ASSERT_TRUE(p.allFinite()) << "trial " << trial;
    // Each entry carries at most a few roundings of 2^-53 (a sum of n terms: n of them).
    const double tol = (n + 4) * std::numeric_limits<double>::epsilon();
    for (int i = 0; i < n; ++i) EXPECT_NEAR(p[i], static_cast<double>(w[i] / total), tol) << "trial " << trial;
    EXPECT_NEAR(p.sum(), 1.0, tol);
  }
  const Eigen::VectorXd two = normalized_weights(Eigen::Vector2d(1e308, 1e308));
  EXPECT_EQ(two[0], 0.5);
  EXPECT_EQ(two[1], 0.5);
  // The measures built from such weights carry them normalized (they were all zero).
  const Measure<double> mu = make_measure<double>(Points<double>::Zero(2, 1), Eigen::Vector2d(1e308, 1.7e308));
  EXPECT_NEAR(mu.weights[0], 1.0 / 2.7, 1e-15);
  const Measure<double> nu = make_transport_measure(Points<double>::Zero(3, 1), Eigen::Vector3d(1e308, 1e308, 0));
  EXPECT_EQ(nu.weights[2], 0.0);
  EXPECT_EQ(nu.weights[0], 0.5);
}

}  // namespace
}  // namespace tokenflow
