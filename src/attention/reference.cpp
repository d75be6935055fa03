// The reference attention: plain double loops in float64, every n x n matrix formed explicitly.
// Written independently of the evaluators and the streaming driver (it shares no code with them
// beyond the parameter structs), so that tests against it can catch their mistakes.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "tokenflow/attention.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {

Eigen::MatrixXd reference_attention_matrix(const AttentionParams& params, const Measure<double>& mu,
                                           double t, int head) {
  const Eigen::Index n = mu.n(), d = mu.d();
  const HeadBlocks& B = params.layer_at(t).heads.at(static_cast<std::size_t>(head));
  const Eigen::VectorXd a = attention_weights(mu, params.sink);
  Eigen::VectorXd pos = mu.has_positions() ? mu.positions : default_positions<double>(n);
  const bool causal = params.mask == Mask::causal;
  const int k = static_cast<int>(B.Q.rows());

  // The projections q_i = Q x_i and k_j = K x_j (n x k each), then the logits s_ij from them.
  Eigen::MatrixXd q(n, k), kx(n, k);
  for (Eigen::Index i = 0; i < n; ++i)
    for (int r = 0; r < k; ++r) {
      double qi = 0.0, ki = 0.0;
      for (Eigen::Index c = 0; c < d; ++c) {
        qi += B.Q(r, c) * mu.points(i, c);
        ki += B.K(r, c) * mu.points(i, c);
      }
      q(i, r) = qi;
      kx(i, r) = ki;
    }
  Eigen::MatrixXd s(n, n);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = 0; j < n; ++j) {
      double value = 0.0;
      for (int r = 0; r < k; ++r)
        value += params.kind == AttentionKind::l2 ? -(q(i, r) - kx(j, r)) * (q(i, r) - kx(j, r))
                                                  : q(i, r) * kx(j, r);
      s(i, j) = params.scale * value;
    }
  }

  Eigen::MatrixXd w = Eigen::MatrixXd::Zero(n, n);
  switch (params.kind) {
    case AttentionKind::softmax:
    case AttentionKind::l2:
      for (Eigen::Index i = 0; i < n; ++i) {
        double largest = -INFINITY;
        for (Eigen::Index j = 0; j < n; ++j)
          if (!causal || pos[j] <= pos[i]) largest = std::max(largest, s(i, j));
        double z = 0.0;
        for (Eigen::Index j = 0; j < n; ++j)
          if (!causal || pos[j] <= pos[i]) z += a[j] * std::exp(s(i, j) - largest);
        for (Eigen::Index j = 0; j < n; ++j)
          if (!causal || pos[j] <= pos[i]) w(i, j) = a[j] * std::exp(s(i, j) - largest) / z;
      }
      break;
    case AttentionKind::sigmoid: {
      const double bias = params.sigmoid_bias(n);
      for (Eigen::Index i = 0; i < n; ++i)
        for (Eigen::Index j = 0; j < n; ++j)
          if (!causal || pos[j] <= pos[i]) w(i, j) = a[j] / (1.0 + std::exp(-(s(i, j) + bias)));
      break;
    }
    case AttentionKind::linear:
      for (Eigen::Index i = 0; i < n; ++i)
        for (Eigen::Index j = 0; j < n; ++j)
          if (!causal || pos[j] <= pos[i]) w(i, j) = a[j] * s(i, j);
      break;
    case AttentionKind::sinkhorn: {
      // K = Q with scale > 0: the cost is symmetric, and the reference is the plain symmetric loop
      // (the field solves it the same way: attention.hpp); s is symmetrized first, since s_ij and
      // s_ji round differently. Otherwise the plain alternating loop.
      const bool symmetric = B.Q == B.K && params.scale > 0.0;
      const Eigen::MatrixXd cost = symmetric ? Eigen::MatrixXd(-0.5 * (s + s.transpose())) : Eigen::MatrixXd(-s);
      // The plain loop's rate near its fixed point is the square of the second singular value of
      // diag(a)^-1/2 P diag(a)^-1/2 for the plan P: on a plan close to block-diagonal (tokens in
      // clusters the cost barely connects, at a small epsilon) it is so near 1 that 10^5
      // iterations leave a marginal error of 1e-7. The loop gets a budget and
      // Newton's method on the dual finishes what it leaves (the fixed point is the same plan).
      const int plain_budget = std::min(params.sinkhorn_max_iter, 1000);
      SinkhornResult r = symmetric ? reference_sinkhorn_symmetric(cost, a, params.epsilon,
                                                                  params.sinkhorn_tol, plain_budget)
                                   : reference_sinkhorn(cost, a, a, params.epsilon,
                                                        params.sinkhorn_tol, plain_budget);
      if (!r.converged)
        r = reference_sinkhorn_newton(cost, a, a, params.epsilon, params.sinkhorn_tol,
                                      std::move(r));
      if (!r.converged)  // no plan to return: a numerical failure (Python: FloatingPointError), not bad input
        throw NumericalFailure(
            "sinkhorn attention: the reference Sinkhorn did not reach attention.sinkhorn_tol (marginal error " +
            std::to_string(r.marginal_error) + " at attention.epsilon = " + std::to_string(params.epsilon) +
            "): the logits are too large for this epsilon (rescale the points, Q and K, or raise attention.epsilon)");
      for (Eigen::Index i = 0; i < n; ++i)
        for (Eigen::Index j = 0; j < n; ++j)
          w(i, j) = a[j] * std::exp((r.f[i] + r.g[j] + s(i, j)) / params.epsilon);
      break;
    }
  }
  return w;
}

Points<double> reference_velocity(const AttentionParams& params, const Measure<double>& mu, double t) {
  const Eigen::Index n = mu.n(), d = mu.d();
  const Normalize scheme = params.scheme_at(t);  // mix: Post-LN, then Pre-LN
  // Pre-LN and Peri-LN: the attention sees theta_i = x_i / |x_i| (0 for x_i = 0).
  Measure<double> input = mu;
  if (scheme == Normalize::pre || scheme == Normalize::peri)
    for (Eigen::Index i = 0; i < n; ++i) {
      double sq = 0.0;
      for (Eigen::Index c = 0; c < d; ++c) sq += mu.points(i, c) * mu.points(i, c);
      for (Eigen::Index c = 0; c < d; ++c) input.points(i, c) = sq > 0.0 ? mu.points(i, c) / std::sqrt(sq) : 0.0;
    }
  Points<double> gamma = Points<double>::Zero(n, d);
  for (int h = 0; h < params.heads; ++h) {
    const HeadBlocks& B = params.layer_at(t).heads[static_cast<std::size_t>(h)];
    const Eigen::MatrixXd C = B.W * B.V;  // d x d
    const Eigen::MatrixXd w = reference_attention_matrix(params, input, t, h);
    // Gamma_i += C sum_j w_ij x_j: the weighted sum first (n x d), then C.
    for (Eigen::Index i = 0; i < n; ++i) {
      Eigen::VectorXd wx = Eigen::VectorXd::Zero(d);
      for (Eigen::Index j = 0; j < n; ++j)
        for (Eigen::Index e = 0; e < d; ++e) wx[e] += w(i, j) * input.points(j, e);
      for (Eigen::Index c = 0; c < d; ++c) {
        double value = 0.0;
        for (Eigen::Index e = 0; e < d; ++e) value += C(c, e) * wx[e];
        gamma(i, c) += value;
      }
    }
  }
  for (Eigen::Index i = 0; i < n; ++i) {
    double radial = 0.0, sq = 0.0;
    for (Eigen::Index c = 0; c < d; ++c) {
      radial += gamma(i, c) * mu.points(i, c);
      sq += gamma(i, c) * gamma(i, c);
    }
    // sphere, ngpt: the tangent part Gamma - <Gamma, x> x; peri, ngpt: divided by |Gamma|.
    const bool project = scheme == Normalize::sphere || scheme == Normalize::ngpt;
    const bool unit_length = scheme == Normalize::peri || scheme == Normalize::ngpt;
    const double length = unit_length ? (sq > 0.0 ? std::sqrt(sq) : INFINITY) : 1.0;
    for (Eigen::Index c = 0; c < d; ++c)
      gamma(i, c) = (gamma(i, c) - (project ? radial : 0.0) * mu.points(i, c)) / length;
  }
  return gamma;
}

}  // namespace tokenflow
