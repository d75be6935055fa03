// The Sinkhorn solvers of ot.hpp, built from the epsilon stages of stages.hpp: the alternating
// loop for OT_eps(a, b) (log domain or kernel mode), the symmetric loop for OT_eps(a, a), the
// debiased divergence built on both, the one check of SinkhornOptions, and SoftMin's defaults.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "stages.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {

using stages::SinkhornProblem;
using stages::SinkhornStage;
using stages::StageResult;

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

void check_overrelaxation(double overrelaxation) {
  if (overrelaxation != 0.0 && !(overrelaxation >= 1.0 && overrelaxation < 2.0))
    throw InputError("", "overrelaxation", "must be 0 (adaptive) or in [1, 2)");
}

void check_sinkhorn_options(const SinkhornOptions& options) {
  if (!(options.epsilon > 0.0) || !std::isfinite(options.epsilon)) throw InputError("", "epsilon", "must be positive");
  if (!(options.tol > 0.0)) throw InputError("", "tol", "must be positive");
  if (options.max_iter < 1) throw InputError("", "max_iter", "must be at least 1");
  if (options.epsilon_start != 0.0 && !(options.epsilon_decay > 1.0))
    throw InputError("", "epsilon_decay", "must be greater than 1");
  check_overrelaxation(options.overrelaxation);
}

namespace {

void check_weights(const Eigen::VectorXd& w, Eigen::Index size, const char* key, const char* what) {
  if (w.size() != size)
    throw InputError("", key, "has " + std::to_string(w.size()) + " entries for " + std::to_string(size) + " " + what);
  bool any_mass = false;
  for (double v : w) {
    if (!(v >= 0.0) || !std::isfinite(v)) throw InputError("", key, "weights must be finite and non-negative");
    any_mass = any_mass || v > 0.0;
  }
  if (!any_mass) throw InputError("", key, "weights are all zero");
}

bool has_empty_bins(const Eigen::VectorXd& w) { return (w.array() == 0.0).any(); }

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

// The stage at schedule[k] after `used` iterations, `intermediate_used` of them by intermediate
// stages. The final stage stops at tol and gets what is left of max_iter. An intermediate stage
// stops at max(tol, epsilon_stage_tol) and gets a bounded share: the intermediate stages together
// get at most half of max_iter, each an equal part of what is left of that half (unused parts
// roll over to the later ones; with more stages than that half, the first ones get 0 and are
// skipped), and always leave one iteration to the final stage, so that the
// returned potentials belong to the final epsilon and the final stage starts warm with at least
// half the budget. Without the bound a slow intermediate stage took all but one iteration: on
// POT's 1-D stabilization problem at eps = 0.1 (docs/ot.md, "Acceleration") the schedule then
// ended at marginal error 2e-3, ten times worse than no scaling. A budget of 0: the stage is
// skipped.
SinkhornStage next_stage(const std::vector<double>& schedule, std::size_t k, int used, int intermediate_used,
                         const SinkhornOptions& options) {
  SinkhornStage s;
  s.epsilon = schedule[k];
  s.final = k + 1 == schedule.size();
  s.tol = s.final ? options.tol : std::max(options.tol, options.epsilon_stage_tol);
  if (s.final) {
    s.budget = options.max_iter - used;
  } else {
    const int stages_left = static_cast<int>(schedule.size() - 1 - k);  // intermediate ones, this one included
    const int share = std::max(0, options.max_iter / 2 - intermediate_used) / stages_left;
    s.budget = std::max(0, std::min(share, options.max_iter - used - 1));
  }
  s.done_before = used;
  return s;
}

// Epsilon-scaling: runs `run_stage` at each epsilon of the schedule, each stage warm-started from
// the last one's potentials, and returns the final stage's result. Into `totals`: iterations of
// all stages, convergence (of the final stage) and kernel mode's statistics.
template <class RunStage>
StageResult run_schedule(const std::vector<double>& schedule, const SinkhornOptions& options, StageResult state,
                         RunStage run_stage, SinkhornResult& totals) {
  int used = 0, intermediate_used = 0;
  for (std::size_t k = 0; k < schedule.size(); ++k) {
    SinkhornStage stage = next_stage(schedule, k, used, intermediate_used, options);
    if (stage.budget == 0) continue;
    const bool final = stage.final;
    stage.f = std::move(state.f);
    stage.g = std::move(state.g);
    state = run_stage(std::move(stage));
    used += state.iterations;
    if (!final) intermediate_used += state.iterations;
    if (final) totals.final_stage_iterations = state.iterations;
    if (state.kernel) {
      totals.kernel_iterations += state.kernel->iterations;
      totals.kernel_absorptions += state.kernel->absorptions;
      totals.kernel_omega = state.kernel->omega;
      totals.kernel_anderson_depth = state.kernel->anderson_depth;
    }
  }
  totals.iterations = used;
  totals.converged = state.status == StageStatus::converged;
  return state;
}

// The result of the final stage's potentials: their plan measured (unless the stage did).
void finish(const SinkhornProblem& p, StageResult state, SinkhornResult& r) {
  r.f = std::move(state.f);
  r.g = std::move(state.g);
  r.marginal_error = state.marginal_error;
  stages::PlanMeasure plan = state.plan ? std::move(*state.plan)
                                        : stages::measure_plan(p.op, p.log_a, p.log_b, p.options.epsilon,
                                                               p.options.want_plan, r.f, r.g);
  r.cost = plan.cost;
  r.objective = plan.objective;
  r.plan_mass = plan.mass;
  r.plan = std::move(plan.plan);
}

}  // namespace

SinkhornResult sinkhorn(const SoftMin& op, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                        const SinkhornOptions& options) {
  const Eigen::Index n = op.rows(), m = op.cols();
  check_weights(a, n, "a", "points");
  check_weights(b, m, "b", "points");
  check_sinkhorn_options(options);
  const SinkhornProblem p{op, a, b, a.array().log(), b.array().log(), options};
  StageResult state;
  state.f = options.f_init.size() == n ? options.f_init : Eigen::VectorXd::Zero(n);
  state.g = options.g_init.size() == m ? options.g_init : Eigen::VectorXd::Zero(m);
  stages::KernelStorage kernels;
  kernels.use_float = options.tol >= 16.0 * 0x1p-24;  // the float32 kernel (ot.hpp)
  // Kernel mode's scalings u = a / (P~ v) are 0 / 0 on an empty bin: with empty bins the
  // log-domain loop runs (log a_i = -inf drops the bin from every soft-min; ot.hpp).
  const bool kernel_mode = options.kernel_mode && !has_empty_bins(a) && !has_empty_bins(b);
  const auto run_stage = [&](SinkhornStage s) {
    return kernel_mode ? stages::kernel_mode_stage(p, kernels, std::move(s))
                               : stages::log_domain_stage(p, std::move(s));
  };
  SinkhornResult r;
  state = run_schedule(epsilon_schedule(op, options), options, std::move(state), run_stage, r);
  stages::check_finite(state.f);
  stages::check_finite(state.g);
  finish(p, std::move(state), r);
  return r;
}

SinkhornResult sinkhorn_symmetric(const SoftMin& op, const Eigen::VectorXd& a, const SinkhornOptions& options) {
  const Eigen::Index n = op.rows();
  if (op.cols() != n)
    throw InputError("", "cost", "self-transport needs a square cost; it is " + std::to_string(n) + " x " +
                                     std::to_string(op.cols()));
  check_weights(a, n, "a", "points");
  check_sinkhorn_options(options);
  const Eigen::VectorXd log_a = a.array().log();
  const SinkhornProblem p{op, a, a, log_a, log_a, options};
  const std::vector<double> schedule = epsilon_schedule(op, options);
  StageResult state;
  if (options.f_init.size() == n) {
    state.f = options.f_init;
  } else {
    // Cold start at the soft-min of the zero potential, T(0), as GeomLoss does.
    op.softmin_rows(schedule.front(), p.log_a, state.f);
  }
  const auto run_stage = [&](SinkhornStage s) { return stages::symmetric_stage(p, std::move(s)); };
  SinkhornResult r;
  state = run_schedule(schedule, options, std::move(state), run_stage, r);
  state.g = state.f;
  finish(p, std::move(state), r);
  return r;
}

SinkhornDivergence sinkhorn_divergence(SinkhornResult&& xy, const SoftMin& xx, const SoftMin& yy,
                                       const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                                       const SinkhornOptions& self_options) {
  SinkhornDivergence d;
  SinkhornOptions sym = self_options;
  sym.g_init.resize(0);
  d.xx = sinkhorn_symmetric(xx, a, sym);
  sym.f_init = self_options.g_init;
  d.yy = sinkhorn_symmetric(yy, b, sym);
  d.xy = std::move(xy);
  d.value = d.xy.objective - 0.5 * (d.xx.objective + d.yy.objective);
  return d;
}

SinkhornDivergence sinkhorn_divergence(const SoftMin& xy, const SoftMin& xx, const SoftMin& yy,
                                       const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                                       const SinkhornOptions& options) {
  if (xx.rows() != xy.rows() || yy.rows() != xy.cols())
    throw InputError("", "cost", "the self-transport operators do not match the sizes of the cross operator");
  return sinkhorn_divergence(sinkhorn(xy, a, b, options), xx, yy, a, b, options);
}

}  // namespace tokenflow
