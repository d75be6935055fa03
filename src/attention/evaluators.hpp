// Attention evaluators: each kind written once as (logit, weight), used by every driver (the fused
// tile kernel of src/kernel/sweep.hpp for the velocity and the energy, and the MPI driver).
//
// The logit of a pair is formed from the projected query q = Q x and key k = K y in one of the
// kernel's two forms (src/kernel/logits.hpp):
//   inner_product:     raw = <q', k> with the scale folded into the queries, q' = scale Q x;
//   squared_distance:  raw = |q - k|^2.
// The evaluator turns raw into the logit s (logit()), and:
//   - a normalized kind (softmax, l2) gives a log-weight: the kernel forms
//       w_ij = a_j exp(s_ij) / sum_j' a_j' exp(s_ij')
//     with a running maximum, so no n x n matrix is held and nothing overflows;
//   - an unnormalized kind (sigmoid, linear, sinkhorn) gives w_ij = a_j weight(s_ij, i, j).
// weight() is inline and branch-free: the kernels call it inside `#pragma omp simd` loops, so it
// vectorizes (its exponentials are simd::exp_poly, not std::exp).
#pragma once

#include <Eigen/Core>
#include <cmath>

#include "../kernel/logits.hpp"
#include "../simd/exp.hpp"

namespace tokenflow::detail {

// s(x, y) = scale <Q x, K y>;  w = a_j exp(s) / Z  (the scale is in the queries)
template <class T>
using SoftmaxEvaluator = InnerProductLogits<T>;

// s(x, y) = -scale |Q x - K y|^2;  w = a_j exp(s) / Z
template <class T>
using L2Evaluator = ScaledDistanceLogits<T>;

// w = a_j sigma(s + bias), s = scale <Q x, K y>
template <class T>
struct SigmoidEvaluator {
  static constexpr bool normalized = false;
  static constexpr LogitForm form = LogitForm::inner_product;
  T bias;
  T logit(T raw) const { return raw; }
  T weight(T s, Eigen::Index, Eigen::Index) const { return T(1) / (T(1) + simd::exp_poly(-(s + bias))); }
};

// w = a_j s, s = scale <Q x, K y>
template <class T>
struct LinearEvaluator {
  static constexpr bool normalized = false;
  static constexpr LogitForm form = LogitForm::inner_product;
  T logit(T raw) const { return raw; }
  T weight(T s, Eigen::Index, Eigen::Index) const { return s; }
};

// w = pi_ij / a_i = a_j exp((f_i + g_j + s_ij) / epsilon), with (f, g) the Sinkhorn potentials
// of the self-transport of (a, a) for cost -s (computed by the driver before the sweep, indexed
// like the sweep's tokens). The exponent is formed in double.
template <class T>
struct SinkhornEvaluator {
  static constexpr bool normalized = false;
  static constexpr LogitForm form = LogitForm::inner_product;
  double epsilon;
  const double* f;
  const double* g;
  T logit(T raw) const { return raw; }
  T weight(T s, Eigen::Index i, Eigen::Index j) const {
    return static_cast<T>(simd::exp_poly((f[i] + g[j] + static_cast<double>(s)) / epsilon));
  }
};

}  // namespace tokenflow::detail
