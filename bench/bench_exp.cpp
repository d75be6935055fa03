// Exponentials, one core:
// 1. throughput (BM_Exp*): the inlined polynomial of src/simd/exp.hpp against glibc's libmvec
//    (its AVX-512 entry points, called directly), SLEEF (Debian's libsleef, its 1-ulp AVX-512
//    functions) and scalar std::exp. Each iteration writes exp(x_j) for 4096 arguments in [-20, 0]
//    (an attention tile's exp(s - max)), L1-resident, and (special:1) on -inf and underflowing
//    arguments (a masked tile, or logits far below the row maximum). items/s = exponentials/s.
// 2. in context (BM_FusedRow*): the exp-bound loop of a d = 2 softmax step (fused_row.hpp), with
//    the polynomial inlined by the compiler, SLEEF called on 8 or 16 lanes by hand, and libmvec
//    through GCC's SIMD clones (bench_exp_libmvec.cpp, its own translation unit because it
//    declares exp with the simd attribute). items/s = query-key pairs per second.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "../src/simd/exp.hpp"
#include "fused_row.hpp"

#if defined(__AVX512F__) && defined(TOKENFLOW_HAVE_LIBMVEC)
#include <immintrin.h>
#define TOKENFLOW_BENCH_AVX512 1
extern "C" __m512d _ZGVeN8v_exp(__m512d);   // libmvec, glibc >= 2.22
extern "C" __m512 _ZGVeN16v_expf(__m512);
#endif
#if defined(__AVX512F__) && defined(TOKENFLOW_HAVE_SLEEF)
#include <immintrin.h>
#include <sleef.h>
#define TOKENFLOW_BENCH_SLEEF 1
#endif

namespace {

constexpr int kCount = 4096;

// Arguments in [-20, 0]; or, with `special`, a masked attention tile's: a quarter -inf (masked
// logits), the rest below the underflow threshold (logits far below the row maximum).
template <class T>
std::vector<T> arguments(bool special = false) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(-20.0, 0.0), deep(-1000.0, -800.0);
  std::vector<T> x(kCount);
  for (int j = 0; j < kCount; ++j)
    x[j] = static_cast<T>(!special ? u(rng) : (j % 4 == 0 ? -INFINITY : (sizeof(T) == 4 ? deep(rng) / 8 : deep(rng))));
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
  const auto x = arguments<T>(state.range(0) != 0);
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
  const auto x = arguments<double>(state.range(0) != 0);
  std::vector<double> y(kCount);
  for (auto _ : state) {
    for (int j = 0; j < kCount; j += 8) _mm512_storeu_pd(&y[j], _ZGVeN8v_exp(_mm512_loadu_pd(&x[j])));
    benchmark::ClobberMemory();
  }
  finish(state, y);
}
void BM_ExpLibmvec_f32(benchmark::State& state) {
  const auto x = arguments<float>(state.range(0) != 0);
  std::vector<float> y(kCount);
  for (auto _ : state) {
    for (int j = 0; j < kCount; j += 16) _mm512_storeu_ps(&y[j], _ZGVeN16v_expf(_mm512_loadu_ps(&x[j])));
    benchmark::ClobberMemory();
  }
  finish(state, y);
}
BENCHMARK(BM_ExpLibmvec_f64)->ArgName("special")->Arg(0)->Arg(1);
BENCHMARK(BM_ExpLibmvec_f32)->ArgName("special")->Arg(0)->Arg(1);
#endif
#if TOKENFLOW_BENCH_SLEEF
void BM_ExpSleef_f64(benchmark::State& state) {
  const auto x = arguments<double>(state.range(0) != 0);
  std::vector<double> y(kCount);
  for (auto _ : state) {
    for (int j = 0; j < kCount; j += 8) _mm512_storeu_pd(&y[j], Sleef_expd8_u10avx512f(_mm512_loadu_pd(&x[j])));
    benchmark::ClobberMemory();
  }
  finish(state, y);
}
void BM_ExpSleef_f32(benchmark::State& state) {
  const auto x = arguments<float>(state.range(0) != 0);
  std::vector<float> y(kCount);
  for (auto _ : state) {
    for (int j = 0; j < kCount; j += 16) _mm512_storeu_ps(&y[j], Sleef_expf16_u10avx512f(_mm512_loadu_ps(&x[j])));
    benchmark::ClobberMemory();
  }
  finish(state, y);
}
BENCHMARK(BM_ExpSleef_f64)->ArgName("special")->Arg(0)->Arg(1);
BENCHMARK(BM_ExpSleef_f32)->ArgName("special")->Arg(0)->Arg(1);

// SLEEF in the fused loop, vectorized by hand (8 doubles / 16 floats per call).
template <class T>
void fused_rows_sleef(tokenflow::bench::FusedRowData<T>& data) {
  constexpr int n = tokenflow::bench::FusedRowData<T>::kKeys, L = 64 / sizeof(T);
  const T* kx = data.kx.data();
  const T* ky = data.ky.data();
  const T* a = data.a.data();
  for (int i = 0; i < tokenflow::bench::FusedRowData<T>::kQueries; ++i) {
    const T qx = T(0.7) * kx[i], qy = T(0.7) * ky[i];
    T m = -1e30f;
#pragma omp simd reduction(max : m)
    for (int j = 0; j < n; ++j) m = std::max(m, qx * kx[j] + qy * ky[j]);
    T z = 0, sx = 0, sy = 0;
    alignas(64) T e[L];
    for (int j0 = 0; j0 < n; j0 += L) {
#pragma omp simd
      for (int l = 0; l < L; ++l) e[l] = qx * kx[j0 + l] + qy * ky[j0 + l] - m;
      if constexpr (sizeof(T) == 8)
        _mm512_store_pd(e, Sleef_expd8_u10avx512f(_mm512_load_pd(e)));
      else
        _mm512_store_ps(e, Sleef_expf16_u10avx512f(_mm512_load_ps(e)));
#pragma omp simd reduction(+ : z, sx, sy)
      for (int l = 0; l < L; ++l) {
        const T w = a[j0 + l] * e[l];
        z += w;
        sx += w * kx[j0 + l];
        sy += w * ky[j0 + l];
      }
    }
    data.out[3 * i] = z;
    data.out[3 * i + 1] = sx;
    data.out[3 * i + 2] = sy;
  }
}
template <class T>
void BM_FusedRowSleef(benchmark::State& state) {
  tokenflow::bench::FusedRowData<T> data;
  for (auto _ : state) {
    fused_rows_sleef(data);
    benchmark::DoNotOptimize(data.out.data());
  }
  state.SetItemsProcessed(state.iterations() * data.kKeys * data.kQueries);
}
BENCHMARK_TEMPLATE(BM_FusedRowSleef, double);
BENCHMARK_TEMPLATE(BM_FusedRowSleef, float);
#endif

template <class T>
void BM_FusedRowPolynomial(benchmark::State& state) {
  tokenflow::bench::FusedRowData<T> data;
  for (auto _ : state) {
    tokenflow::bench::fused_rows(data, [](T x) { return tokenflow::simd::exp_poly(x); });
    benchmark::DoNotOptimize(data.out.data());
  }
  state.SetItemsProcessed(state.iterations() * data.kKeys * data.kQueries);
}
BENCHMARK_TEMPLATE(BM_FusedRowPolynomial, double);
BENCHMARK_TEMPLATE(BM_FusedRowPolynomial, float);

BENCHMARK_TEMPLATE(BM_ExpScalarLibm, double);
BENCHMARK_TEMPLATE(BM_ExpScalarLibm, float);
BENCHMARK_TEMPLATE(BM_ExpPolynomial, double)->ArgName("special")->Arg(0)->Arg(1);
BENCHMARK_TEMPLATE(BM_ExpPolynomial, float)->ArgName("special")->Arg(0)->Arg(1);

}  // namespace
