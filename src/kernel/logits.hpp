// The logits the tiled sweep (sweep.hpp) forms, and the evaluators of its normalized sums.
//
// The sweep computes, for query q_i against key k_j, a raw logit in one of two forms (in register
// blocks):
//   inner_product:     raw = <q_i, k_j>;
//   squared_distance:  raw = |q_i - k_j|^2.
// An evaluator turns raw into the logit s (logit(raw)) and says what the sweep sums:
//   - normalized = true: the log-weight s; the sweep forms w_ij = a_j exp(s_ij) / sum_j' a_j'
//   exp(s_ij')
//     and log sum_j a_j exp(s_ij) with a running maximum (nothing overflows, no n x m matrix);
//   - normalized = false: weight(s, i, j), and the sweep forms a_j weight(s_ij, i, j) unnormalized.
// logit() and weight() are inline and branch-free: the sweep calls them inside `#pragma omp simd`
// loops, so they vectorize (exponentials through simd::exp_poly, not std::exp).
//
// The two normalized evaluators below are the ones every user of the log-sum-exp shares: softmax
// and L2 attention (src/attention/evaluators.hpp) and the online soft-min of optimal transport
// (src/ot/softmin.cpp).
#pragma once

namespace tokenflow::detail {

enum class LogitForm { inner_product, squared_distance };

// s = <q, k>: log-weights of inner products.
template <class T>
struct InnerProductLogits {
  static constexpr bool normalized = true;
  static constexpr LogitForm form = LogitForm::inner_product;
  T logit(T raw) const { return raw; }
};

// s = -scale |q - k|^2: log-weights of scaled squared distances.
template <class T>
struct ScaledDistanceLogits {
  static constexpr bool normalized = true;
  static constexpr LogitForm form = LogitForm::squared_distance;
  T scale;
  T logit(T raw) const { return -scale * raw; }
};

}  // namespace tokenflow::detail
