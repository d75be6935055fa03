// The streaming attention driver: for each head, project the tokens (Q x, K x, V x), then sweep
// every query over all keys in tiles with a running maximum (normalized kinds), accumulating
// sum_j w_ij V x_j in double. Memory O(n (k + kv)); never an n x n matrix.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "evaluators.hpp"
#include "tokenflow/attention.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {

using RowMatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
struct AttentionField<T>::Workspace {
  Points<T> qx, kx, vx;          // n x k, n x k, n x kv
  RowMatrixD acc;                // n x kv: sum_j w_ij V_h x_j
  std::vector<Eigen::VectorXd> f, g;  // Sinkhorn potentials per head (warm start between calls)
};

namespace {

constexpr int kTile = 256;  // keys per tile: logits of one tile live on the stack

// acc_i = sum_j w_ij v_j for every query i (see evaluators.hpp for w).
template <class T, class Ev>
void sweep(const Ev& ev, const Points<T>& qx, const Points<T>& kx, const Points<T>& vx,
           const Vec<T>& a, const Vec<T>* positions, RowMatrixD& acc) {
  const Eigen::Index n = qx.rows();
  const int dk = static_cast<int>(qx.cols()), dv = static_cast<int>(vx.cols());
  const T* pos = positions ? positions->data() : nullptr;
  constexpr T kMasked = -std::numeric_limits<T>::infinity();
#pragma omp parallel for schedule(static)
  for (Eigen::Index i = 0; i < n; ++i) {
    double* out = &acc(i, 0);
    std::fill(out, out + dv, 0.0);
    const T* q = &qx(i, 0);
    if constexpr (Ev::normalized) {
      double running_max = -std::numeric_limits<double>::infinity(), total = 0.0;
      std::array<T, kTile> s;
      for (Eigen::Index j0 = 0; j0 < n; j0 += kTile) {
        const int len = static_cast<int>(std::min<Eigen::Index>(kTile, n - j0));
        T tile_max = kMasked;
        for (int jj = 0; jj < len; ++jj) {
          const Eigen::Index j = j0 + jj;
          s[jj] = (pos && pos[j] > pos[i]) ? kMasked : ev.logit(q, &kx(j, 0), dk);
          tile_max = std::max(tile_max, s[jj]);
        }
        if (tile_max == kMasked) continue;
        if (static_cast<double>(tile_max) > running_max) {
          const double shrink = std::exp(running_max - static_cast<double>(tile_max));
          total *= shrink;
          for (int c = 0; c < dv; ++c) out[c] *= shrink;
          running_max = static_cast<double>(tile_max);
        }
        for (int jj = 0; jj < len; ++jj) {
          if (s[jj] == kMasked) continue;
          const Eigen::Index j = j0 + jj;
          const double w = static_cast<double>(a[j]) * std::exp(static_cast<double>(s[jj]) - running_max);
          total += w;
          const T* v = &vx(j, 0);
          for (int c = 0; c < dv; ++c) out[c] += w * static_cast<double>(v[c]);
        }
      }
      for (int c = 0; c < dv; ++c) out[c] /= total;
    } else {
      for (Eigen::Index j = 0; j < n; ++j) {
        if (pos && pos[j] > pos[i]) continue;
        const T s = ev.logit(q, &kx(j, 0), dk);
        const double w = static_cast<double>(a[j]) * static_cast<double>(ev.weight(s, i, j));
        const T* v = &vx(j, 0);
        for (int c = 0; c < dv; ++c) out[c] += w * static_cast<double>(v[c]);
      }
    }
  }
}

}  // namespace

template <class T>
AttentionField<T>::AttentionField(AttentionParams params, const Measure<T>& mu)
    : params_(std::move(params)),
      weights_(attention_weights(mu, params_.sink)),
      work_(std::make_unique<Workspace>()) {
  if (params_.mask == Mask::causal)
    positions_ = mu.has_positions() ? mu.positions : default_positions<T>(mu.n());
  const Eigen::Index n = mu.n();
  work_->qx.resize(n, params_.key_dim);
  work_->kx.resize(n, params_.key_dim);
  work_->vx.resize(n, params_.value_dim);
  work_->acc.resize(n, params_.value_dim);
  work_->f.assign(params_.heads, Eigen::VectorXd());
  work_->g.assign(params_.heads, Eigen::VectorXd());
}

template <class T>
AttentionField<T>::~AttentionField() = default;
template <class T>
AttentionField<T>::AttentionField(AttentionField&&) noexcept = default;

template <class T>
void AttentionField<T>::velocity(double t, const Points<T>& x, Points<T>& out) {
  Workspace& w = *work_;
  const AttentionLayer& layer = params_.layer_at(t);
  const Vec<T>* pos = params_.mask == Mask::causal ? &positions_ : nullptr;
  const T scale = static_cast<T>(params_.scale);
  out.setZero(x.rows(), x.cols());
  for (int h = 0; h < params_.heads; ++h) {
    const HeadBlocks& blocks = layer.heads[h];
    w.qx.noalias() = x * blocks.Q.transpose().cast<T>();
    w.kx.noalias() = x * blocks.K.transpose().cast<T>();
    w.vx.noalias() = x * blocks.V.transpose().cast<T>();
    switch (params_.kind) {
      case AttentionKind::softmax:
        sweep(detail::SoftmaxEvaluator<T>{scale}, w.qx, w.kx, w.vx, weights_, pos, w.acc);
        break;
      case AttentionKind::l2:
        sweep(detail::L2Evaluator<T>{scale}, w.qx, w.kx, w.vx, weights_, pos, w.acc);
        break;
      case AttentionKind::sigmoid:
        sweep(detail::SigmoidEvaluator<T>{scale, static_cast<T>(params_.sigmoid_bias(x.rows()))}, w.qx,
              w.kx, w.vx, weights_, pos, w.acc);
        break;
      case AttentionKind::linear:
        sweep(detail::LinearEvaluator<T>{scale}, w.qx, w.kx, w.vx, weights_, pos, w.acc);
        break;
      case AttentionKind::sinkhorn: {
        // Self-transport of (a, a) for the cost -s_ij = -<scale Q x_i, K x_j>: a dot cost
        // between the scaled queries and the keys, solved online (memory O(n k)).
        const Eigen::VectorXd a = weights_.template cast<double>();
        OnlineSoftMin op((w.qx.template cast<double>() * params_.scale).eval(),
                         w.kx.template cast<double>().eval(), CostKind::dot);
        SinkhornOptions opt;
        opt.epsilon = params_.epsilon;
        opt.tol = params_.sinkhorn_tol;
        opt.max_iter = params_.sinkhorn_max_iter;
        opt.f_init = w.f[h];
        opt.g_init = w.g[h];
        SinkhornResult r = sinkhorn(op, a, a, opt);
        if (!r.converged)
          throw std::runtime_error("sinkhorn attention: Sinkhorn did not reach attention.sinkhorn_tol = " +
                                   std::to_string(opt.tol) + " in " + std::to_string(opt.max_iter) +
                                   " iterations (marginal error " + std::to_string(r.marginal_error) +
                                   "); raise attention.sinkhorn_tol or attention.sinkhorn_max_iter");
        w.f[h] = std::move(r.f);
        w.g[h] = std::move(r.g);
        sweep(detail::SinkhornEvaluator<T>{scale, params_.epsilon, w.f[h].data(), w.g[h].data()}, w.qx,
              w.kx, w.vx, weights_, pos, w.acc);
        break;
      }
    }
    // out += acc W_h^T  (n x kv times kv x d)
    out.noalias() += (w.acc * blocks.W.transpose()).template cast<T>();
  }
  if (params_.normalize == Normalize::sphere) {
#pragma omp parallel for schedule(static)
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      const T radial = out.row(i).dot(x.row(i));
      out.row(i) -= radial * x.row(i);
    }
  }
}

template <class T>
void AttentionField<T>::sinkhorn_potentials(std::vector<Eigen::VectorXd>& f, std::vector<Eigen::VectorXd>& g) const {
  f = work_->f;
  g = work_->g;
}

template <class T>
void AttentionField<T>::set_sinkhorn_potentials(const std::vector<Eigen::VectorXd>& f,
                                                const std::vector<Eigen::VectorXd>& g) {
  if (f.size() == work_->f.size() && g.size() == work_->g.size()) {
    work_->f = f;
    work_->g = g;
  }
}

template <class T>
double AttentionField<T>::interaction_energy(double t, const Points<T>& x) const {
  const AttentionLayer& layer = params_.layer_at(t);
  const Eigen::Index n = x.rows();
  const int k = params_.key_dim;
  Eigen::VectorXd row_sums(n);
  double energy = 0.0;
  for (int h = 0; h < params_.heads; ++h) {
    const Points<double> qx = x.template cast<double>() * layer.heads[h].Q.transpose();
    const Points<double> kx = x.template cast<double>() * layer.heads[h].K.transpose();
    const bool l2 = params_.kind == AttentionKind::l2;
    const detail::SoftmaxEvaluator<double> dot{params_.scale};
    const detail::L2Evaluator<double> dist{params_.scale};
#pragma omp parallel for schedule(static)
    for (Eigen::Index i = 0; i < n; ++i) {
      double s = 0.0;
      for (Eigen::Index j = 0; j < n; ++j)
        s += static_cast<double>(weights_[j]) *
             std::exp(l2 ? dist.logit(&qx(i, 0), &kx(j, 0), k) : dot.logit(&qx(i, 0), &kx(j, 0), k));
      row_sums[i] = static_cast<double>(weights_[i]) * s;
    }
    energy += 0.5 * row_sums.sum();  // fixed order: the same for every thread count
  }
  return energy;
}

template class AttentionField<float>;
template class AttentionField<double>;

}  // namespace tokenflow
