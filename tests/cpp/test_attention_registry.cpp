// The registry of attention kinds (tokenflow/attention.hpp): each entry's names and flags hold of
// what the code does with the kind. (Every kind also runs through the cases of test_attention.cpp
// against its reference formula, which iterate over the registry.)
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "test_util.hpp"
#include "tokenflow/attention.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/readers.hpp"

namespace tokenflow {
namespace {

using testing::random_matrix;
using testing::random_measure;

TEST(AttentionRegistry, NamesRoundTripAndAreTheValuesOfTheKey) {
  std::set<std::string> names;
  std::set<int> kinds;
  for (const AttentionKindInfo& info : attention_kinds()) {
    EXPECT_TRUE(names.insert(info.name).second) << info.name << " twice";
    EXPECT_TRUE(kinds.insert(static_cast<int>(info.kind)).second) << info.name;
    EXPECT_STREQ(to_string(info.kind), info.name);
    EXPECT_EQ(attention_kind_from_string(info.name), info.kind);
    EXPECT_NE(std::string(info.weights), "") << info.name;
    EXPECT_EQ(info.gaussian_closure, info.no_closure_why == nullptr) << info.name;
  }
  // The enum's values are 0, 1, ..., each with its entry.
  ASSERT_FALSE(kinds.empty());
  EXPECT_EQ(*kinds.begin(), 0);
  EXPECT_EQ(*kinds.rbegin() + 1, static_cast<int>(kinds.size()));
  EXPECT_THROW(attention_kind_from_string("softmax2"), InputError);
  // attention.kind takes exactly the registry's names (help, docs/config.md and Python show them).
  int found = 0;
  for (const KeySpec& k : simulation_schema())
    if (k.key == "attention.kind") {
      EXPECT_EQ(k.choices, attention_kind_names());
      ++found;
    }
  EXPECT_EQ(found, 1);
}

// Each kind with random Q, K, V (entries N(0, 1/4)) and random weights: its reference weights are
// normalized exactly when its entry says so, and a causal mask and the Gaussian closure are taken
// or refused as it says.
TEST(AttentionRegistry, EveryKindDoesWhatItsEntrySays) {
  std::mt19937_64 rng(testing::fresh_seed());
  const int d = 3, n = 60;
  for (const AttentionKindInfo& info : attention_kinds()) {
    SCOPED_TRACE(info.name);
    AttentionSpec s;
    s.kind = info.name;
    s.Q = random_matrix(rng, d, d, 0.5);
    s.K = random_matrix(rng, d, d, 0.5);
    s.V = random_matrix(rng, d, d, 0.5);
    const AttentionParams p = make_attention(s, d);
    const Measure<double> mu = random_measure(rng, n, d, true, true);
    const Eigen::MatrixXd w = reference_attention_matrix(p, mu, 0.0, 0);
    const double row_sum_gap = (w.rowwise().sum().array() - 1.0).abs().maxCoeff();
    // Normalized rows sum to one up to the rounding of n terms (n u) or, for Sinkhorn, its
    // stopping tolerance sinkhorn_tol divided by the smallest weight a_i >= 0.5 / (1.5 n).
    const double slack = 4.0 * n * 1.2e-16 + 2.0 * p.sinkhorn_tol * 3.0 * n;
    if (info.normalized) {
      EXPECT_LE(row_sum_gap, slack);
    } else {
      EXPECT_GT(row_sum_gap, 1e-6);  // random logits: no row sums to one by construction
    }
    AttentionSpec causal = s;
    causal.mask = "causal";
    if (info.no_causal_why) {
      EXPECT_THROW(make_attention(causal, d), InputError);
    } else {
      EXPECT_NO_THROW(make_attention(causal, d));
    }
    if (info.gaussian_closure) {
      // A_h = scale K^T Q of random matrices is invertible (Sinkhorn's closure needs it).
      const MomentField field(p);
      Eigen::VectorXd dm;
      Eigen::MatrixXd dS;
      field.rates(0.0, Eigen::VectorXd::Zero(d), Eigen::MatrixXd::Identity(d, d), dm, dS);
      EXPECT_TRUE(dm.allFinite() && dS.allFinite());
    } else {
      EXPECT_THROW(check_gaussian_closure(p), InputError);
    }
  }
}

}  // namespace
}  // namespace tokenflow
