// Exponential throughput: the inlined polynomial of src/simd/exp.hpp against glibc's libmvec
// (its AVX-512 entry points, called directly: GCC only calls them by itself under -ffast-math,
// which the attention kernels cannot use because masked logits are -inf), against SLEEF
// (Debian's libsleef, the 1-ulp AVX-512 functions) and against scalar std::exp. Each iteration
// writes exp(x_j) for 4096 arguments in [-20, 0] (an attention tile's exp(s - max)), L1-resident.
// Items per second = exponentials per second on one core.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "../src/simd/exp.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#define TOKENFLOW_BENCH_AVX512 1
extern "C" __m512d _ZGVeN8v_exp(__m512d);   // libmvec, glibc >= 2.22
extern "C" __m512 _ZGVeN16v_expf(__m512);
#if defined(TOKENFLOW_HAVE_SLEEF)
#include <sleef.h>
#endif
#endif

namespace {

constexpr int kCount = 4096;

template <class T>
std::vector<T> arguments() {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-20.0, 0.0);
  std::vector<T> x(kCount);
  for (auto& v : x) v = static_cast<T>(u(rng));
  return x;
}

template <class T>
void finish(benchmark::State& state, const std::vector<T>& y) {
  benchmark::DoNotOptimize(y.data());
  state.SetItemsProcessed(state.iterations() * kCount);
}

template <class T>
void BM_ExpScalarLibm(benchmark::State& state) {
  const auto x = arguments<T>();
  std::vector<T> y(kCount);
  for (auto _ : state) {
    for (int j = 0; j < kCount; ++j) y[j] = std::exp(x[j]);
    benchmark::ClobberMemory();
  }
  finish(state, y);
}

template <class T>
void BM_ExpPolynomial(benchmark::State& state) {
  const auto x = arguments<T>();
  std::vector<T> y(kCount);
  for (auto _ : state) {
    const T* xp = x.data();
    T* yp = y.data();
#pragma omp simd
    for (int j = 0; j < kCount; ++j) yp[j] = tokenflow::simd::exp_poly(xp[j]);
    benchmark::ClobberMemory();
  }
  finish(state, y);
}

#if TOKENFLOW_BENCH_AVX512
void BM_ExpLibmvec_f64(benchmark::State& state) {
  const auto x = arguments<double>();
  std::vector<double> y(kCount);
  for (auto _ : state) {
    for (int j = 0; j < kCount; j += 8) _mm512_storeu_pd(&y[j], _ZGVeN8v_exp(_mm512_loadu_pd(&x[j])));
    benchmark::ClobberMemory();
  }
  finish(state, y);
}
void BM_ExpLibmvec_f32(benchmark::State& state) {
  const auto x = arguments<float>();
  std::vector<float> y(kCount);
  for (auto _ : state) {
    for (int j = 0; j < kCount; j += 16) _mm512_storeu_ps(&y[j], _ZGVeN16v_expf(_mm512_loadu_ps(&x[j])));
    benchmark::ClobberMemory();
  }
  finish(state, y);
}
BENCHMARK(BM_ExpLibmvec_f64);
BENCHMARK(BM_ExpLibmvec_f32);
#if defined(TOKENFLOW_HAVE_SLEEF)
void BM_ExpSleef_f64(benchmark::State& state) {
  const auto x = arguments<double>();
  std::vector<double> y(kCount);
  for (auto _ : state) {
    for (int j = 0; j < kCount; j += 8) _mm512_storeu_pd(&y[j], Sleef_expd8_u10avx512f(_mm512_loadu_pd(&x[j])));
    benchmark::ClobberMemory();
  }
  finish(state, y);
}
void BM_ExpSleef_f32(benchmark::State& state) {
  const auto x = arguments<float>();
  std::vector<float> y(kCount);
  for (auto _ : state) {
    for (int j = 0; j < kCount; j += 16) _mm512_storeu_ps(&y[j], Sleef_expf16_u10avx512f(_mm512_loadu_ps(&x[j])));
    benchmark::ClobberMemory();
  }
  finish(state, y);
}
BENCHMARK(BM_ExpSleef_f64);
BENCHMARK(BM_ExpSleef_f32);
#endif
#endif

BENCHMARK_TEMPLATE(BM_ExpScalarLibm, double);
BENCHMARK_TEMPLATE(BM_ExpScalarLibm, float);
BENCHMARK_TEMPLATE(BM_ExpPolynomial, double);
BENCHMARK_TEMPLATE(BM_ExpPolynomial, float);

}  // namespace
