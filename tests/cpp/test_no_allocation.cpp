// The training step's model passes do not allocate (Eigen's "hot paths never allocate" check):
// malloc and friends are interposed in this test binary and counted while one pair's forward and
// backward passes run on a warm workspace.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>

#include "tokenflow/model.hpp"

extern "C" {
void* __libc_malloc(std::size_t size);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* p, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);
}

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
void count() {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
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
void* aligned_alloc(std::size_t alignment, std::size_t size) {
  count();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** p, std::size_t alignment, std::size_t size) {
  count();
  *p = __libc_memalign(alignment, size);
  return *p ? 0 : 12;  // ENOMEM
}
}

namespace tokenflow {
namespace {

template <class T>
long allocations_in_one_pair() {
  ModelConfig c;  // DESIGN's defaults: width 64, 2 layers, 4 heads, k 32, 30 iterations
  const ParameterLayout layout(c);
  const std::vector<double> init = init_parameters(layout, 1);
  const AlignedVector<T> params(init.begin(), init.end());
  AlignedVector<T> grads(layout.size(), T(0));
  const int n = 16, m = 12;
  AlignedVector<T> x(n * 2, T(0.3)), y(m * 2, T(-0.2)), la(n, T(-std::log(16.0))),
      lb(m, T(-std::log(12.0))), target(n * m, T(1.0 / (n * m)));
  for (int i = 0; i < n * 2; ++i) x[i] = T(0.1 * i);
  for (int j = 0; j < m * 2; ++j) y[j] = T(-0.05 * j);
  PairInput<T> in{x.data(), y.data(), la.data(), lb.data(), target.data(), n, m};
  PairWorkspace<T> ws;
  pair_forward(layout, params.data(), in, ws);  // warm: the workspace and per-thread scratch grow
  pair_backward(layout, params.data(), grads.data(), in, ws, T(1));
  // Training runs the passes inside an OpenMP region, where Eigen's products stay on one thread;
  // here, outside one, Eigen would otherwise hand large products to its own threads.
  const int eigen_threads = Eigen::nbThreads();
  Eigen::setNbThreads(1);
  g_allocations = 0;
  g_counting = true;
  pair_forward(layout, params.data(), in, ws);
  pair_backward(layout, params.data(), grads.data(), in, ws, T(1));
  g_counting = false;
  Eigen::setNbThreads(eigen_threads);
  return g_allocations.load();
}

TEST(NoAllocation, OnePairForwardAndBackwardOnAWarmWorkspace) {
  EXPECT_EQ(allocations_in_one_pair<float>(), 0);
  EXPECT_EQ(allocations_in_one_pair<double>(), 0);
}

// The counter itself works (or the zero above would mean nothing).
TEST(NoAllocation, TheCounterSeesAnAllocation) {
  g_allocations = 0;
  g_counting = true;
  std::vector<double>* v = new std::vector<double>(100);
  g_counting = false;
  delete v;
  EXPECT_GE(g_allocations.load(), 2);
}

}  // namespace
}  // namespace tokenflow
