// simd/exp.hpp: an exponential written to be inlined into `#pragma omp simd` loops.
//
// exp(x) = 2^k e^r with k = round(x / ln 2) and r = x - k ln 2 (Cody & Waite reduction, ln 2
// split into a head and a tail so that r carries no rounding of k ln 2), |r| <= ln(2)/2, and e^r
// from its Taylor polynomial of degree N (13 for double, 7 for float), evaluated by Horner.
// 2^k is built in the exponent bits. No table, no branch, no call: the compiler vectorizes a loop
// of exp_poly for whatever ISA it targets (AVX-512 here: 8 doubles or 16 floats per instruction),
// and an evaluator can fuse it with the arithmetic around it (bench/bench_exp.cpp compares it
// with glibc's libmvec and with SLEEF; docs/speed.md has the numbers).
//
// Accuracy (derived; tests/cpp/test_simd_exp.cpp measures it on every float in the domain and on
// random doubles):
//   truncation  |r|^(N+1) / (N+1)! * e^|r|: double 0.3466^14 / 14! * 1.42 = 6e-18 (0.05 u),
//                                           float  0.3466^8  /  8! * 1.42 = 7e-9  (0.12 u);
//   reduction   x - k ln2_hi is exact, k ln2_lo is rounded once and ln2_lo carries the
//               rounding of ln 2 (2^-86 in double, 2^-44 in float), so r is within u |r| + tiny:
//               relative error of e^r <= 0.35 u;
//   Horner      N fused steps on terms that decay at least 3x per degree: <= 1.5 u;
//   scaling     2^k is exact.
//   Total: below kExpUlps = 2 units in the last place, for double and float.
// Domain: x < lo returns 0 (results below 2^-1021 in double, 2^-124 in float, are flushed to zero
// instead of becoming denormals, which cost microcode assists on x86); x > hi returns +inf
// (hi is 709.0 in double, 88.0 in float: within 0.2 % and 0.8 % of overflow); NaN returns NaN;
// -inf returns 0 (a masked logit).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace tokenflow::simd {

inline constexpr double kExpUlps = 2.0;  // the bound derived above, in units of the last place

template <class T>
struct ExpConstants;

template <>
struct ExpConstants<double> {
  using Int = std::int64_t;
  static constexpr double lo = -707.0, hi = 709.0;
  static constexpr double log2e = 1.4426950408889634074;
  static constexpr double ln2_hi = 0x1.62e42feep-1;         // ln 2 cut to 32 significant bits
  static constexpr double ln2_lo = 0x1.a39ef35793c76p-33;  // ln 2 - ln2_hi, rounded
  static constexpr double shifter = 0x1.8p52;  // adding it rounds to an integer held in the low bits
  static constexpr int mantissa_bits = 52;
  static constexpr Int exponent_bias = 1023;
};

template <>
struct ExpConstants<float> {
  using Int = std::int32_t;
  static constexpr float lo = -86.0f, hi = 88.0f;
  static constexpr float log2e = 1.44269504f;
  static constexpr float ln2_hi = 0x1.62e4p-1f;           // ln 2 cut to 16 significant bits
  static constexpr float ln2_lo = 0x1.7f7d1cp-20f;         // ln 2 - ln2_hi, rounded
  static constexpr float shifter = 0x1.8p23f;
  static constexpr int mantissa_bits = 23;
  static constexpr Int exponent_bias = 127;
};

// e^r for |r| <= ln(2)/2: Taylor polynomial, Horner form.
inline double exp_reduced(double r) {
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;  // 1/12!
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  return p * r + 1.0;
}

inline float exp_reduced(float r) {
  float p = 1.0f / 5040.0f;  // 1/7!
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  return p * r + 1.0f;
}

// exp(x) for T = float or double; see the header comment for the domain and the accuracy.
template <class T>
inline T exp_poly(T x) {
  using C = ExpConstants<T>;
  using Int = typename C::Int;
  const T clamped = x < C::lo ? C::lo : (x > C::hi ? C::hi : x);
  const T shifted = clamped * C::log2e + C::shifter;  // shifter + round(x / ln 2)
  const T k = shifted - C::shifter;
  // k ln2_hi is exact (|k| < 2^11 in double, 2^8 in float, times a short ln2_hi) and so is its
  // difference with x (Sterbenz), whether or not the compiler fuses the multiply and the add.
  T r = clamped - k * C::ln2_hi;
  r = r - k * C::ln2_lo;
  const Int k_int = std::bit_cast<Int>(shifted) - std::bit_cast<Int>(C::shifter);
  const T scale = std::bit_cast<T>(static_cast<Int>((k_int + C::exponent_bias) << C::mantissa_bits));
  const T result = exp_reduced(r) * scale;
  return x < C::lo ? T(0) : (x > C::hi ? std::numeric_limits<T>::infinity() : result);
}

}  // namespace tokenflow::simd
