// The tiled sweep's definition (sweep.hpp) as plain float64 loops: no tiles, no packing, no running
// maximum across tiles (each row's logits are formed whole, then its maximum taken). The oracle the
// sweep is tested against (tests/cpp/test_sweep.cpp); the parts above it test their drivers against
// references of their own (src/attention/reference.cpp, src/ot/reference.cpp).
//
// For every query i, over the keys j < visible_end[i] (every key when visible_end is empty):
//   normalized evaluators:   y_i = sum_j a_j exp(s_ij) v_j / sum_j a_j exp(s_ij),
//                            log_partition_i = log sum_j a_j exp(s_ij)
//   unnormalized evaluators: y_i = sum_j a_j weight(s_ij, i, j) v_j,  log_partition_i = 0
// with s_ij = logit(raw_ij) and raw_ij = <q_i, k_j> or |q_i - k_j|^2 by the evaluator's form.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "logits.hpp"

namespace tokenflow::detail {

struct ReferenceSweep {
  Eigen::MatrixXd y;              // n x kv
  Eigen::VectorXd log_partition;  // n
};

// q: queries (n x k); keys: m x k; v: values (m x kv, kv may be 0); a: key weights (m, >= 0);
// visible_end: n nondecreasing counts of visible keys, each >= 1 for a normalized evaluator (empty:
// all m). ev: the evaluator with T = double.
template <class Ev>
ReferenceSweep reference_sweep(const Ev& ev, const Eigen::MatrixXd& q, const Eigen::MatrixXd& keys,
                               const Eigen::MatrixXd& v, const Eigen::VectorXd& a,
                               const std::vector<Eigen::Index>& visible_end = {}) {
  // Entry loops over the values, not row blocks: with kv = 0 the matrices hold no data, and a row
  // block of one would offset a null pointer.
  const Eigen::Index n = q.rows(), m = keys.rows(), k = q.cols(), kv = v.cols();
  ReferenceSweep out{Eigen::MatrixXd::Zero(n, v.cols()), Eigen::VectorXd::Zero(n)};
  std::vector<double> s(static_cast<std::size_t>(m));
  for (Eigen::Index i = 0; i < n; ++i) {
    const Eigen::Index end = visible_end.empty() ? m : visible_end[static_cast<std::size_t>(i)];
    for (Eigen::Index j = 0; j < end; ++j) {
      double raw = 0.0;
      for (Eigen::Index c = 0; c < k; ++c)
        raw += Ev::form == LogitForm::inner_product
                   ? q(i, c) * keys(j, c)
                   : (q(i, c) - keys(j, c)) * (q(i, c) - keys(j, c));
      s[static_cast<std::size_t>(j)] = ev.logit(raw);
    }
    if constexpr (Ev::normalized) {
      double top = -std::numeric_limits<double>::infinity();
      for (Eigen::Index j = 0; j < end; ++j) top = std::max(top, s[static_cast<std::size_t>(j)]);
      double z = 0.0;
      for (Eigen::Index j = 0; j < end; ++j) {
        const double w = a[j] * std::exp(s[static_cast<std::size_t>(j)] - top);
        z += w;
        for (Eigen::Index c = 0; c < kv; ++c) out.y(i, c) += w * v(j, c);
      }
      for (Eigen::Index c = 0; c < kv; ++c) out.y(i, c) /= z;
      out.log_partition[i] = top + std::log(z);
    } else {
      for (Eigen::Index j = 0; j < end; ++j) {
        const double w = a[j] * static_cast<double>(ev.weight(s[static_cast<std::size_t>(j)], i, j));
        for (Eigen::Index c = 0; c < kv; ++c) out.y(i, c) += w * v(j, c);
      }
    }
  }
  return out;
}

}  // namespace tokenflow::detail
