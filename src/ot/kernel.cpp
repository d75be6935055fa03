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

namespace tokenflow {

namespace {

// Below this many pairs a pass runs on one thread (as the soft-min operators do).
[[maybe_unused]] constexpr Eigen::Index kParallelMinPairs = 1 << 15;

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
#pragma omp parallel for schedule(static) reduction(+ : bad) if (n_ * m_ >= kParallelMinPairs)
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
#pragma omp parallel for schedule(static) if (n_ * m_ >= kParallelMinPairs)
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
#pragma omp parallel for schedule(static) if (n_ * m_ >= kParallelMinPairs)
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
#pragma omp parallel for schedule(static) if (n_ * m_ >= kParallelMinPairs)
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
#pragma omp parallel for schedule(static) if (n_ * m_ >= kParallelMinPairs)
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

template <class Scalar>
KernelStageResult kernel_sinkhorn_stage(const SoftMin& op, const Eigen::VectorXd& a,
                                        const Eigen::VectorXd& b, double eps,
                                        const KernelStageOptions& options, Eigen::VectorXd& f,
                                        Eigen::VectorXd& g, ScalingKernel<Scalar>& kernel) {
  const Eigen::Index n = op.rows(), m = op.cols();
  const Eigen::VectorXd log_a = a.array().log(), log_b = b.array().log();
  KernelStageResult r;
  if (!kernel.assign(op, log_a, log_b, f, g, eps)) {
    r.failed = true;
    return r;
  }
  const double d = kernel.entry_error();
  const double target = std::max(options.tol - 3.0 * d * (1.0 + options.tol), 0.5 * options.tol);
  Eigen::VectorXd u = Eigen::VectorXd::Ones(n), u_next(n), column_sums(m);
  Eigen::VectorXd v_exact(m), v_relaxed = Eigen::VectorXd::Ones(m);
  // v_exact = b / P~^T u: exact for u in the rounded kernel (g is exact for f up to rounding).
  kernel.multiply_transposed(u, column_sums);
  v_exact = b.cwiseQuotient(column_sums);
  if (!all_positive_finite(v_exact)) {
    r.failed = true;
    return r;
  }
  // Absorbs u and v_relaxed into (f, g) and rebuilds P~; v_exact follows (b / P~^T 1).
  // in_place: P~_ij *= u_i v_j (one pass over P~, no exponentials and no C) instead of the
  // rebuild; see `stale` in the Anderson loop for when that is allowed.
  auto absorb = [&](bool in_place = false) {
    ++r.absorptions;
    if (in_place) {
      if (!kernel.rescale(u, v_relaxed)) return false;
    }
    for (Eigen::Index i = 0; i < n; ++i) f[i] += eps * std::log(u[i]);
    for (Eigen::Index j = 0; j < m; ++j) g[j] += eps * std::log(v_relaxed[j]);
    u.setOnes();
    v_relaxed.setOnes();
    if (!in_place && !kernel.assign(op, log_a, log_b, f, g, eps)) return false;
    kernel.multiply_transposed(u, column_sums);
    v_exact = b.cwiseQuotient(column_sums);
    return all_positive_finite(v_exact);
  };

  if (options.anderson_depth > 0) {
    // Anderson acceleration (Walker and Ni 2011, "Anderson acceleration for fixed-point
    // iterations", SIAM J. Numer. Anal. 49(4), Eq. (1.2), type II) of the fixed-point map of
    // plain Sinkhorn on x = log v: G(x) = log(b / P~^T (a / P~ e^x)), one fused pass per
    // evaluation. With the residuals R_k = G(x_k) - x_k and the last `depth` differences dR, dG:
    //   gamma = argmin |W (R_k - dR gamma)|_2,   x_{k+1} = G(x_k) - dG gamma,
    // W = diag(sqrt(b)) (so that |W R| weighs columns by their mass, as the marginal error does).
    // Safeguard: when the error grows above twice the best seen, the history is dropped and the
    // plain step x_{k+1} = G(x_k) taken.
    const int depth = options.anderson_depth;
    const Eigen::VectorXd weight = b.cwiseSqrt();
    Eigen::MatrixXd dR(m, depth), dG(m, depth);
    Eigen::VectorXd x_prev(m), G_prev(m), R_prev(m), x = Eigen::VectorXd::Zero(m), G(m), R(m);
    int stored = 0, next_col = 0;
    bool have_prev = false, ok_a = true;
    double best = std::numeric_limits<double>::infinity();
    // Far from convergence (error above kInPlaceError) an absorption rescales P~ in place: each
    // such rescaling adds one rounding per entry and keeps the entries that were set to 0 at 0,
    // so P~ no longer satisfies entry_error() ("stale"). Before the error estimate may stop the
    // stage, a stale P~ is rebuilt from C and (f, g) (an ordinary absorption), so the stopping
    // rule (KernelStageOptions::tol) always runs on a fresh P~. kInPlaceError is far above any
    // tol the float kernel serves, so the iterates it steers are early ones only.
    constexpr double kInPlaceError = 1e-2;
    bool stale = false;
    for (int it = 0; it < options.max_iterations; ++it) {
      const double error = kernel.fused_pass(a, v_relaxed, v_exact, 1.0, u, u_next, column_sums);
      ++r.iterations;
      r.marginal_error = error;
      if (!std::isfinite(error)) {
        ok_a = false;
        break;
      }
      if (options.progress && !options.progress(r.iterations, error)) throw Cancelled();
      if (error < target && !stale) {
        r.converged = true;
        break;
      }
      if (it + 1 == options.max_iterations) break;
      if (!all_positive_finite(u_next) || !all_positive_finite(column_sums)) {
        ok_a = false;
        break;
      }
      u.swap(u_next);
      for (Eigen::Index j = 0; j < m; ++j) {
        v_exact[j] = b[j] / column_sums[j];
        G[j] = std::log(v_exact[j]);
      }
      R = G - x;
      if (error > 2.0 * best) {
        stored = 0;
        next_col = 0;
        have_prev = false;
      }
      best = std::min(best, error);
      if (have_prev) {
        dR.col(next_col) = (R - R_prev).cwiseProduct(weight);
        dG.col(next_col) = G - G_prev;
        next_col = (next_col + 1) % depth;
        stored = std::min(stored + 1, depth);
      }
      x_prev = x;
      G_prev = G;
      R_prev = R;
      have_prev = true;
      if (stored > 0) {
        // Column-pivoted QR: a rank-deficient history (nearly parallel steps) gives a finite
        // minimum-norm-like gamma instead of a blow-up.
        const Eigen::VectorXd gamma = dR.leftCols(stored).colPivHouseholderQr().solve(R.cwiseProduct(weight));
        if (gamma.allFinite()) {
          x = G - dG.leftCols(stored) * gamma;
        } else {
          x = G;
        }
      } else {
        x = G;
      }
      for (Eigen::Index j = 0; j < m; ++j) v_relaxed[j] = std::exp(x[j]);
      const bool refresh = stale && error < kInPlaceError;
      if (refresh ||
          std::max({max_abs_log(u), max_abs_log(v_relaxed), max_abs_log(v_exact)}) > options.absorb_threshold) {
        // Absorbing s = log v_relaxed shifts x and G alike (G(x - s) = G(x) - s in the new
        // kernel), so the differences dR, dG stay valid.
        const Eigen::VectorXd shift = x;
        const bool in_place = options.in_place_absorption && error >= kInPlaceError;
        stale = in_place;
        if (!absorb(in_place)) {
          ok_a = false;
          break;
        }
        x.setZero();
        G_prev -= shift;
        x_prev -= shift;
      }
    }
    r.failed = !ok_a;
    if (all_positive_finite(u) && all_positive_finite(v_exact)) {
      for (Eigen::Index i = 0; i < n; ++i) f[i] += eps * std::log(u[i]);
      for (Eigen::Index j = 0; j < m; ++j) g[j] += eps * std::log(v_exact[j]);
    } else {
      r.failed = true;
    }
    return r;
  }

  const bool adaptive = options.omega == 0.0;
  double omega = adaptive ? 1.0 : options.omega;
  bool estimating = adaptive;
  // Adaptive w: plain iterations kWarmup..; theta = (e_k / e_{k - kSpan})^(1 / kSpan).
  constexpr int kWarmup = 20, kSpan = 10;
  constexpr double kMaxOmega = 1.9;
  std::vector<double> errors;
  double error_at_switch = 0.0;
  int switched_at = 0;
  bool adaptive_done = false, ok = true;
  for (int it = 0; it < options.max_iterations; ++it) {
    const double error =
        kernel.fused_pass(a, omega == 1.0 ? v_exact : v_relaxed, v_exact, omega, u, u_next, column_sums);
    ++r.iterations;
    r.marginal_error = error;
    if (!std::isfinite(error)) {
      ok = false;
      break;
    }
    if (options.progress && !options.progress(r.iterations, error)) throw Cancelled();
    if (error < target) {
      r.converged = true;
      break;
    }
    if (it + 1 == options.max_iterations) break;  // keep (u, v_exact), which `error` describes
    if (!all_positive_finite(u_next) || !all_positive_finite(column_sums)) {
      ok = false;
      break;
    }
    u.swap(u_next);
    // The column half-step: v_exact = b / P~^T u, then relaxed (Eq. (6) of Thibault et al.).
    for (Eigen::Index j = 0; j < m; ++j) {
      const double plain = b[j] / column_sums[j];
      v_relaxed[j] = omega == 1.0 ? plain
                                  : std::exp((1.0 - omega) * std::log(v_relaxed[j]) + omega * std::log(plain));
      v_exact[j] = plain;
    }
    errors.push_back(error);
    const int k = static_cast<int>(errors.size()) - 1;
    if (estimating && k >= kWarmup) {
      const double theta = std::pow(errors[k] / errors[k - kSpan], 1.0 / kSpan);
      if (theta > 0.0 && theta < 1.0) {
        // Lehmann et al., Eq. (4): the optimal w for the local rate theta.
        omega = std::min(kMaxOmega, 2.0 / (1.0 + std::sqrt(1.0 - theta)));
        estimating = false;
        switched_at = k;
        error_at_switch = error;
        v_relaxed = v_exact;  // the relaxed sequence starts from the exact half-step
      }
    } else if (adaptive && omega > 1.0 && error > 1e2 * error_at_switch) {
      omega = 1.0;  // a safeguard: over-relaxation is only locally convergent; plain Sinkhorn is global
      adaptive_done = true;
      v_relaxed = v_exact;
    } else if (adaptive && !adaptive_done && omega > 1.0 && k >= switched_at + 2 * kSpan &&
               (k - switched_at) % kSpan == 0) {
      // The early iterations underestimate theta (the fast modes decay first). Below the optimal
      // w the relaxed rate rho satisfies Young's relation (rho + w - 1)^2 = rho w^2 theta (SOR
      // theory, which the Sinkhorn iteration follows locally: Lehmann et al., Sec. 3), so a rate
      // measured above w - 1 gives a larger theta and a larger w.
      const double rho = std::pow(errors[k] / errors[k - kSpan], 1.0 / kSpan);
      if (rho > 1.05 * (omega - 1.0) && rho < 1.0) {
        const double theta = (rho + omega - 1.0) * (rho + omega - 1.0) / (rho * omega * omega);
        if (theta < 1.0) omega = std::max(omega, std::min(kMaxOmega, 2.0 / (1.0 + std::sqrt(1.0 - theta))));
      }
    }
    r.omega = omega;
    if (std::max({max_abs_log(u), max_abs_log(v_relaxed), max_abs_log(v_exact)}) > options.absorb_threshold) {
      if (!absorb()) {
        ok = false;
        break;
      }
    }
  }
  r.failed = !ok;
  // The potentials of the column-exact plan (u, v_exact), when finite.
  if (all_positive_finite(u) && all_positive_finite(v_exact)) {
    for (Eigen::Index i = 0; i < n; ++i) f[i] += eps * std::log(u[i]);
    for (Eigen::Index j = 0; j < m; ++j) g[j] += eps * std::log(v_exact[j]);
  } else {
    r.failed = true;
  }
  return r;
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
