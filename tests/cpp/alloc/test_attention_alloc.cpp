// No allocation inside a time step: with the counting wrappers of counting_malloc.hpp, checks that AttentionField::velocity() makes no allocation once the field is built and the
// OpenMP thread pool exists (the first parallel region creates it, outside tokenflow's control).
// A separate binary, so that the replacement does not reach the main test suite.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <string>

#include "../test_util.hpp"
#include "counting_malloc.hpp"
#include "tokenflow/attention.hpp"

using tokenflow::testing::alloc::allocations;
using tokenflow::testing::alloc::counting;

namespace tokenflow {
namespace {

struct AllocCase {
  std::string kind = "softmax", mask = "none", normalize = "none";
  int d = 2, heads = 1, k = 2, kv = 0;
  double sink = 0.0;
  bool layers = false;
};

template <class T>
long allocations_in_velocity(const AllocCase& c) {
  std::mt19937_64 rng(testing::fresh_seed());
  AttentionSpec s;
  s.kind = c.kind;
  s.heads = c.heads;
  s.mask = c.mask;
  s.normalize = c.normalize;
  s.sink = c.sink;
  const double sd = 0.5 / std::sqrt(double(c.d));
  s.Q = testing::random_matrix(rng, c.heads * c.k, c.d, sd);
  s.K = testing::random_matrix(rng, c.heads * c.k, c.d, sd);
  if (c.kv > 0) {
    s.V = testing::random_matrix(rng, c.heads * c.kv, c.d, sd);
    s.W = testing::random_matrix(rng, c.d, c.heads * c.kv, sd);
  }
  if (c.layers) {
    AttentionSpec::Layer l1;
    l1.until = 0.5;
    l1.Q = testing::random_matrix(rng, c.heads * c.k, c.d, sd);
    s.layers = {l1, AttentionSpec::Layer{}};
  }
  const AttentionParams p = make_attention(s, c.d);
  const Measure<double> mu = testing::random_measure(rng, 777, c.d, true, c.mask == "causal");
  const Measure<T> m{mu.points.cast<T>(), mu.weights.cast<T>(), mu.positions.cast<T>()};
  AttentionField<T> field(p, m);
  Points<T> out(m.n(), m.d());
  field.velocity(0.0, m.points, out);  // warm-up: the OpenMP thread pool
  allocations = 0;
  counting = true;
  for (double t : {0.0, 0.7, 0.1}) field.velocity(t, m.points, out);
  counting = false;
  return allocations.load();
}

TEST(AttentionAllocations, VelocityAllocatesNothing) {
  ASSERT_GE(omp_get_max_threads(), 1);
  // The counter works: an allocation while counting is seen.
  counting = true;
  allocations = 0;
  void* volatile probe = std::malloc(64);
  counting = false;
  std::free(probe);
  ASSERT_EQ(allocations.load(), 1);

  std::vector<AllocCase> cases;
  for (std::string kind : {"softmax", "l2", "sigmoid", "linear"})
    for (int d : {2, 3, 16, 64}) {
      AllocCase c;
      c.kind = kind;
      c.d = c.k = d;
      cases.push_back(c);
    }
  {
    AllocCase c; c.mask = "causal"; c.sink = 0.2; c.d = 16; c.k = 8; cases.push_back(c);
    c.normalize = "sphere"; c.mask = "none"; c.d = 3; c.k = 3; cases.push_back(c);
    c.normalize = "none"; c.heads = 3; c.d = 10; c.k = 4; c.kv = 6; c.layers = true; cases.push_back(c);
    c.heads = 2; c.kv = 3; c.kind = "sigmoid"; c.mask = "causal"; cases.push_back(c);
  }
  for (const AllocCase& c : cases) {
    EXPECT_EQ(allocations_in_velocity<double>(c), 0) << c.kind << " d=" << c.d << " heads=" << c.heads << " " << c.mask;
    EXPECT_EQ(allocations_in_velocity<float>(c), 0) << c.kind << " d=" << c.d << " heads=" << c.heads << " " << c.mask
                                                    << " (float)";
  }
}

}  // namespace
}  // namespace tokenflow
