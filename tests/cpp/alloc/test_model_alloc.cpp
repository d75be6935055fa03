// The training step's model passes do not allocate (Eigen's "hot paths never allocate" check):
// malloc and friends are counted (counting_malloc.hpp) while one pair's forward and
// backward passes run on a warm workspace.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>

#include "counting_malloc.hpp"
#include "tokenflow/model.hpp"

using tokenflow::testing::alloc::allocations;
using tokenflow::testing::alloc::counting;

namespace tokenflow {
namespace {

template <class T>
long allocations_in_one_pair() {
  ModelConfig c;  // the defaults of [model]: width 64, 2 layers, 4 heads, k 32, 30 iterations
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
  allocations = 0;
  counting = true;
  pair_forward(layout, params.data(), in, ws);
  pair_backward(layout, params.data(), grads.data(), in, ws, T(1));
  counting = false;
  Eigen::setNbThreads(eigen_threads);
  return allocations.load();
}

TEST(NoAllocation, OnePairForwardAndBackwardOnAWarmWorkspace) {
  EXPECT_EQ(allocations_in_one_pair<float>(), 0);
  EXPECT_EQ(allocations_in_one_pair<double>(), 0);
}

// The counter itself works (or the zero above would mean nothing).
TEST(NoAllocation, TheCounterSeesAnAllocation) {
  allocations = 0;
  counting = true;
  std::vector<double>* v = new std::vector<double>(100);
  counting = false;
  delete v;
  EXPECT_GE(allocations.load(), 2);
}

}  // namespace
}  // namespace tokenflow
