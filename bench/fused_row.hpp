// The exp-bound inner loop of a d = 2 softmax attention step, shared by the exponential benchmarks:
// for each query, one pass for the row maximum and one for sum_j a_j e^(s_ij - max) (1, k_j).
// `exp_fn` is called in a `#pragma omp simd` loop, so the compiler vectorizes the loop with
// whatever the callee allows (an inlined polynomial, or a SIMD clone such as libmvec's).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace tokenflow::bench {

template <class T>
struct FusedRowData {
  static constexpr int kKeys = 4096, kQueries = 64;
  std::vector<T> kx, ky, a, out;
  FusedRowData() : kx(kKeys), ky(kKeys), a(kKeys, T(1) / T(kKeys)), out(3 * kQueries) {
    for (int j = 0; j < kKeys; ++j) {
      kx[j] = static_cast<T>(1.5 * std::sin(0.37 * j));
      ky[j] = static_cast<T>(1.5 * std::cos(0.11 * j));
    }
  }
};

template <class T, class Exp>
void fused_rows(FusedRowData<T>& data, const Exp& exp_fn) {
  const T* kx = data.kx.data();
  const T* ky = data.ky.data();
  const T* a = data.a.data();
  constexpr int n = FusedRowData<T>::kKeys;
  for (int i = 0; i < FusedRowData<T>::kQueries; ++i) {
    const T qx = T(0.7) * kx[i], qy = T(0.7) * ky[i];
    T m = -1e30f;
#pragma omp simd reduction(max : m)
    for (int j = 0; j < n; ++j) m = std::max(m, qx * kx[j] + qy * ky[j]);
    T z = 0, sx = 0, sy = 0;
#pragma omp simd reduction(+ : z, sx, sy)
    for (int j = 0; j < n; ++j) {
      const T w = a[j] * exp_fn(qx * kx[j] + qy * ky[j] - m);
      z += w;
      sx += w * kx[j];
      sy += w * ky[j];
    }
    data.out[3 * i] = z;
    data.out[3 * i + 1] = sx;
    data.out[3 * i + 2] = sy;
  }
}

}  // namespace tokenflow::bench
