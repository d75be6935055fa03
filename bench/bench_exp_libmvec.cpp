// libmvec in context: the fused d = 2 loop (fused_row.hpp) with exp and expf declared with GCC's
// simd attribute, as glibc's <math.h> declares them under -ffast-math, so that the vectorizer
// calls libmvec's SIMD clones (_ZGVeN8v_exp, _ZGVeN16v_expf on AVX-512) from a `#pragma omp simd`
// loop without -ffast-math. Its own translation unit: the declaration changes every exp call here.
#include <benchmark/benchmark.h>

#include <cmath>

#include "fused_row.hpp"

#if defined(TOKENFLOW_HAVE_LIBMVEC)
extern "C" double exp(double) noexcept __attribute__((simd("notinbranch")));
extern "C" float expf(float) noexcept __attribute__((simd("notinbranch")));

namespace {

template <class T>
void BM_FusedRowLibmvec(benchmark::State& state) {
  tokenflow::bench::FusedRowData<T> data;
  for (auto _ : state) {
    if constexpr (sizeof(T) == 8)
      tokenflow::bench::fused_rows(data, [](double x) { return exp(x); });
    else
      tokenflow::bench::fused_rows(data, [](float x) { return expf(x); });
    benchmark::DoNotOptimize(data.out.data());
  }
  state.SetItemsProcessed(state.iterations() * data.kKeys * data.kQueries);
}
BENCHMARK_TEMPLATE(BM_FusedRowLibmvec, double);
BENCHMARK_TEMPLATE(BM_FusedRowLibmvec, float);

}  // namespace
#endif
