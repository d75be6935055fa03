// Attention evaluators: each kind written once as (logit, weight), used by every driver
// (the streaming CPU driver here, the MPI driver, and the energy diagnostic).
//
// A normalized kind (softmax, l2) gives a log-weight: the driver forms
//   w_ij = a_j exp(logit_ij) / sum_j' a_j' exp(logit_ij')
// with a running maximum, so no n x n matrix is held and nothing overflows. An unnormalized kind
// (sigmoid, linear, sinkhorn) gives w_ij = a_j weight(logit_ij, i, j) directly.
#pragma once

#include <Eigen/Core>
#include <cmath>

namespace tokenflow::detail {

template <class T>
inline T dot(const T* q, const T* k, int dim) {
  T s = 0;
  for (int c = 0; c < dim; ++c) s += q[c] * k[c];
  return s;
}

// s(x, y) = scale <Q x, K y>;  w = a_j exp(s) / Z
template <class T>
struct SoftmaxEvaluator {
  static constexpr bool normalized = true;
  T scale;
  T logit(const T* q, const T* k, int dim) const { return scale * dot(q, k, dim); }
};

// s(x, y) = -scale |Q x - K y|^2;  w = a_j exp(s) / Z
template <class T>
struct L2Evaluator {
  static constexpr bool normalized = true;
  T scale;
  T logit(const T* q, const T* k, int dim) const {
    T s = 0;
    for (int c = 0; c < dim; ++c) {
      const T diff = q[c] - k[c];
      s += diff * diff;
    }
    return -scale * s;
  }
};

// w = a_j sigma(s + bias), s = scale <Q x, K y>
template <class T>
struct SigmoidEvaluator {
  static constexpr bool normalized = false;
  T scale, bias;
  T logit(const T* q, const T* k, int dim) const { return scale * dot(q, k, dim); }
  T weight(T s, Eigen::Index, Eigen::Index) const { return T(1) / (T(1) + std::exp(-(s + bias))); }
};

// w = a_j s, s = scale <Q x, K y>
template <class T>
struct LinearEvaluator {
  static constexpr bool normalized = false;
  T scale;
  T logit(const T* q, const T* k, int dim) const { return scale * dot(q, k, dim); }
  T weight(T s, Eigen::Index, Eigen::Index) const { return s; }
};

// w = pi_ij / a_i = a_j exp((f_i + g_j + s_ij) / epsilon), with (f, g) the Sinkhorn potentials
// of the self-transport of (a, a) for cost -s (computed by the driver before the sweep).
template <class T>
struct SinkhornEvaluator {
  static constexpr bool normalized = false;
  T scale;
  double epsilon;
  const double* f;
  const double* g;
  T logit(const T* q, const T* k, int dim) const { return scale * dot(q, k, dim); }
  T weight(T s, Eigen::Index i, Eigen::Index j) const {
    return static_cast<T>(std::exp((f[i] + g[j] + static_cast<double>(s)) / epsilon));
  }
};

}  // namespace tokenflow::detail
