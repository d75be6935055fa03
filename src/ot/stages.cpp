// The epsilon stages of the Sinkhorn solvers (stages.hpp): the log-domain stage, the kernel-mode
// stage (scaling iteration, float64 check, log-domain finish) and the symmetric stage, with the
// passes over C they share (the plan's measure, the exact columns of a potential).
#include "stages.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../simd/exp.hpp"
#include "anderson.hpp"
#include "../simd/sum.hpp"
#include "tokenflow/error.hpp"

namespace tokenflow::stages {

void check_finite(const Eigen::VectorXd& v) {
  if (!v.allFinite())
    throw NumericalFailure("the Sinkhorn potentials left the range of double (cost or weights out of range)");
}

namespace {

bool progress_allows(const SinkhornOptions& options, int iteration, double error) {
  if (!options.progress || iteration % std::max(1, options.progress_every) != 0) return true;
  return options.progress(iteration, error);
}

// Row marginal error of the plan (f, g) whose columns are exact: with f_new = softmin_rows(g),
// (pi 1)_i = a_i exp((f_i - f_new_i) / eps), so the error costs no extra pass over C. Far from
// convergence the exponential may overflow to +inf, which is a (huge) error, not a failure.
double row_error(const Eigen::VectorXd& a, const Eigen::VectorXd& f, const Eigen::VectorXd& f_new, double eps) {
  double err = 0.0;
  for (Eigen::Index i = 0; i < a.size(); ++i) err += a[i] * std::abs(std::expm1((f[i] - f_new[i]) / eps));
  return err;
}

// The next iterate of the log-domain loop from f (whose plan has row error `error`) and f_new =
// softmin_rows(softmin_cols(f)), the plain Sinkhorn step, chosen by the options as in kernel mode
// (ot.hpp): overrelaxation 0 with anderson_depth > 0: Anderson acceleration of x = f / eps
// (anderson.hpp); overrelaxation w in (1, 2): f + w (f_new - f); otherwise (w = 1, or depth 0)
// the plain step f_new.
// Safeguards, since both accelerations are only locally convergent: the Anderson history is
// dropped (the next step is the plain one) when the error grows above twice the best seen since
// the last restart, or when `depth` iterations in a row found no new best (a stalled
// extrapolation); each restart starts its own best. The extrapolation is regularized
// (anderson.hpp). Measured (docs/ot.md, "Acceleration"): on POT's 1-D stabilization problem at
// eps / range = 1e-5 without scaling, the unguarded history ended 20 000 iterations at error 0.34,
// the plain loop at 1.9e-4. With a best kept across restarts, one lucky low error disabled the
// acceleration for good (every later error was above twice it): on a trained model's
// near-permutation cost, cost perturbations of 1e-13 then decided between convergence and a
// stall at 1e-6; with per-restart bests all seven perturbations converged, in 323 to 4126
// iterations (tokenflow.sinkhorn on the saved cost).
class LogDomainStep {
 public:
  LogDomainStep(const SinkhornProblem& p, double eps)
      : eps_(eps),
        omega_(p.options.overrelaxation),
        depth_(p.options.overrelaxation == 0.0 ? std::max(0, p.options.anderson_depth) : 0),
        history_(std::max(1, depth_), p.a, kRegularization) {}

  // f <- the next iterate (f_new may be swapped into it).
  void next(double error, Eigen::VectorXd& f_new, Eigen::VectorXd& f) {
    if (depth_ > 0) {
      if (error < best_) {
        best_ = error;
        since_best_ = 0;
      } else {
        ++since_best_;
      }
      if (error > 2.0 * best_ || since_best_ >= depth_) {
        history_.clear();
        since_best_ = 0;
        best_ = error;  // the next comparison is with this restart's own errors
      }
      G_ = f_new / eps_;
      R_ = G_ - f / eps_;
      history_.step(G_, R_, x_);
      f = eps_ * x_;
      return;
    }
    if (omega_ > 1.0) {
      f += omega_ * (f_new - f);
      return;
    }
    f.swap(f_new);
  }

 private:
  static constexpr double kRegularization = 1e-6;  // anderson.hpp: regularized extrapolation
  double eps_, omega_;
  int depth_;
  AndersonHistory history_;
  Eigen::VectorXd G_, R_, x_;
  double best_ = std::numeric_limits<double>::infinity();
  int since_best_ = 0;
};

}  // namespace

void report_progress(const SinkhornOptions& options, int iteration, double error) {
  if (!progress_allows(options, iteration, error)) throw Cancelled();
}

// Cost, objective and (optionally) the plan in one pass over C (row i's sums in a fixed order,
// simd/sum.hpp: the same bits at any address), and the row error from the same row sums.
PlanMeasure measure_plan(const SoftMin& op, const Eigen::VectorXd& log_a, const Eigen::VectorXd& log_b,
                         double eps, bool want_plan, const Eigen::VectorXd& f_in, const Eigen::VectorXd& g_in) {
  const Eigen::Index n = op.rows(), m = op.cols();
  PlanMeasure out;
  if (want_plan) out.plan.resize(n, m);
  Eigen::VectorXd row_cost(n), row_objective(n), row_mass(n);
  const double* f = f_in.data();
  const double* g = g_in.data();
  const double* lb = log_b.data();
  op.for_each_row([&](Eigen::Index i, const double* c) {
    // Locals, so that GCC vectorizes the loop (simd::exp_poly: within 2 ulp of exp).
    const double* __restrict gj = g;
    const double* __restrict log_bj = lb;
    const double row_shift = log_a[i] + f[i] / eps, fi = f[i], inv = 1.0 / eps;
    double* __restrict plan_row = want_plan ? out.plan.data() + i * m : nullptr;
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
  out.cost = row_cost.sum();
  out.objective = row_objective.sum();
  out.mass = row_mass.sum();
  out.row_error = (row_mass - log_a.array().exp().matrix()).cwiseAbs().sum();
  return out;
}

namespace {

// Rows per block in the column passes below: each block of rows keeps its own column vector and
// the blocks are combined in block order, so the result does not depend on the thread count.
constexpr Eigen::Index kColumnBlock = 128;

// Column j of the (blocks x m) partial results combined in block order: combine(acc, next).
template <class Combine>
void combine_blocks(const std::vector<double>& blocks, Eigen::Index m, Eigen::VectorXd& out, Combine combine) {
  const Eigen::Index count = static_cast<Eigen::Index>(blocks.size()) / std::max<Eigen::Index>(m, 1);
  out.resize(m);
  for (Eigen::Index j = 0; j < m; ++j) out[j] = blocks[static_cast<std::size_t>(j)];
  for (Eigen::Index k = 1; k < count; ++k)
    for (Eigen::Index j = 0; j < m; ++j) out[j] = combine(out[j], blocks[static_cast<std::size_t>(k * m + j)]);
}

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
  combine_blocks(block_min, m, g, [](double x, double y) { return std::min(x, y); });
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
  Eigen::VectorXd total;
  combine_blocks(block_sum, m, total, [](double x, double y) { return x + y; });
  for (double t : total)
    if (!(t >= 0x1p-900 && t <= 0x1p900)) return false;
  for (Eigen::Index j = 0; j < m; ++j) g[j] -= eps * std::log(total[j]);
  return true;
}

// g exact for f: exact_columns_near from the given g, else (out of range) the column soft-min.
void exact_columns(const SinkhornProblem& p, double eps, const Eigen::VectorXd& f, Eigen::VectorXd& g) {
  if (exact_columns_near(p.op, p.log_a, eps, f, g)) return;
  const Eigen::VectorXd h_rows = p.log_a + f / eps;
  p.op.softmin_cols(eps, h_rows, g);
}

}  // namespace

// From s.g (WarmStart::from_g: f = softmin_rows(g) first) or s.f. Each iteration makes the
// columns exact (g = softmin_cols(f), Eq. (23) of Feydy et al.), then computes f_new =
// softmin_rows(g) and from it the row error of (f, g); below s.tol the stage stops (converged),
// else f moves to the next iterate (LogDomainStep: f_new itself, Anderson's extrapolation or the
// over-relaxed f + w (f_new - f)). Out of iterations it keeps the f that the last error describes
// (g exact for it), so every accelerated iterate is reported with the error of its own plan.
// Throws NumericalFailure, or Cancelled (progress).
StageResult log_domain_stage(const SinkhornProblem& p, SinkhornStage s) {
  const Eigen::Index n = p.op.rows(), m = p.op.cols();
  const double eps = s.epsilon;
  Eigen::VectorXd h_rows(n), h_cols(m), f_new(n);
  StageResult r;
  r.f = std::move(s.f);
  r.g = std::move(s.g);
  if (s.start == WarmStart::from_g) {
    h_cols = p.log_b + r.g / eps;
    p.op.softmin_rows(eps, h_cols, r.f);
  }
  LogDomainStep step(p, eps);
  while (r.iterations < s.budget) {
    h_rows = p.log_a + r.f / eps;
    p.op.softmin_cols(eps, h_rows, r.g);
    h_cols = p.log_b + r.g / eps;
    p.op.softmin_rows(eps, h_cols, f_new);
    check_finite(f_new);
    ++r.iterations;
    r.marginal_error = row_error(p.a, r.f, f_new, eps);
    report_progress(p.options, s.done_before + r.iterations, r.marginal_error);
    if (r.marginal_error < s.tol) {
      r.status = StageStatus::converged;
      break;
    }
    if (r.iterations < s.budget) step.next(r.marginal_error, f_new, r.f);
  }
  return r;
}

namespace {

// The options of kernel_sinkhorn_stage for a stage of `budget` iterations stopping at tol.
KernelStageOptions kernel_options(const SinkhornProblem& p, double tol, int budget, int done_before) {
  const SinkhornOptions& options = p.options;
  KernelStageOptions ko;
  ko.tol = tol;
  ko.max_iterations = budget;
  ko.omega = options.overrelaxation;
  // Adaptive (0): Anderson acceleration, which needed 40-60 % fewer iterations than the adaptive
  // over-relaxation at n = 1000-4000 (docs/speed-sinkhorn.md); a fixed w >= 1: over-relaxation.
  ko.anderson_depth = options.overrelaxation == 0.0 ? options.anderson_depth : 0;
  if (options.progress)
    ko.progress = [&options, done_before](int done, double error) {
      return progress_allows(options, done_before + done, error);
    };
  return ko;
}

// The scaling iteration at s.epsilon for at most `budget` iterations, P~ held in Scalar. It
// starts as the log-domain stage does (f from s.g), adds the exact g of that f (by rows from the
// c-transform: kernel mode never forms C^T), so that P~ starts with exact columns, and runs
// kernel_sinkhorn_stage down to s.tol. The potentials returned are the kernel's when finite,
// else those of the start; the status is the kernel's.
template <class Scalar>
StageResult scaling_stage(const SinkhornProblem& p, const SinkhornStage& s, int budget, ScalingKernel<Scalar>& kernel) {
  const double eps = s.epsilon;
  StageResult r;
  const Eigen::VectorXd h_cols = p.log_b + s.g / eps;
  p.op.softmin_rows(eps, h_cols, r.f);
  column_c_transform(p.op, r.f, r.g);
  exact_columns(p, eps, r.f, r.g);
  check_finite(r.f);
  check_finite(r.g);
  const KernelStageOptions ko = kernel_options(p, s.tol, budget, s.done_before);
  Eigen::VectorXd f = r.f, g = r.g;
  const KernelStageResult k = kernel_sinkhorn_stage(p.op, p.a, p.b, eps, ko, f, g, kernel);
  if (f.allFinite() && g.allFinite()) {
    r.f.swap(f);
    r.g.swap(g);
  }
  r.iterations = k.iterations;
  r.marginal_error = k.marginal_error;
  r.status = k.status;
  r.kernel = KernelStats{k.iterations, k.absorptions, k.omega, ko.anderson_depth};
  return r;
}

// The final stage's check of a converged kernel result in float64, as one more iteration: the
// exact g of the kernel's f (the plan's columns exact, as in the log-domain loop), then the row
// error of the plan measured in the pass that forms its cost, objective and plan (kept in
// r.plan). converged when that error is below s.tol, else out_of_iterations.
StageResult float64_check(const SinkhornProblem& p, const SinkhornStage& s, StageResult r) {
  exact_columns(p, s.epsilon, r.f, r.g);
  check_finite(r.g);
  ++r.iterations;
  r.plan = measure_plan(p.op, p.log_a, p.log_b, s.epsilon, p.options.want_plan, r.f, r.g);
  r.marginal_error = r.plan->row_error;
  report_progress(p.options, s.done_before + r.iterations, r.marginal_error);
  r.status = r.marginal_error < s.tol ? StageStatus::converged : StageStatus::out_of_iterations;
  return r;
}

// The log-domain loop from where the kernel left the stage (r, its iterations counted), with
// the rest of the stage's budget; r itself when none is left.
StageResult finish_in_log_domain(const SinkhornProblem& p, const SinkhornStage& s, StageResult r, WarmStart start) {
  if (r.iterations == s.budget) return r;
  SinkhornStage rest;
  rest.epsilon = s.epsilon;
  rest.tol = s.tol;
  rest.budget = s.budget - r.iterations;
  rest.done_before = s.done_before + r.iterations;
  rest.final = s.final;
  rest.start = start;
  rest.f = std::move(r.f);
  rest.g = std::move(r.g);
  StageResult l = log_domain_stage(p, std::move(rest));
  l.iterations += r.iterations;
  l.kernel = r.kernel;
  return l;
}

}  // namespace

// Kernel mode (SinkhornOptions::kernel_mode): the scaling iteration from s.g. An intermediate
// stage ends with it unless it failed. The final stage keeps one iteration of its budget for the
// float64 check of a converged kernel result; when the kernel failed, ran out of iterations or
// its result does not pass the check, the log-domain loop continues with what budget is left:
// from the kernel's f (g computed from it), or, after the check, from its exact g.
StageResult kernel_mode_stage(const SinkhornProblem& p, KernelStorage& kernels, SinkhornStage s) {
  const int kernel_budget = s.final ? s.budget - 1 : s.budget;
  if (kernel_budget == 0) return log_domain_stage(p, std::move(s));
  StageResult r = kernels.use_float ? scaling_stage(p, s, kernel_budget, kernels.single)
                                    : scaling_stage(p, s, kernel_budget, kernels.full);
  if (r.status != StageStatus::failed && !s.final) return r;
  if (r.status != StageStatus::converged) return finish_in_log_domain(p, s, std::move(r), WarmStart::from_f);
  r = float64_check(p, s, std::move(r));
  if (r.status == StageStatus::converged) return r;
  return finish_in_log_domain(p, s, std::move(r), WarmStart::from_g);
}

// Each iteration computes T(f) (softmin_rows of log a + f / eps) and the marginal error of the
// plan of f, 2 |pi 1 - a|_1 with pi 1 = a exp((f - T(f)) / eps) (the plan is symmetric, so the
// column error is the same); below s.tol the stage stops, else f <- (f + T(f)) / 2, the averaged
// (symmetric) update.
StageResult symmetric_stage(const SinkhornProblem& p, SinkhornStage s) {
  const Eigen::Index n = p.op.rows();
  const double eps = s.epsilon;
  Eigen::VectorXd h(n), t(n);
  StageResult r;
  r.f = std::move(s.f);
  while (r.iterations < s.budget) {
    h = p.log_a + r.f / eps;
    p.op.softmin_rows(eps, h, t);  // T(f)
    check_finite(t);
    ++r.iterations;
    r.marginal_error = 2.0 * row_error(p.a, r.f, t, eps);
    report_progress(p.options, s.done_before + r.iterations, r.marginal_error);
    if (r.marginal_error < s.tol) {
      r.status = StageStatus::converged;
      break;
    }
    if (r.iterations < s.budget) r.f = 0.5 * (r.f + t);
  }
  return r;
}

}  // namespace tokenflow::stages
