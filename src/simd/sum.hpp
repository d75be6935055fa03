// simd/sum.hpp: sums in a fixed order that still vectorize.
//
// `#pragma omp simd reduction(+ : s)` lets the compiler choose the order of the additions, and
// GCC peels a data-dependent number of leading iterations to align the loads: the same inputs at
// other addresses (another process, the Python module against the CLI) can then round
// differently. Here the order is part of the code: kSumLanes interleaved partial sums (lane l
// takes the terms j = l mod kSumLanes in increasing j), added in a fixed tree at the end. No
// reassociation is needed to vectorize the lanes, so the result is the same at any address.
#pragma once

#include <cstddef>

namespace tokenflow::simd {

inline constexpr int kSumLanes = 8;

inline double add_lanes(const double* lanes) {
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// sum over j in [0, count) of term(j) (term returns double; inlined).
template <class Index, class Term>
inline double ordered_sum(Index count, const Term& term) {
  double lanes[kSumLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  Index j0 = 0;
  for (; j0 + kSumLanes <= count; j0 += kSumLanes)
#pragma omp simd
    for (int l = 0; l < kSumLanes; ++l) lanes[l] += term(j0 + l);
  for (int l = 0; j0 + l < count; ++l) lanes[l] += term(j0 + l);
  return add_lanes(lanes);
}

// The same for two sums over the same terms' index.
template <class Index, class Term>
inline void ordered_sum2(Index count, const Term& term, double& s1, double& s2) {
  double a[kSumLanes] = {0, 0, 0, 0, 0, 0, 0, 0}, b[kSumLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  Index j0 = 0;
  for (; j0 + kSumLanes <= count; j0 += kSumLanes)
#pragma omp simd
    for (int l = 0; l < kSumLanes; ++l) term(j0 + l, a[l], b[l]);
  for (int l = 0; j0 + l < count; ++l) term(j0 + l, a[l], b[l]);
  s1 = add_lanes(a);
  s2 = add_lanes(b);
}

// The same for three sums.
template <class Index, class Term>
inline void ordered_sum3(Index count, const Term& term, double& s1, double& s2, double& s3) {
  double a[kSumLanes] = {0, 0, 0, 0, 0, 0, 0, 0}, b[kSumLanes] = {0, 0, 0, 0, 0, 0, 0, 0},
         c[kSumLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  Index j0 = 0;
  for (; j0 + kSumLanes <= count; j0 += kSumLanes)
#pragma omp simd
    for (int l = 0; l < kSumLanes; ++l) term(j0 + l, a[l], b[l], c[l]);
  for (int l = 0; j0 + l < count; ++l) term(j0 + l, a[l], b[l], c[l]);
  s1 = add_lanes(a);
  s2 = add_lanes(b);
  s3 = add_lanes(c);
}

}  // namespace tokenflow::simd
