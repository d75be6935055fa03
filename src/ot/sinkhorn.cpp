// The log-domain Sinkhorn loops, written once against a SoftMin operator: the alternating loop
// for OT_eps(a, b), the symmetric loop for OT_eps(a, a), and the debiased divergence built on both.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../simd/exp.hpp"
#include "../simd/sum.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/ot_kernel.hpp"

namespace tokenflow {

namespace {

// Row marginal error of the plan (f, g) whose columns are exact: with f_new = softmin_rows(g),
// (pi 1)_i = a_i exp((f_i - f_new_i) / eps), so the error costs no extra pass over C. Far from
// convergence the exponential may overflow to +inf, which is a (huge) error, not a failure.
double row_error(const Eigen::VectorXd& a, const Eigen::VectorXd& f, const Eigen::VectorXd& f_new, double eps) {
  double err = 0.0;
  for (Eigen::Index i = 0; i < a.size(); ++i) err += a[i] * std::abs(std::expm1((f[i] - f_new[i]) / eps));
  return err;
}

void check_common(const SinkhornOptions& options) {
  if (!(options.epsilon > 0.0) || !std::isfinite(options.epsilon)) throw InputError("", "epsilon", "must be positive");
  if (!(options.tol > 0.0)) throw InputError("", "tol", "must be positive");
  if (options.max_iter < 1) throw InputError("", "max_iter", "must be at least 1");
  if (options.epsilon_start != 0.0 && !(options.epsilon_decay > 1.0))
    throw InputError("", "epsilon_decay", "must be greater than 1");
}

void check_weights(const Eigen::VectorXd& w, Eigen::Index size, const char* key, const char* what) {
  if (w.size() != size)
    throw InputError("", key, "has " + std::to_string(w.size()) + " entries for " + std::to_string(size) + " " + what);
  for (double v : w)
    if (!(v > 0.0) || !std::isfinite(v)) throw InputError("", key, "weights must be finite and positive");
}

void check_finite(const Eigen::VectorXd& v) {
  if (!v.allFinite())
    throw NumericalFailure("the Sinkhorn potentials left the range of double (cost or weights out of range)");
}

// Epsilon schedule: geometric from epsilon_start (or the operator's cost range) down to epsilon
// (Schmitzer 2019, "Stabilized sparse scaling algorithms for entropy regularized transport
// problems", Sec. 3.2).
std::vector<double> epsilon_schedule(const SoftMin& op, const SinkhornOptions& options) {
  std::vector<double> schedule;
  const double start = options.epsilon_start < 0.0 ? op.cost_range() : options.epsilon_start;
  if (start > options.epsilon && std::isfinite(start))
    for (double e = start; e > options.epsilon; e /= options.epsilon_decay) schedule.push_back(e);
  schedule.push_back(options.epsilon);
  return schedule;
}

// Iterations a stage may use out of what is left of max_iter: intermediate stages leave one for
// the final stage, so that the returned potentials always belong to the final epsilon.
int stage_iterations(int left, bool last) { return last ? left : std::max(0, left - 1); }

bool report_progress(const SinkhornOptions& options, int iterations, double error) {
  if (!options.progress || iterations % std::max(1, options.progress_every) != 0) return true;
  return options.progress(iterations, error);
}

// Cost, objective and (optionally) the plan in one pass over C, for pi_ij = a_i b_j exp((f_i +
// g_j - C_ij) / eps): objective = sum_ij pi_ij (f_i + g_j) (see ot.hpp).
// Returns the plan's row error sum_i |(pi 1)_i - a_i| (the whole marginal error when the columns
// are exact), from the same row sums.
double finish(const SoftMin& op, const Eigen::VectorXd& log_a, const Eigen::VectorXd& log_b, double eps,
              bool want_plan, SinkhornResult& r) {
  const Eigen::Index n = op.rows(), m = op.cols();
  if (want_plan) r.plan.resize(n, m);
  Eigen::VectorXd row_cost(n), row_objective(n), row_mass(n);
  const double* f = r.f.data();
  const double* g = r.g.data();
  const double* lb = log_b.data();
  op.for_each_row([&](Eigen::Index i, const double* c) {
    // Locals, so that GCC vectorizes the loop (simd::exp_poly: within 2 ulp of exp).
    const double* __restrict gj = g;
    const double* __restrict log_bj = lb;
    const double row_shift = log_a[i] + f[i] / eps, fi = f[i], inv = 1.0 / eps;
    double* __restrict plan_row = want_plan ? r.plan.data() + i * m : nullptr;
    // Sums in a fixed order (simd/sum.hpp): the same bits at any address.
    double cost = 0.0, objective = 0.0, mass = 0.0;
    simd::ordered_sum3(
        m,
        [&](Eigen::Index j, double& cost_lane, double& objective_lane, double& mass_lane) {
          const double pi = simd::exp_poly(row_shift + log_bj[j] + (gj[j] - c[j]) * inv);
          cost_lane += pi * c[j];
          objective_lane += pi * (fi + gj[j]);
          mass_lane += pi;
          if (plan_row) plan_row[j] = pi;
        },
        cost, objective, mass);
    row_cost[i] = cost;
    row_objective[i] = objective;
    row_mass[i] = mass;
  });
  r.cost = row_cost.sum();
  r.objective = row_objective.sum();
  r.plan_mass = row_mass.sum();
  return (row_mass - log_a.array().exp().matrix()).cwiseAbs().sum();
}

// Rows per block in the column passes below: each block of rows keeps its own column vector and
// the blocks are combined in block order, so the result does not depend on the thread count.
constexpr Eigen::Index kColumnBlock = 128;

// g_j = min_i (C_ij - f_i), the c-transform of f (the eps -> 0 limit of the column soft-min),
// without exponentials: afterwards f_i + g_j - C_ij <= 0 for every pair, with equality somewhere
// in every column, so exact_columns_near (below) may start from it: its sums S_j lie in
// [min_i a_i, 1].
void column_c_transform(const SoftMin& op, const Eigen::VectorXd& f, Eigen::VectorXd& g) {
  const Eigen::Index n = op.rows(), m = op.cols(), blocks = (n + kColumnBlock - 1) / kColumnBlock;
  std::vector<double> block_min(static_cast<std::size_t>(blocks * m));
#pragma omp parallel if (n * m >= (1 << 15))
  {
    std::vector<double> buffer(static_cast<std::size_t>(m));
#pragma omp for schedule(static)
    for (Eigen::Index k = 0; k < blocks; ++k) {
      double* __restrict w = block_min.data() + k * m;
      std::fill(w, w + m, std::numeric_limits<double>::infinity());
      for (Eigen::Index i = k * kColumnBlock; i < std::min(n, (k + 1) * kColumnBlock); ++i) {
        const double* __restrict c = op.cost_row(i, buffer.data());
        const double fi = f[i];
#pragma omp simd
        for (Eigen::Index j = 0; j < m; ++j) w[j] = std::min(w[j], c[j] - fi);
      }
    }
  }
  g.resize(m);
  for (Eigen::Index j = 0; j < m; ++j) g[j] = block_min[static_cast<std::size_t>(j)];
  for (Eigen::Index k = 1; k < blocks; ++k)
    for (Eigen::Index j = 0; j < m; ++j) g[j] = std::min(g[j], block_min[static_cast<std::size_t>(k * m + j)]);
}

// The exact g of f (g_j = -eps log sum_i exp(log a_i + (f_i - C_ij) / eps), what softmin_cols
// computes) in one pass over C by rows, shifted by the current g, which must be close to it (the
// kernel's): S_j = sum_i exp(log a_i + (f_i + g_j - C_ij) / eps) is then near 1, and g_j -= eps
// log S_j. Each term and its rounding are those of the streaming log-sum-exp (a shift that is
// not the maximum only changes which terms are near 1). Returns false, g unchanged, when some
// S_j leaves [2^-900, 2^900] (the shift was not close): then the caller uses softmin_cols.
bool exact_columns_near(const SoftMin& op, const Eigen::VectorXd& log_a, double eps,
                        const Eigen::VectorXd& f, Eigen::VectorXd& g) {
  const Eigen::Index n = op.rows(), m = op.cols(), blocks = (n + kColumnBlock - 1) / kColumnBlock;
  const double inv = 1.0 / eps;
  const Eigen::VectorXd hf = log_a + f * inv, hg = g * inv;
  std::vector<double> block_sum(static_cast<std::size_t>(blocks * m));
  const double* hgd = hg.data();
#pragma omp parallel if (n * m >= (1 << 15))
  {
    std::vector<double> buffer(static_cast<std::size_t>(m));
#pragma omp for schedule(static)
    for (Eigen::Index k = 0; k < blocks; ++k) {
      double* __restrict w = block_sum.data() + k * m;
      std::fill(w, w + m, 0.0);
      for (Eigen::Index i = k * kColumnBlock; i < std::min(n, (k + 1) * kColumnBlock); ++i) {
        const double* __restrict c = op.cost_row(i, buffer.data());
        const double* __restrict hgj = hgd;
        const double h = hf[i], scale = inv;
#pragma omp simd
        for (Eigen::Index j = 0; j < m; ++j) w[j] += simd::exp_poly(h + hgj[j] - c[j] * scale);
      }
    }
  }
  Eigen::VectorXd total(m);
  for (Eigen::Index j = 0; j < m; ++j) total[j] = block_sum[static_cast<std::size_t>(j)];
  for (Eigen::Index k = 1; k < blocks; ++k)
    for (Eigen::Index j = 0; j < m; ++j) total[j] += block_sum[static_cast<std::size_t>(k * m + j)];
  for (double t : total)
    if (!(t >= 0x1p-900 && t <= 0x1p900)) return false;
  for (Eigen::Index j = 0; j < m; ++j) g[j] -= eps * std::log(total[j]);
  return true;
}

}  // namespace

double SoftMin::cost_range() const {
  Eigen::VectorXd row_max(rows()), row_min(rows());
  const Eigen::Index m = cols();
  for_each_row([&](Eigen::Index i, const double* c) {
    double lo = c[0], hi = c[0];
    for (Eigen::Index j = 1; j < m; ++j) {
      lo = std::min(lo, c[j]);
      hi = std::max(hi, c[j]);
    }
    row_max[i] = hi;
    row_min[i] = lo;
  });
  return row_max.maxCoeff() - row_min.minCoeff();
}

double SoftMin::cost_magnitude() const {
  Eigen::VectorXd row_max(rows());
  const Eigen::Index m = cols();
  for_each_row([&](Eigen::Index i, const double* c) {
    double hi = 0.0;
    for (Eigen::Index j = 0; j < m; ++j) hi = std::max(hi, std::abs(c[j]));
    bool finite = true;  // a NaN entry makes the magnitude infinite, never a maximum over the rest
    for (Eigen::Index j = 0; j < m; ++j) finite = finite && std::isfinite(c[j]);
    row_max[i] = finite ? hi : std::numeric_limits<double>::infinity();
  });
  return rows() == 0 ? 0.0 : row_max.maxCoeff();
}

double automatic_epsilon_start(const SoftMin& op, double epsilon) {
  const double range = op.cost_range();
  return epsilon < 1e-3 * range ? range : 0.0;
}

namespace {

// One epsilon stage of the log-domain loop. With from_f the stage starts from r.f (each
// iteration computes g from f, then checks the rows); otherwise f is first computed from r.g.
void log_domain_stage(const SoftMin& op, const Eigen::VectorXd& a, const Eigen::VectorXd& log_a,
                      const Eigen::VectorXd& log_b, double eps, double stage_tol, int stage_limit,
                      bool last, bool from_f, const SinkhornOptions& options, SinkhornResult& r) {
  const Eigen::Index n = op.rows(), m = op.cols();
  Eigen::VectorXd h_rows(n), h_cols(m), f_new(n);
  if (!from_f) {
    // f from g first (a warm or zero g), so that every iteration below is "g then check rows".
    h_cols = log_b + r.g / eps;
    op.softmin_rows(eps, h_cols, r.f);
  }
  for (int it = 0; it < stage_limit; ++it) {
    h_rows = log_a + r.f / eps;
    op.softmin_cols(eps, h_rows, r.g);  // Eq. (23) of Feydy et al.: columns now exact
    h_cols = log_b + r.g / eps;
    op.softmin_rows(eps, h_cols, f_new);
    check_finite(f_new);
    ++r.iterations;
    r.marginal_error = row_error(a, r.f, f_new, eps);
    if (!report_progress(options, r.iterations, r.marginal_error)) throw Cancelled();
    if (r.marginal_error < stage_tol) {
      if (last) r.converged = true;
      break;
    }
    // Out of iterations: keep the f that the error above describes (g is exact for it).
    if (it + 1 < stage_limit) r.f.swap(f_new);
  }
}

// One epsilon stage in kernel mode (ot_kernel.hpp), P~ held in Scalar. The stage starts as the
// log-domain one does (f from g), adds the exact g of that f (so that P~ starts with exact
// columns), and runs the scaling iteration down to `target`. Returns whether the stage is done:
// false when the kernel failed (an entry or scaling out of range), then the caller runs the
// log-domain stage from r.f.
template <class Scalar>
bool kernel_stage(const SoftMin& op, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                  const Eigen::VectorXd& log_a, const Eigen::VectorXd& log_b, double eps,
                  double tol, int stage_limit, const SinkhornOptions& options,
                  ScalingKernel<Scalar>& kernel, SinkhornResult& r, bool& converged) {
  const Eigen::Index n = op.rows(), m = op.cols();
  Eigen::VectorXd h_rows(n), h_cols(m);
  h_cols = log_b + r.g / eps;
  op.softmin_rows(eps, h_cols, r.f);
  // The exact g of f: by rows from the c-transform (no C^T, which kernel mode never forms),
  // else (out of range) the column soft-min.
  column_c_transform(op, r.f, r.g);
  if (!exact_columns_near(op, log_a, eps, r.f, r.g)) {
    h_rows = log_a + r.f / eps;
    op.softmin_cols(eps, h_rows, r.g);
  }
  check_finite(r.f);
  check_finite(r.g);
  KernelStageOptions ko;
  ko.tol = tol;
  ko.max_iterations = stage_limit;
  ko.omega = options.overrelaxation;
  // Adaptive (0): Anderson acceleration, which needed 40-60 % fewer iterations than the adaptive
  // over-relaxation at n = 1000-4000 (docs/speed-sinkhorn.md); a fixed w >= 1: over-relaxation.
  ko.anderson_depth = options.overrelaxation == 0.0 ? options.anderson_depth : 0;
  const int before = r.iterations;
  if (options.progress)
    ko.progress = [&](int done, double error) { return report_progress(options, before + done, error); };
  Eigen::VectorXd f = r.f, g = r.g;
  const KernelStageResult k = kernel_sinkhorn_stage(op, a, b, eps, ko, f, g, kernel);
  r.iterations += k.iterations;
  r.kernel_absorptions += k.absorptions;
  r.kernel_iterations += k.iterations;
  r.kernel_omega = k.omega;
  r.kernel_anderson_depth = ko.anderson_depth;
  if (f.allFinite() && g.allFinite()) {
    r.f = f;
    r.g = g;
  }
  r.marginal_error = k.marginal_error;
  converged = !k.failed && k.converged;
  return !k.failed;
}

// The float32 kernel when tol leaves room for its rounding, else float64 (see sinkhorn()).
constexpr double kFloatKernelMinTol = 16.0 * 0x1p-24;

}  // namespace

SinkhornResult sinkhorn(const SoftMin& op, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                        const SinkhornOptions& options) {
  const Eigen::Index n = op.rows(), m = op.cols();
  check_weights(a, n, "a", "points");
  check_weights(b, m, "b", "points");
  check_common(options);
  if (options.kernel_mode && options.overrelaxation != 0.0 &&
      !(options.overrelaxation >= 1.0 && options.overrelaxation < 2.0))
    throw InputError("", "overrelaxation", "must be 0 (adaptive) or in [1, 2)");
  const Eigen::VectorXd log_a = a.array().log(), log_b = b.array().log();

  SinkhornResult r;
  r.f = options.f_init.size() == n ? options.f_init : Eigen::VectorXd::Zero(n);
  r.g = options.g_init.size() == m ? options.g_init : Eigen::VectorXd::Zero(m);
  const std::vector<double> schedule = epsilon_schedule(op, options);
  const bool use_float = options.tol >= kFloatKernelMinTol;
  ScalingKernel<float> kernel_f;
  ScalingKernel<double> kernel_d;

  bool finished = false;  // the final check below formed the plan and measured the error
  for (std::size_t stage = 0; stage < schedule.size(); ++stage) {
    const double eps = schedule[stage];
    const bool last = stage + 1 == schedule.size();
    const double stage_tol = last ? options.tol : std::max(options.tol, options.epsilon_stage_tol);
    const int stage_limit = stage_iterations(options.max_iter - r.iterations, last);
    if (stage_limit == 0) continue;
    bool from_f = false;
    if (options.kernel_mode) {
      // The kernel stops on its own estimate of the error (KernelStageOptions::tol); the final
      // stage keeps one iteration for the check in float64: the exact g of the kernel's f (the
      // returned plan's columns exact, as without the kernel), then the plan's row error measured
      // in the same pass that forms its cost, objective and plan. If it is not below tol, the
      // log-domain loop continues from there.
      const int kernel_limit = last ? stage_limit - 1 : stage_limit;
      if (kernel_limit > 0) {
        bool converged = false;
        const bool done =
            use_float ? kernel_stage(op, a, b, log_a, log_b, eps, stage_tol, kernel_limit, options, kernel_f, r, converged)
                      : kernel_stage(op, a, b, log_a, log_b, eps, stage_tol, kernel_limit, options, kernel_d, r, converged);
        from_f = true;  // r.f is the kernel's (or the stage start's) f
        if (done && !last) continue;
        if (converged && last) {
          if (!exact_columns_near(op, log_a, eps, r.f, r.g)) {
            const Eigen::VectorXd h_rows = log_a + r.f / eps;
            op.softmin_cols(eps, h_rows, r.g);
          }
          check_finite(r.g);
          ++r.iterations;
          r.marginal_error = finish(op, log_a, log_b, options.epsilon, options.want_plan, r);
          if (!report_progress(options, r.iterations, r.marginal_error)) throw Cancelled();
          if (r.marginal_error < stage_tol) {
            r.converged = true;
            finished = true;
            break;
          }
          from_f = false;  // g is exact for f: the log-domain loop continues with f from g
        }
      }
    }
    const int left = stage_iterations(options.max_iter - r.iterations, last);
    if (left > 0) log_domain_stage(op, a, log_a, log_b, eps, stage_tol, left, last, from_f, options, r);
  }
  check_finite(r.f);
  check_finite(r.g);
  if (!finished) finish(op, log_a, log_b, options.epsilon, options.want_plan, r);
  return r;
}

SinkhornResult sinkhorn_symmetric(const SoftMin& op, const Eigen::VectorXd& a, const SinkhornOptions& options) {
  const Eigen::Index n = op.rows();
  if (op.cols() != n)
    throw InputError("", "cost", "self-transport needs a square cost; it is " + std::to_string(n) + " x " +
                                     std::to_string(op.cols()));
  check_weights(a, n, "a", "points");
  check_common(options);
  const Eigen::VectorXd log_a = a.array().log();

  SinkhornResult r;
  const std::vector<double> schedule = epsilon_schedule(op, options);
  Eigen::VectorXd h(n), t(n);
  r.f = options.f_init.size() == n ? options.f_init : Eigen::VectorXd::Zero(n);
  if (options.f_init.size() != n) {
    // Cold start at the soft-min of the zero potential, T(0), as GeomLoss does.
    h = log_a;
    op.softmin_rows(schedule.front(), h, r.f);
  }
  for (std::size_t stage = 0; stage < schedule.size(); ++stage) {
    const double eps = schedule[stage];
    const bool last = stage + 1 == schedule.size();
    const double stage_tol = last ? options.tol : std::max(options.tol, options.epsilon_stage_tol);
    const int stage_limit = stage_iterations(options.max_iter - r.iterations, last);
    for (int it = 0; it < stage_limit; ++it) {
      h = log_a + r.f / eps;
      op.softmin_rows(eps, h, t);  // T(f)
      check_finite(t);
      ++r.iterations;
      // pi 1 = a exp((f - T(f)) / eps), the same form as the row error of the alternating loop;
      // the plan is symmetric, so the column error is the same.
      r.marginal_error = 2.0 * row_error(a, r.f, t, eps);
      if (!report_progress(options, r.iterations, r.marginal_error)) throw Cancelled();
      if (r.marginal_error < stage_tol) {
        if (last) r.converged = true;
        break;
      }
      if (it + 1 < stage_limit) r.f = 0.5 * (r.f + t);  // the averaged (symmetric) update
    }
  }
  r.g = r.f;
  finish(op, log_a, log_a, options.epsilon, options.want_plan, r);
  return r;
}

SinkhornDivergence sinkhorn_divergence(const SoftMin& xy, const SoftMin& xx, const SoftMin& yy,
                                       const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                                       const SinkhornOptions& options) {
  if (xx.rows() != xy.rows() || yy.rows() != xy.cols())
    throw InputError("", "cost", "the self-transport operators do not match the sizes of the cross operator");
  SinkhornDivergence d;
  SinkhornOptions sym = options;
  sym.g_init.resize(0);
  sym.f_init = options.f_init;
  d.xx = sinkhorn_symmetric(xx, a, sym);
  sym.f_init = options.g_init;
  d.yy = sinkhorn_symmetric(yy, b, sym);
  d.xy = sinkhorn(xy, a, b, options);
  d.value = d.xy.objective - 0.5 * (d.xx.objective + d.yy.objective);
  return d;
}

}  // namespace tokenflow
