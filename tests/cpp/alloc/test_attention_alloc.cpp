// No allocation inside a time step: this test binary replaces the C library's allocation entry
// points (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign; operator new, Eigen's
// aligned allocations and libgomp all go through them) with counting wrappers around glibc's own,
// and checks that AttentionField::velocity() makes no allocation once the field is built and the
// OpenMP thread pool exists (the first parallel region creates it, outside tokenflow's control).
// A separate binary, so that the replacement does not reach the main test suite.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <string>

#include "../test_util.hpp"
#include "tokenflow/attention.hpp"

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
}

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
inline void count() {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* malloc(std::size_t size) {
  count();
  return __libc_malloc(size);
}
void* calloc(std::size_t n, std::size_t size) {
  count();
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t size) {
  count();
  return __libc_realloc(p, size);
}
void* memalign(std::size_t alignment, std::size_t size) {
  count();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(std::size_t alignment, std::size_t size) {
  count();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t size) {
  count();
  void* p = __libc_memalign(alignment, size);
  if (!p) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}

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
