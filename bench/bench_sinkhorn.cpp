// Kernel-mode Sinkhorn (ot_kernel.hpp): the two products of the stabilized kernel P~ and the fused
// pass that does one Sinkhorn iteration, at n = m in {1000, 4000} in float and double; the
// log-domain soft-min of the dense operator (one half-iteration of the plain loop) for scale; and
// a read-only pass over a buffer of the same size (the memory bandwidth ceiling these passes are
// bound by). Counter bytes_per_second: the bytes of P~ (or of the buffer, or of C for the
// soft-min) read per second.
#include <benchmark/benchmark.h>

#include <random>

#include "tokenflow/ot.hpp"
#include "tokenflow/ot_kernel.hpp"

namespace {

using namespace tokenflow;
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The benchmark problem of bench/compare.py: x ~ N(0, I_3), y ~ N(0.5, I_3), |x - y|^2, eps 0.1.
struct Problem {
  RowMatrix cost;
  Eigen::VectorXd a, b, f, g;
  double eps = 0.1;
  explicit Problem(Eigen::Index n) : cost(n, n), a(Eigen::VectorXd::Constant(n, 1.0 / n)), b(a) {
    std::mt19937_64 rng(1);
    std::normal_distribution<double> normal;
    RowMatrix x(n, 3), y(n, 3);
    for (Eigen::Index k = 0; k < x.size(); ++k) x.data()[k] = normal(rng);
    for (Eigen::Index k = 0; k < y.size(); ++k) y.data()[k] = normal(rng) + 0.5;
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j < n; ++j) cost(i, j) = pair_cost(CostKind::sqeuclidean, &x(i, 0), &y(j, 0), 3);
    // Potentials after one log-domain iteration, as kernel mode starts.
    const DenseSoftMin op(cost);
    g = Eigen::VectorXd::Zero(n);
    op.softmin_rows(eps, b.array().log().matrix(), f);
    op.softmin_cols(eps, (a.array().log() + f.array() / eps).matrix(), g);
  }
};

const Problem& problem(Eigen::Index n) {
  static Problem p1000(1000), p4000(4000);
  return n == 1000 ? p1000 : p4000;
}

template <class Scalar>
ScalingKernel<Scalar> make_kernel(const Problem& p) {
  ScalingKernel<Scalar> k;
  const DenseSoftMin op(p.cost);
  k.assign(op, p.a.array().log(), p.b.array().log(), p.f, p.g, p.eps);
  return k;
}

template <class Scalar>
void BM_KernelMultiply(benchmark::State& state) {
  const Problem& p = problem(state.range(0));
  const ScalingKernel<Scalar> k = make_kernel<Scalar>(p);
  Eigen::VectorXd v = Eigen::VectorXd::Ones(k.cols()), out;
  for (auto _ : state) {
    k.multiply(v, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * k.bytes()));
}

template <class Scalar>
void BM_KernelMultiplyTransposed(benchmark::State& state) {
  const Problem& p = problem(state.range(0));
  const ScalingKernel<Scalar> k = make_kernel<Scalar>(p);
  Eigen::VectorXd u = Eigen::VectorXd::Ones(k.rows()), out;
  for (auto _ : state) {
    k.multiply_transposed(u, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * k.bytes()));
}

// One kernel-mode iteration; state.range(1) = 1: w = 1 (one dot per row), 0: w != 1 (two).
template <class Scalar>
void BM_KernelFusedPass(benchmark::State& state) {
  const Problem& p = problem(state.range(0));
  const ScalingKernel<Scalar> k = make_kernel<Scalar>(p);
  Eigen::VectorXd u = Eigen::VectorXd::Ones(k.rows()), v = Eigen::VectorXd::Ones(k.cols()),
                  v2 = v, u_next, sums;
  const bool plain = state.range(1) == 1;
  for (auto _ : state) {
    benchmark::DoNotOptimize(k.fused_pass(p.a, plain ? v : v2, v, plain ? 1.0 : 1.5, u, u_next, sums));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * k.bytes()));
}

template <class Scalar>
void BM_KernelAssign(benchmark::State& state) {
  const Problem& p = problem(state.range(0));
  const DenseSoftMin op(p.cost);
  ScalingKernel<Scalar> k;
  const Eigen::VectorXd log_a = p.a.array().log(), log_b = p.b.array().log();
  for (auto _ : state) benchmark::DoNotOptimize(k.assign(op, log_a, log_b, p.f, p.g, p.eps));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * p.cost.size()));
}

void BM_DenseSoftMinRows(benchmark::State& state) {
  const Problem& p = problem(state.range(0));
  const DenseSoftMin op(p.cost);
  Eigen::VectorXd h = p.b.array().log() + p.g.array() / p.eps, out;
  for (auto _ : state) {
    op.softmin_rows(p.eps, h, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * p.cost.size() * sizeof(double)));
}

// The memory ceiling: sum a float buffer of n^2 entries (the size of P~ in float), on all threads.
void BM_ReadBandwidth(benchmark::State& state) {
  const Eigen::Index n = state.range(0);
  std::vector<float> buffer(static_cast<std::size_t>(n * n), 1.0f);
  const Eigen::Index size = n * n;
  for (auto _ : state) {
    double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (Eigen::Index k0 = 0; k0 < size; k0 += 4096) {
      float s = 0.0f;
      const Eigen::Index k1 = std::min(size, k0 + 4096);
#pragma omp simd reduction(+ : s)
      for (Eigen::Index k = k0; k < k1; ++k) s += buffer[static_cast<std::size_t>(k)];
      total += s;
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * size * sizeof(float)));
}

}  // namespace

BENCHMARK(BM_ReadBandwidth)->ArgName("n")->Arg(1000)->Arg(4000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_KernelMultiply<float>)->ArgName("n")->Arg(1000)->Arg(4000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_KernelMultiplyTransposed<float>)->ArgName("n")->Arg(1000)->Arg(4000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_KernelFusedPass<float>)->ArgNames({"n", "plain"})->ArgsProduct({{1000, 4000}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_KernelFusedPass<double>)->ArgNames({"n", "plain"})->ArgsProduct({{4000}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_KernelAssign<float>)->ArgName("n")->Arg(4000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DenseSoftMinRows)->ArgName("n")->Arg(1000)->Arg(4000)->Unit(benchmark::kMillisecond)->UseRealTime();
