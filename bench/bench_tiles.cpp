// The two ways to form one query tile's logits and value products, measured at d = 2, 3, 16, 64:
// the register blocks of src/kernel/sweep.hpp (logit_block, value_rows) and a GEMM per tile
// through Eigen (Map of the same buffers, S = Q_tile K_tile^T and O = P V_tile). One iteration: a
// query tile (kQueryTile rows) against n = 4096 keys in tiles of kKeyTile. GFLOP/s counts
// 2 rows keys d flops. Single thread.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <vector>

#include "../src/kernel/sweep.hpp"

namespace {

using namespace tokenflow::detail;
constexpr Eigen::Index kKeys = 4096;

template <class T>
using RowMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>>;
template <class T>
using ConstRowMap =
    Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>>;

template <class T>
struct TileData {
  int d;
  std::vector<T> q, kt, s, v, out;
  explicit TileData(int d_) : d(d_) {
    using S = SweepShape<T>;
    q.assign(S::kQueryTile * d, T(0.1));
    kt.assign(d * kKeys, T(0.2));
    s.assign(S::kQueryTile * S::kKeyTile, T(0.01));
    v.assign(kKeys * value_stride<T>(d), T(0.3));
    out.assign(S::kQueryTile * value_stride<T>(d), T(0));
  }
};

template <class T>
void set_flops(benchmark::State& state, int d) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * SweepShape<T>::kQueryTile * kKeys * d * 1e-9 *
                                                     double(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}

template <class T>
void BM_LogitsRegisterBlocks(benchmark::State& state) {
  using S = SweepShape<T>;
  TileData<T> t(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    for (Eigen::Index j0 = 0; j0 < kKeys; j0 += S::kKeyTile)
      for (int r0 = 0; r0 < S::kQueryTile; r0 += S::kLogitRows)
        logit_block<T, LogitForm::inner_product, S::kLogitRows, S::kLogitVectors>(
            t.q.data() + r0 * t.d, t.d, t.d, t.kt.data() + j0, kKeys, S::kKeyTile, t.s.data() + r0 * S::kKeyTile,
            S::kKeyTile);
    benchmark::DoNotOptimize(t.s.data());
  }
  set_flops<T>(state, t.d);
}

template <class T>
void BM_LogitsEigenGemm(benchmark::State& state) {
  using S = SweepShape<T>;
  Eigen::setNbThreads(1);
  TileData<T> t(static_cast<int>(state.range(0)));
  ConstRowMap<T> q(t.q.data(), S::kQueryTile, t.d, Eigen::OuterStride<>(t.d));
  RowMap<T> s(t.s.data(), S::kQueryTile, S::kKeyTile, Eigen::OuterStride<>(S::kKeyTile));
  for (auto _ : state) {
    for (Eigen::Index j0 = 0; j0 < kKeys; j0 += S::kKeyTile) {
      ConstRowMap<T> kt(t.kt.data() + j0, t.d, S::kKeyTile, Eigen::OuterStride<>(kKeys));
      s.noalias() = q * kt;
    }
    benchmark::DoNotOptimize(t.s.data());
  }
  set_flops<T>(state, t.d);
}

template <class T>
void BM_ValuesRegisterBlocks(benchmark::State& state) {
  using S = SweepShape<T>;
  TileData<T> t(static_cast<int>(state.range(0)));
  const int stride = value_stride<T>(t.d);
  for (auto _ : state) {
    for (Eigen::Index j0 = 0; j0 < kKeys; j0 += S::kKeyTile)
      for (int r0 = 0; r0 < S::kQueryTile; r0 += S::kValueRows)
        value_rows<T, S::kValueRows>(t.s.data() + r0 * S::kKeyTile, S::kKeyTile, S::kKeyTile,
                                     t.v.data() + j0 * stride, stride, t.out.data() + r0 * stride);
    benchmark::DoNotOptimize(t.out.data());
  }
  set_flops<T>(state, t.d);
}

template <class T>
void BM_ValuesEigenGemm(benchmark::State& state) {
  using S = SweepShape<T>;
  Eigen::setNbThreads(1);
  TileData<T> t(static_cast<int>(state.range(0)));
  const int stride = value_stride<T>(t.d);
  ConstRowMap<T> p(t.s.data(), S::kQueryTile, S::kKeyTile, Eigen::OuterStride<>(S::kKeyTile));
  RowMap<T> out(t.out.data(), S::kQueryTile, t.d, Eigen::OuterStride<>(stride));
  for (auto _ : state) {
    for (Eigen::Index j0 = 0; j0 < kKeys; j0 += S::kKeyTile) {
      ConstRowMap<T> v(t.v.data() + j0 * stride, S::kKeyTile, t.d, Eigen::OuterStride<>(stride));
      out.noalias() = p * v;
    }
    benchmark::DoNotOptimize(t.out.data());
  }
  set_flops<T>(state, t.d);
}

void dims(benchmark::internal::Benchmark* b) {
  for (int d : {2, 3, 16, 64}) b->Arg(d);
  b->ArgName("d");
}
// Values of dimension <= kSmallValues never take this path: the kernel fuses them into its
// exponential loop (sweep.hpp), so the value products are measured at d = 16 and 64.
void wide_dims(benchmark::internal::Benchmark* b) {
  for (int d : {16, 64}) b->Arg(d);
  b->ArgName("d");
}

BENCHMARK_TEMPLATE(BM_LogitsRegisterBlocks, float)->Apply(dims);
BENCHMARK_TEMPLATE(BM_LogitsEigenGemm, float)->Apply(dims);
BENCHMARK_TEMPLATE(BM_LogitsRegisterBlocks, double)->Apply(dims);
BENCHMARK_TEMPLATE(BM_LogitsEigenGemm, double)->Apply(dims);
BENCHMARK_TEMPLATE(BM_ValuesRegisterBlocks, float)->Apply(wide_dims);
BENCHMARK_TEMPLATE(BM_ValuesEigenGemm, float)->Apply(wide_dims);
BENCHMARK_TEMPLATE(BM_ValuesRegisterBlocks, double)->Apply(wide_dims);
BENCHMARK_TEMPLATE(BM_ValuesEigenGemm, double)->Apply(wide_dims);

}  // namespace
