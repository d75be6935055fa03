// The stabilized kernel-mode Sinkhorn stage (ot_kernel.hpp): P~ in float or double, the fused
// row pass, absorption and adaptive over-relaxation.
#include <algorithm>
#include <cmath>
#include <limits>
#include <Eigen/QR>

#include "../simd/exp.hpp"
#include "../simd/sum.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/ot_kernel.hpp"
#include "anderson.hpp"
#include "parallel_pairs.hpp"

namespace tokenflow {

namespace {

double max_abs_log(const Eigen::VectorXd& s) {
  double worst = 0.0;
  for (double v : s) worst = std::max(worst, std::abs(std::log(v)));
  return worst;  // NaN-free: a zero or infinite entry gives +inf
}

bool all_positive_finite(const Eigen::VectorXd& s) {
  for (double v : s)
    if (!(v > 0.0) || !std::isfinite(v)) return false;
  return true;
}

}  // namespace

template <class Scalar>
bool ScalingKernel<Scalar>::assign(const SoftMin& op, const Eigen::VectorXd& log_a,
                                   const Eigen::VectorXd& log_b, const Eigen::VectorXd& f,
                                   const Eigen::VectorXd& g, double eps) {
  n_ = op.rows();
  m_ = op.cols();
  data_.resize(static_cast<std::size_t>(n_ * m_));
  const double inv = 1.0 / eps;
  // The exponent x_ij = hf_i + hg_j - C_ij / eps, hf = log a + f / eps, hg = log b + g / eps.
  const Eigen::VectorXd hf = log_a + f * inv, hg = log_b + g * inv;
  const double* hg_data = hg.data();
  const Eigen::Index m = m_;
  std::vector<char> row_ok(static_cast<std::size_t>(n_), 1);
  std::vector<double> row_cost_max(static_cast<std::size_t>(n_), 0.0);
  constexpr double smallest = static_cast<double>(std::numeric_limits<Scalar>::min());
  constexpr double largest = static_cast<double>(std::numeric_limits<Scalar>::max());
  op.for_each_row([&](Eigen::Index i, const double* c) {
    // Locals, not captures: through a captured reference GCC vectorizes with gathers.
    Scalar* __restrict out = data_.data() + i * m;
    const double* __restrict hgj = hg_data;
    const double h = hf[i], scale = inv;
    const Eigen::Index count = m;
    // The exponentials into a double row first, then rounded: as one loop, GCC does not
    // vectorize the float instantiation ("control flow in loop").
    thread_local std::vector<double> row_buffer;
    row_buffer.resize(static_cast<std::size_t>(count));
    double* __restrict p = row_buffer.data();
#pragma omp simd
    for (Eigen::Index j = 0; j < count; ++j) p[j] = simd::exp_poly(h + hgj[j] - c[j] * scale);
#pragma omp simd
    for (Eigen::Index j = 0; j < count; ++j)
      out[j] = static_cast<Scalar>(p[j] * static_cast<double>(p[j] >= smallest));  // no denormals
    // Separate loops: with max reductions in the loop above GCC runs it scalar.
    int bad = 0;  // +inf or NaN
    double cmax = 0.0;
#pragma omp simd reduction(+ : bad)
    for (Eigen::Index j = 0; j < count; ++j) bad += !(static_cast<double>(out[j]) <= largest);
#pragma omp simd reduction(max : cmax)
    for (Eigen::Index j = 0; j < count; ++j) cmax = std::max(cmax, std::abs(c[j]));
    row_ok[static_cast<std::size_t>(i)] = bad == 0;  // false for +inf and NaN
    row_cost_max[static_cast<std::size_t>(i)] = cmax;
  });
  // Each of the five terms of x is rounded once (2^-53 relative) and the sum three times, so x
  // is off by at most 4 * 2^-53 * (sum of their sizes) (absolute), which is the relative error
  // of exp(x) to first order; exp_poly adds kExpUlps units, the rounding to Scalar one unit.
  const double terms = hf.cwiseAbs().maxCoeff() + hg.cwiseAbs().maxCoeff() +
                       *std::max_element(row_cost_max.begin(), row_cost_max.end()) * inv;
  entry_error_ = kernel_unit_roundoff<Scalar>() + (simd::kExpUlps + 4.0 * terms) * 0x1p-53;
  return std::all_of(row_ok.begin(), row_ok.end(), [](char ok) { return ok != 0; });
}

template <class Scalar>
bool ScalingKernel<Scalar>::rescale(const Eigen::VectorXd& u, const Eigen::VectorXd& v) {
  constexpr double smallest = static_cast<double>(std::numeric_limits<Scalar>::min());
  constexpr double largest = static_cast<double>(std::numeric_limits<Scalar>::max());
  const Eigen::Index m = m_;
  const double* vd = v.data();
  int bad = 0;
#pragma omp parallel for schedule(dynamic, pair_chunk(static_cast<double>(m))) reduction(+ : bad) \
    if (parallel_pairs(static_cast<double>(n_ * m_)))
  for (Eigen::Index i = 0; i < n_; ++i) {
    Scalar* __restrict p = data_.data() + i * m;
    const double* __restrict vj = vd;
    const double ui = u[i];
    int row_bad = 0;
#pragma omp simd reduction(+ : row_bad)
    for (Eigen::Index j = 0; j < m; ++j) {
      const double x = static_cast<double>(p[j]) * ui * vj[j];
      row_bad += !(x <= largest);
      p[j] = static_cast<Scalar>(x * static_cast<double>(x >= smallest));  // no denormals
    }
    bad += row_bad;
  }
  return bad == 0;
}

template <class Scalar>
void ScalingKernel<Scalar>::multiply(const Eigen::VectorXd& v, Eigen::VectorXd& out) const {
  out.resize(n_);
  const double* vd = v.data();
  const Eigen::Index m = m_;
#pragma omp parallel for schedule(dynamic, pair_chunk(static_cast<double>(m))) if (parallel_pairs(static_cast<double>(n_ * m_)))
  for (Eigen::Index i = 0; i < n_; ++i) {
    const Scalar* p = row(i);
    out[i] = simd::ordered_sum(m, [&](Eigen::Index j) { return static_cast<double>(p[j]) * vd[j]; });
  }
}

template <class Scalar>
void ScalingKernel<Scalar>::sum_blocks(Eigen::VectorXd& out) const {
  const Eigen::Index blocks = (n_ + kRowBlock - 1) / kRowBlock, m = m_;
  out.resize(m_);
  const double* sums = block_sums_.data();
  double* o = out.data();
#pragma omp parallel for schedule(dynamic, pair_chunk(256.0 * static_cast<double>(blocks))) \
    if (parallel_pairs(static_cast<double>(n_ * m_)))
  for (Eigen::Index j0 = 0; j0 < m; j0 += 256) {
    const Eigen::Index j1 = std::min(m, j0 + 256);
    for (Eigen::Index j = j0; j < j1; ++j) o[j] = sums[j];
    for (Eigen::Index k = 1; k < blocks; ++k)
#pragma omp simd
      for (Eigen::Index j = j0; j < j1; ++j) o[j] += sums[k * m + j];
  }
}

template <class Scalar>
void ScalingKernel<Scalar>::multiply_transposed(const Eigen::VectorXd& u, Eigen::VectorXd& out) const {
  const Eigen::Index blocks = (n_ + kRowBlock - 1) / kRowBlock, m = m_;
  block_sums_.resize(static_cast<std::size_t>(blocks * m_));
#pragma omp parallel for schedule(dynamic, pair_chunk(static_cast<double>(kRowBlock * m))) \
    if (parallel_pairs(static_cast<double>(n_ * m_)))
  for (Eigen::Index k = 0; k < blocks; ++k) {
    double* w = block_sums_.data() + k * m;
    std::fill(w, w + m, 0.0);
    for (Eigen::Index i = k * kRowBlock; i < std::min(n_, (k + 1) * kRowBlock); ++i) {
      const Scalar* p = row(i);
      const double ui = u[i];
#pragma omp simd
      for (Eigen::Index j = 0; j < m; ++j) w[j] += ui * static_cast<double>(p[j]);
    }
  }
  sum_blocks(out);
}

template <class Scalar>
double ScalingKernel<Scalar>::fused_pass(const Eigen::VectorXd& a, const Eigen::VectorXd& v_relaxed,
                                         const Eigen::VectorXd& v_exact, double omega,
                                         const Eigen::VectorXd& u, Eigen::VectorXd& u_next,
                                         Eigen::VectorXd& column_sums) const {
  const Eigen::Index blocks = (n_ + kRowBlock - 1) / kRowBlock, m = m_;
  block_sums_.resize(static_cast<std::size_t>(blocks * m_));
  u_next.resize(n_);
  std::vector<double> block_error(static_cast<std::size_t>(blocks));
  const bool one_dot = &v_relaxed == &v_exact;
  const double* vr = v_relaxed.data();
  const double* ve = v_exact.data();
#pragma omp parallel for schedule(dynamic, pair_chunk(static_cast<double>(kRowBlock * m))) \
    if (parallel_pairs(static_cast<double>(n_ * m_)))
  for (Eigen::Index k = 0; k < blocks; ++k) {
    double* w = block_sums_.data() + k * m;
    std::fill(w, w + m, 0.0);
    double error = 0.0;
    for (Eigen::Index i = k * kRowBlock; i < std::min(n_, (k + 1) * kRowBlock); ++i) {
      const Scalar* p = row(i);
      double s_relaxed = 0.0, s_exact = 0.0;
      // Sums in a fixed order (simd/sum.hpp): the same bits at any address.
      if (one_dot) {
        s_exact = simd::ordered_sum(m, [&](Eigen::Index j) { return static_cast<double>(p[j]) * ve[j]; });
        s_relaxed = s_exact;
      } else {
        simd::ordered_sum2(
            m,
            [&](Eigen::Index j, double& relaxed, double& exact) {
              const double pj = static_cast<double>(p[j]);
              relaxed += pj * vr[j];
              exact += pj * ve[j];
            },
            s_relaxed, s_exact);
      }
      error += std::abs(u[i] * s_exact - a[i]);
      // Eq. (6) of Thibault et al. in scaling form: u^(1 - w) (a / P~ v)^w.
      const double plain = a[i] / s_relaxed;
      const double ui = omega == 1.0 ? plain : std::exp((1.0 - omega) * std::log(u[i]) + omega * std::log(plain));
      u_next[i] = ui;
#pragma omp simd
      for (Eigen::Index j = 0; j < m; ++j) w[j] += ui * static_cast<double>(p[j]);
    }
    block_error[static_cast<std::size_t>(k)] = error;
  }
  sum_blocks(column_sums);
  double error = 0.0;
  for (double e : block_error) error += e;
  return error;
}

template class ScalingKernel<float>;
template class ScalingKernel<double>;

namespace {

// The scalings of one kernel stage (ot_kernel.hpp): the plan is pi = diag(u) P~ diag(v) with u
// (n) and v_exact = b / P~^T u (m), the column scaling of the column-exact plan; v_relaxed (m)
// is the column scaling the next row step uses (relaxed or extrapolated; v_exact when w = 1).
// f (n) and g (m) are the potentials P~ is built from; result collects what the stage reports.
template <class Scalar>
struct Scalings {
  const SoftMin& op;
  const Eigen::VectorXd& a;
  const Eigen::VectorXd& b;
  double eps;
  const KernelStageOptions& options;
  Eigen::VectorXd& f;
  Eigen::VectorXd& g;
  ScalingKernel<Scalar>& kernel;
  Eigen::VectorXd log_a = a.array().log(), log_b = b.array().log();
  Eigen::VectorXd u = Eigen::VectorXd::Ones(op.rows()), u_next = Eigen::VectorXd(op.rows());
  Eigen::VectorXd column_sums = Eigen::VectorXd(op.cols()), v_exact = Eigen::VectorXd(op.cols());
  Eigen::VectorXd v_relaxed = Eigen::VectorXd::Ones(op.cols());
  double target = 0.0;  // the stopping rule on the estimated error (KernelStageOptions::tol)
  KernelStageResult result = {};

  // Builds P~ from (f, g) and v_exact = b / P~^T 1 (exact for u = 1 in the rounded kernel: g is
  // exact for f up to rounding). False when an entry or a scaling is out of range.
  bool start() {
    if (!kernel.assign(op, log_a, log_b, f, g, eps)) return false;
    const double d = kernel.entry_error();
    target = std::max(options.tol - 3.0 * d * (1.0 + options.tol), 0.5 * options.tol);
    kernel.multiply_transposed(u, column_sums);
    v_exact = b.cwiseQuotient(column_sums);
    return all_positive_finite(v_exact);
  }

  // Absorbs u and v_relaxed into (f, g) and rebuilds P~; v_exact follows (b / P~^T 1). in_place:
  // P~_ij *= u_i v_j (one pass over P~, no exponentials and no C) instead of the rebuild (see
  // `stale` in anderson_iteration for when that is allowed). False when out of range.
  bool absorb(bool in_place) {
    ++result.absorptions;
    if (in_place && !kernel.rescale(u, v_relaxed)) return false;
    for (Eigen::Index i = 0; i < f.size(); ++i) f[i] += eps * std::log(u[i]);
    for (Eigen::Index j = 0; j < g.size(); ++j) g[j] += eps * std::log(v_relaxed[j]);
    u.setOnes();
    v_relaxed.setOnes();
    if (!in_place && !kernel.assign(op, log_a, log_b, f, g, eps)) return false;
    kernel.multiply_transposed(u, column_sums);
    v_exact = b.cwiseQuotient(column_sums);
    return all_positive_finite(v_exact);
  }

  bool scalings_large() const {
    return std::max({max_abs_log(u), max_abs_log(v_relaxed), max_abs_log(v_exact)}) > options.absorb_threshold;
  }

  enum class Next { iterate, stop, fail };
  // After the fused pass of iteration `it` with estimated error `error`: counts it, then fail
  // (error or a new scaling out of range), stop (below target and may_stop: converged; or the
  // last iteration, keeping (u, v_exact), which `error` describes) or iterate (u advanced).
  Next after_pass(int it, double error, bool may_stop) {
    ++result.iterations;
    result.marginal_error = error;
    if (!std::isfinite(error)) return Next::fail;
    if (options.progress && !options.progress(result.iterations, error)) throw Cancelled();
    if (error < target && may_stop) {
      result.status = StageStatus::converged;
      return Next::stop;
    }
    if (it + 1 == options.max_iterations) return Next::stop;
    if (!all_positive_finite(u_next) || !all_positive_finite(column_sums)) return Next::fail;
    u.swap(u_next);
    return Next::iterate;
  }

  // The potentials of the column-exact plan (u, v_exact) into (f, g), when finite; else failed.
  KernelStageResult finish(bool ok) {
    if (!ok) result.status = StageStatus::failed;
    if (all_positive_finite(u) && all_positive_finite(v_exact)) {
      for (Eigen::Index i = 0; i < f.size(); ++i) f[i] += eps * std::log(u[i]);
      for (Eigen::Index j = 0; j < g.size(); ++j) g[j] += eps * std::log(v_exact[j]);
    } else {
      result.status = StageStatus::failed;
    }
    return result;
  }
};

// The Anderson-accelerated iteration. Safeguards, as the log-domain loop's (stages.cpp,
// LogDomainStep): when the error grows above twice the best seen since the last restart, or when
// `anderson_depth` iterations in a row found no new best (a stalled extrapolation), the history is
// dropped and the plain step x_{k+1} = G(x_k) taken; each restart starts its own best. Without the
// second rule a 60 x 50 problem at eps = 0.03 (x, y ~ N(0, I_3), weights within 1.4x, 1 draw in
// about 400) stalled at error 0.0124 for 100 000 iterations; the plain loop converges in 1732. Far from convergence (error
// above kInPlaceError) an absorption rescales P~ in place: each such rescaling adds one rounding
// per entry and keeps the entries that were set to 0 at 0, so P~ no longer satisfies
// entry_error() ("stale"). Before the error estimate may stop the stage, a stale P~ is rebuilt
// from C and (f, g) (an ordinary absorption), so the stopping rule (KernelStageOptions::tol)
// always runs on a fresh P~. kInPlaceError is far above any tol the float kernel serves, so the
// iterates it steers are early ones only. Returns false when the stage failed.
template <class Scalar>
bool anderson_iteration(Scalings<Scalar>& s) {
  constexpr double kInPlaceError = 1e-2;
  const Eigen::Index m = s.b.size();
  AndersonHistory history(s.options.anderson_depth, s.b);
  Eigen::VectorXd x = Eigen::VectorXd::Zero(m), G(m), R(m);
  double best = std::numeric_limits<double>::infinity();
  int since_best = 0;
  bool stale = false;
  for (int it = 0; it < s.options.max_iterations; ++it) {
    const double error = s.kernel.fused_pass(s.a, s.v_relaxed, s.v_exact, 1.0, s.u, s.u_next, s.column_sums);
    const auto next = s.after_pass(it, error, !stale);
    if (next != Scalings<Scalar>::Next::iterate) return next == Scalings<Scalar>::Next::stop;
    for (Eigen::Index j = 0; j < m; ++j) {
      s.v_exact[j] = s.b[j] / s.column_sums[j];
      G[j] = std::log(s.v_exact[j]);
    }
    R = G - x;
    if (error > 2.0 * best || since_best >= s.options.anderson_depth) {
      history.clear();
      best = std::numeric_limits<double>::infinity();
      since_best = 0;
    }
    if (error < best) {
      best = error;
      since_best = 0;
    } else {
      ++since_best;
    }
    history.step(G, R, x);
    for (Eigen::Index j = 0; j < m; ++j) s.v_relaxed[j] = std::exp(x[j]);
    if ((stale && error < kInPlaceError) || s.scalings_large()) {
      const Eigen::VectorXd shift = x;
      stale = s.options.in_place_absorption && error >= kInPlaceError;
      if (!s.absorb(stale)) return false;
      x.setZero();
      history.shift(shift);
    }
  }
  return true;
}

// Over-relaxation with Lehmann et al.'s adaptive w (ot_kernel.hpp): plain iterations from
// kWarmup on estimate theta = (e_k / e_{k - kSpan})^(1 / kSpan) and switch to w_opt; later rates
// raise w (Young's relation), and a growing error falls back to plain Sinkhorn for good.
class AdaptiveOmega {
 public:
  explicit AdaptiveOmega(double fixed) : adaptive_(fixed == 0.0), estimating_(adaptive_), omega_(adaptive_ ? 1.0 : fixed) {}
  double omega() const { return omega_; }

  // After an iteration with `error`: updates w; true when the relaxed sequence must restart from
  // the exact half-step (v_relaxed = v_exact).
  bool update(double error) {
    errors_.push_back(error);
    const int k = static_cast<int>(errors_.size()) - 1;
    if (estimating_ && k >= kWarmup) {
      const double theta = rate(k);
      if (!(theta > 0.0 && theta < 1.0)) return false;
      omega_ = optimal(theta);  // Lehmann et al., Eq. (4): the optimal w for the local rate theta
      estimating_ = false;
      switched_at_ = k;
      error_at_switch_ = error;
      return true;
    }
    if (adaptive_ && omega_ > 1.0 && error > 1e2 * error_at_switch_) {
      omega_ = 1.0;  // a safeguard: over-relaxation is only locally convergent; plain Sinkhorn is global
      done_ = true;
      return true;
    }
    if (adaptive_ && !done_ && omega_ > 1.0 && k >= switched_at_ + 2 * kSpan && (k - switched_at_) % kSpan == 0)
      raise(k);
    return false;
  }

 private:
  static constexpr int kWarmup = 20, kSpan = 10;
  static constexpr double kMaxOmega = 1.9;
  double rate(int k) const { return std::pow(errors_[k] / errors_[k - kSpan], 1.0 / kSpan); }
  static double optimal(double theta) { return std::min(kMaxOmega, 2.0 / (1.0 + std::sqrt(1.0 - theta))); }

  // The early iterations underestimate theta (the fast modes decay first). Below the optimal w
  // the relaxed rate rho satisfies Young's relation (rho + w - 1)^2 = rho w^2 theta (SOR theory,
  // which the Sinkhorn iteration follows locally: Lehmann et al., Sec. 3), so a rate measured
  // above w - 1 gives a larger theta and a larger w.
  void raise(int k) {
    const double rho = rate(k);
    if (!(rho > 1.05 * (omega_ - 1.0) && rho < 1.0)) return;
    const double theta = (rho + omega_ - 1.0) * (rho + omega_ - 1.0) / (rho * omega_ * omega_);
    if (theta < 1.0) omega_ = std::max(omega_, optimal(theta));
  }

  bool adaptive_, estimating_;
  double omega_;
  std::vector<double> errors_;
  double error_at_switch_ = 0.0;
  int switched_at_ = 0;
  bool done_ = false;
};

// The over-relaxed iteration (fixed w, or adaptive). Returns false when the stage failed.
template <class Scalar>
bool overrelaxed_iteration(Scalings<Scalar>& s) {
  const Eigen::Index m = s.b.size();
  AdaptiveOmega control(s.options.omega);
  for (int it = 0; it < s.options.max_iterations; ++it) {
    const double omega = control.omega();
    const double error = s.kernel.fused_pass(s.a, omega == 1.0 ? s.v_exact : s.v_relaxed, s.v_exact, omega, s.u,
                                             s.u_next, s.column_sums);
    const auto next = s.after_pass(it, error, true);
    if (next != Scalings<Scalar>::Next::iterate) return next == Scalings<Scalar>::Next::stop;
    // The column half-step: v_exact = b / P~^T u, then relaxed (Eq. (6) of Thibault et al.).
    for (Eigen::Index j = 0; j < m; ++j) {
      const double plain = s.b[j] / s.column_sums[j];
      s.v_relaxed[j] =
          omega == 1.0 ? plain : std::exp((1.0 - omega) * std::log(s.v_relaxed[j]) + omega * std::log(plain));
      s.v_exact[j] = plain;
    }
    if (control.update(error)) s.v_relaxed = s.v_exact;
    s.result.omega = control.omega();
    if (s.scalings_large() && !s.absorb(false)) return false;
  }
  return true;
}

}  // namespace

template <class Scalar>
KernelStageResult kernel_sinkhorn_stage(const SoftMin& op, const Eigen::VectorXd& a,
                                        const Eigen::VectorXd& b, double eps,
                                        const KernelStageOptions& options, Eigen::VectorXd& f,
                                        Eigen::VectorXd& g, ScalingKernel<Scalar>& kernel) {
  Scalings<Scalar> s{op, a, b, eps, options, f, g, kernel};
  if (!s.start()) {
    s.result.status = StageStatus::failed;
    return s.result;
  }
  const bool ok = options.anderson_depth > 0 ? anderson_iteration(s) : overrelaxed_iteration(s);
  return s.finish(ok);
}

template KernelStageResult kernel_sinkhorn_stage<float>(const SoftMin&, const Eigen::VectorXd&,
                                                        const Eigen::VectorXd&, double,
                                                        const KernelStageOptions&, Eigen::VectorXd&,
                                                        Eigen::VectorXd&, ScalingKernel<float>&);
template KernelStageResult kernel_sinkhorn_stage<double>(const SoftMin&, const Eigen::VectorXd&,
                                                         const Eigen::VectorXd&, double,
                                                         const KernelStageOptions&, Eigen::VectorXd&,
                                                         Eigen::VectorXd&, ScalingKernel<double>&);

}  // namespace tokenflow
