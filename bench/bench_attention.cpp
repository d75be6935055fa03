// Attention steps: one AttentionField::velocity() (all of an Euler step but the axpy) for
// n in {1024, 4096, 16384, 65536} x d in {2, 3, 16, 64} x f32/f64, softmax with the defaults
// (Q = K = V = W = I, scale 1/sqrt(d)) on N(0, I) tokens; then the other kinds and a causal mask at
// n = 4096. Counters: pairs/s (query-key pairs per second, n^2 per step, n(n+1)/2 when causal) and
// GFLOP/s counting the 2 (k + kv) flops of the logit and value products of a pair (the
// exponentials, maxima and sums are not counted).
#include <benchmark/benchmark.h>

#include <string>

#include "tokenflow/attention.hpp"
#include "tokenflow/measure.hpp"

namespace {

using namespace tokenflow;

template <class T>
Measure<T> gaussian_tokens(Eigen::Index n, int d, bool positions = false) {
  const Points<double> x = sample_gaussian(n, Eigen::VectorXd::Zero(d), Eigen::MatrixXd::Identity(d, d), 7);
  Vec<T> pos;
  if (positions) pos = default_positions<T>(n);
  return make_measure<T>(x.cast<T>(), Vec<T>(), pos);
}

template <class T>
void run_velocity(benchmark::State& state, const std::string& kind, const std::string& mask) {
  const Eigen::Index n = state.range(0);
  const int d = static_cast<int>(state.range(1));
  AttentionSpec spec;
  spec.kind = kind;
  spec.mask = mask;
  if (kind == "sinkhorn") spec.epsilon = 1.0;
  const AttentionParams params = make_attention(spec, d);
  const Measure<T> mu = gaussian_tokens<T>(n, d, mask == "causal");
  AttentionField<T> field(params, mu);
  Points<T> out(n, d);
  for (auto _ : state) {
    field.velocity(0.0, mu.points, out);
    benchmark::DoNotOptimize(out.data());
  }
  const double pairs = mask == "causal" ? 0.5 * double(n) * double(n + 1) : double(n) * double(n);
  state.counters["pairs/s"] = benchmark::Counter(pairs * double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(pairs * 4.0 * d * double(state.iterations()) * 1e-9,
                                                 benchmark::Counter::kIsRate);
}

template <class T>
void BM_SoftmaxStep(benchmark::State& state) {
  run_velocity<T>(state, "softmax", "none");
}
void BM_KindStep64(benchmark::State& state, const char* kind, const char* mask) {
  run_velocity<double>(state, kind, mask);
}
void BM_KindStep32(benchmark::State& state, const char* kind, const char* mask) {
  run_velocity<float>(state, kind, mask);
}

template <class T>
void BM_Energy(benchmark::State& state) {
  const Eigen::Index n = state.range(0);
  const int d = static_cast<int>(state.range(1));
  const AttentionParams params = make_attention(AttentionSpec{}, d);
  const Measure<T> mu = gaussian_tokens<T>(n, d);
  AttentionField<T> field(params, mu);
  for (auto _ : state) benchmark::DoNotOptimize(field.interaction_energy(0.0, mu.points));
  state.counters["pairs/s"] = benchmark::Counter(double(n) * double(n) * double(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}

void grid(benchmark::internal::Benchmark* b) {
  for (int d : {2, 3, 16, 64})
    for (long n : {1024, 4096, 16384, 65536}) b->Args({n, d});
  b->ArgNames({"n", "d"})->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();
}
void kinds(benchmark::internal::Benchmark* b) {
  for (int d : {2, 16}) b->Args({4096, d});
  b->ArgNames({"n", "d"})->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_SoftmaxStep, double)->Apply(grid);
BENCHMARK_TEMPLATE(BM_SoftmaxStep, float)->Apply(grid);
BENCHMARK_CAPTURE(BM_KindStep64, l2, "l2", "none")->Apply(kinds);
BENCHMARK_CAPTURE(BM_KindStep64, sigmoid, "sigmoid", "none")->Apply(kinds);
BENCHMARK_CAPTURE(BM_KindStep64, linear, "linear", "none")->Apply(kinds);
BENCHMARK_CAPTURE(BM_KindStep64, sinkhorn, "sinkhorn", "none")->Apply(kinds);
BENCHMARK_CAPTURE(BM_KindStep64, softmax_causal, "softmax", "causal")->Apply(kinds);
BENCHMARK_CAPTURE(BM_KindStep32, softmax_causal, "softmax", "causal")->Apply(kinds);
BENCHMARK_TEMPLATE(BM_Energy, double)->Apply(kinds);

}  // namespace
