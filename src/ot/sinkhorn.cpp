// The Sinkhorn solvers of ot.hpp, built from the epsilon stages of stages.hpp: the alternating
// loop for OT_eps(a, b) (log domain or kernel mode), the symmetric loop for OT_eps(a, a), the
// debiased divergence built on both, the one check of SinkhornOptions, and SoftMin's defaults.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
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

void SoftMin::row_mean_cost(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  out.resize(rows());
  const Eigen::Index m = cols();
  const double inv = 1.0 / eps;
  for_each_row([&](Eigen::Index i, const double* c) {
    double top = -std::numeric_limits<double>::infinity();
    for (Eigen::Index j = 0; j < m; ++j) top = std::max(top, h[j] - c[j] * inv);
    double total = 0.0, weighted = 0.0;
    for (Eigen::Index j = 0; j < m; ++j) {
      const double w = std::exp(h[j] - c[j] * inv - top);
      total += w;
      weighted += w * c[j];
    }
    out[i] = weighted / total;
  });
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
  if (!(options.marginal_penalty > 0.0))
    throw InputError("", "marginal_penalty", "must be positive (+inf: balanced transport)");
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

// Where an epsilon-scaling schedule ended: the last stage run (the final epsilon's, unless the
// plain loop beside finished first) and the last intermediate stage that converged ("reached").
struct ScheduleEnd {
  StageResult last;
  double last_epsilon = 0.0;
  std::optional<StageResult> reached;
  double reached_epsilon = 0.0;
  int used = 0;  // iterations of all stages
};

// The largest problem (n m pairs) whose stalled schedule starts its final stage from the exact
// solver's dual potentials (exact_start): the network simplex on 2^20 pairs takes about as long as
// a few hundred Sinkhorn iterations there, and a stalled schedule has thousands left.
constexpr double kExactStartMaxPairs = 1 << 20;

// Potentials at epsilon whose plan a_i b_j exp((f_i + g_j - C_ij) / eps) equals the exact plan T
// on T's support: f_i + g_j = C_ij + eps log(T_ij / (a_i b_j)) on every arc with T_ij > 0. That
// support is a forest (the positive arcs of the network simplex's basis tree), so the equations are
// solved exactly by walking each tree from a root that keeps its exact dual; nodes on no positive
// arc (empty bins) keep theirs. Why not the exact duals themselves: they give every tight arc the
// entry a_i b_j, not T_ij, and the loop then moves the difference along the plan's chains one link
// per iteration. Measured on POT's 1-D stabilization problem (100 bins, eps = 1e-5, weights
// perturbed by 1e-15): from the exact duals the error after 3 000 plain iterations was still
// 2e-3; from these potentials it was 2e-9 after one.
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
void potentials_on_the_plan(const RowMatrix& cost, const RowMatrix& plan, const SinkhornProblem& p, double eps,
                            Eigen::VectorXd& f, Eigen::VectorXd& g) {
  const Eigen::Index n = cost.rows(), m = cost.cols();
  std::vector<std::vector<Eigen::Index>> arcs(static_cast<std::size_t>(n + m));  // nodes: rows 0..n-1, columns n..
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j)
      if (plan(i, j) > 0.0) {
        arcs[static_cast<std::size_t>(i)].push_back(n + j);
        arcs[static_cast<std::size_t>(n + j)].push_back(i);
      }
  // eps log(T_ij / (a_i b_j)) + C_ij: the sum f_i + g_j of a positive arc.
  const auto arc_sum = [&](Eigen::Index i, Eigen::Index j) {
    return cost(i, j) + eps * (std::log(plan(i, j)) - p.log_a[i] - p.log_b[j]);
  };
  std::vector<char> seen(static_cast<std::size_t>(n + m), 0);
  std::vector<Eigen::Index> stack;
  for (Eigen::Index root = 0; root < n; ++root) {
    if (seen[static_cast<std::size_t>(root)] || arcs[static_cast<std::size_t>(root)].empty()) continue;
    seen[static_cast<std::size_t>(root)] = 1;
    stack.assign(1, root);
    while (!stack.empty()) {
      const Eigen::Index u = stack.back();
      stack.pop_back();
      for (const Eigen::Index v : arcs[static_cast<std::size_t>(u)]) {
        if (seen[static_cast<std::size_t>(v)]) continue;
        seen[static_cast<std::size_t>(v)] = 1;
        if (u < n)
          g[v - n] = arc_sum(u, v - n) - f[u];
        else
          f[v] = arc_sum(v, u - n) - g[u - n];
        stack.push_back(v);
      }
    }
  }
}

// The start of a final stage at epsilon from the exact problem (exact_ot on the operator's costs,
// read row by row): potentials whose plan is the exact plan on its support
// (potentials_on_the_plan), from the exact dual potentials, the limit of the entropic ones as
// epsilon -> 0. None when the operator does not visit pairs, the problem is larger than
// kExactStartMaxPairs, or the exact solver refuses it (forbidden pairs that no plan avoids); none
// for an unbalanced problem, whose potentials are not those of exact OT in the limit.
std::optional<StageResult> exact_start(const SinkhornProblem& p, double eps) {
  const Eigen::Index n = p.op.rows(), m = p.op.cols();
  if (!stages::balanced(p) || !p.op.visits_pairs() || static_cast<double>(n) * static_cast<double>(m) > kExactStartMaxPairs)
    return std::nullopt;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> cost(n, m);
  std::vector<double> buffer(static_cast<std::size_t>(m));
  for (Eigen::Index i = 0; i < n; ++i) {
    const double* c = p.op.cost_row(i, buffer.data());
    std::copy(c, c + m, &cost(i, 0));
  }
  try {
    ExactOTResult exact = exact_ot(cost, p.a, p.b);
    StageResult start;
    start.f = std::move(exact.f);
    start.g = std::move(exact.g);
    potentials_on_the_plan(cost, exact.plan, p, eps, start.f, start.g);
    return start;
  } catch (const InputError&) {
    return std::nullopt;
  }
}

// Epsilon-scaling: runs `run_stage` at each epsilon of the schedule, each stage warm-started from
// the last one's potentials; stops early once the plain loop beside (p.beside) is done. Into
// `totals`: the final stage's iterations and kernel mode's statistics.
// A stage that runs out of its share of iterations stalls the schedule: with `exact` (the
// alternating solve of sinkhorn(), not the symmetric one) its final stage then starts from the
// exact solution (exact_start), skipping the stages left between. Why: at epsilon far below the
// cost differences between neighbouring points the plan is nearly a chain (1-D histograms: each
// bin sends its mass to one or two bins), along which the alternating loop moves mass by one link
// per iteration, and each stage inherits the last one's error along the chain. Measured on POT's
// 1-D stabilization problem (Gaussians on 100 bins, squared index distances, eps = 1e-5, 31
// stages): the stages from 0.15 down took 2 700 to 13 000 iterations each, and the final stage did
// not reach 1e-6 in 200 000 more; from the exact solution it stops at its floor within a few
// iterations (docs/ot.md, "Stalled schedules start from the exact plan").
template <class RunStage>
ScheduleEnd run_schedule(const SinkhornProblem& p, const std::vector<double>& schedule, StageResult state,
                         RunStage run_stage, SinkhornResult& totals, bool exact = false) {
  ScheduleEnd end;
  int intermediate_used = 0;
  for (std::size_t k = 0; k < schedule.size(); ++k) {
    if (p.beside && p.beside->done()) break;
    SinkhornStage stage = next_stage(schedule, k, end.used, intermediate_used, p.options);
    if (stage.budget == 0) continue;
    const bool final = stage.final;
    stage.f = std::move(state.f);
    stage.g = std::move(state.g);
    state = run_stage(std::move(stage));
    end.used += state.iterations;
    end.last_epsilon = schedule[k];
    if (!final) intermediate_used += state.iterations;
    if (final) totals.final_stage_iterations = state.iterations;
    if (!final && state.status == StageStatus::converged) {
      end.reached = state;
      end.reached_epsilon = schedule[k];
    }
    if (!final && state.status == StageStatus::out_of_iterations && exact) {
      exact = false;  // once
      if (std::optional<StageResult> start = exact_start(p, schedule.back())) {
        state.f = std::move(start->f);
        state.g = std::move(start->g);
        k = schedule.size() - 2;  // the final stage next
      }
    }
    if (state.kernel) {
      totals.kernel_iterations += state.kernel->iterations;
      totals.kernel_absorptions += state.kernel->absorptions;
      totals.kernel_omega = state.kernel->omega;
      totals.kernel_anderson_depth = state.kernel->anderson_depth;
    }
  }
  end.last = std::move(state);
  return end;
}

// The plan of `state` (potentials at epsilon) measured, unless the stage measured it already;
// the potentials are first centered (stages.hpp, center_potentials) unless `symmetric` (f = g).
stages::PlanMeasure measured_plan(const SinkhornProblem& p, StageResult& state, double epsilon,
                                  bool symmetric = false) {
  if (state.plan) {
    stages::PlanMeasure plan = std::move(*state.plan);
    state.plan.reset();
    return plan;
  }
  if (!symmetric) stages::center_potentials(p, epsilon, state.f, state.g);
  return stages::measure_plan(p, epsilon, p.options.want_plan, state.f, state.g);
}

// The result of potentials at `epsilon` and their measured plan (stages.hpp, PlanMeasure):
// converged only when the stage converged at the final epsilon, the plan's marginal error is
// below tol and tol is above the plan's rounding floor.
void finish(const SinkhornProblem& p, StageResult state, stages::PlanMeasure plan, double epsilon,
            SinkhornResult& r) {
  const SinkhornOptions& o = p.options;
  r.f = std::move(state.f);
  r.g = std::move(state.g);
  r.marginal_error = plan.marginal_error;
  r.rounding_floor = plan.rounding_floor;
  r.epsilon_reached = epsilon;
  r.below_floor = !(o.tol > plan.rounding_floor);
  r.converged = state.status == StageStatus::converged && epsilon == o.epsilon && plan.marginal_error < o.tol &&
                !r.below_floor;
  r.cost = plan.cost;
  r.objective = plan.objective;
  r.plan_mass = plan.mass;
  r.plan = std::move(plan.plan);
}

// The final stage's check: the plan of a final stage that stopped on its estimate is measured;
// while its error is not below tol (with tol above its floor) and iterations are left, the
// log-domain loop (symmetric: the symmetric stage) goes on from it with a target 4 times smaller,
// as PlainLoop does. The estimate and the measure differ by more than rounding when the soft-mins
// carry a certified error (the grid operator's, added to the measure).
void confirm_final_stage(const SinkhornProblem& p, ScheduleEnd& end, stages::PlanMeasure& plan,
                         bool symmetric = false) {
  const SinkhornOptions& o = p.options;
  double target = o.tol;
  for (;;) {
    if (symmetric) end.last.g = end.last.f;
    plan = measured_plan(p, end.last, end.last_epsilon, symmetric);
    if (end.last.status != StageStatus::converged || end.last_epsilon != o.epsilon) return;
    if (plan.marginal_error < o.tol || !(o.tol > plan.rounding_floor)) return;
    if (end.used >= o.max_iter || (p.beside && p.beside->done())) {
      end.last.status = StageStatus::out_of_iterations;
      return;
    }
    target /= 4.0;
    SinkhornStage more;
    more.epsilon = o.epsilon;
    more.tol = target;
    more.budget = o.max_iter - end.used;
    more.done_before = end.used;
    more.final = true;
    more.start = stages::WarmStart::from_f;
    more.f = std::move(end.last.f);
    more.g = std::move(end.last.g);
    end.last = symmetric ? stages::symmetric_stage(p, std::move(more))
                         : stages::log_domain_stage(p, std::move(more));
    end.used += end.last.iterations;
  }
}

// Plain options: overrelaxation 1 (or 0 without Anderson), no epsilon-scaling, no kernel mode.
bool is_plain(const SinkhornOptions& o, std::size_t stages, bool kernel_mode) {
  const bool plain_step = o.overrelaxation == 1.0 || (o.overrelaxation == 0.0 && o.anderson_depth <= 0);
  return plain_step && stages == 1 && !kernel_mode;
}

// The plain loop alone, to convergence or max_iter.
void run_plain(const SinkhornProblem& p, const Eigen::VectorXd& g_start, SinkhornResult& r) {
  stages::PlainLoop loop(p, g_start, true);
  while (loop.iterations() < p.options.max_iter && !loop.step()) {
  }
  r.iterations = r.final_stage_iterations = loop.iterations();
  StageResult end = loop.result();
  stages::PlanMeasure plan = measured_plan(p, end, p.options.epsilon);
  finish(p, std::move(end), std::move(plan), p.options.epsilon, r);
}

// What the schedule returns when it did not converge (the plain loop beside not done either):
// the smaller measured error of the final epsilon's candidates (the accelerated loop's best
// iterate, the plain loop's best), and the last intermediate stage reached instead (at its
// epsilon) only when its error is smaller still.
void choose_unconverged(const SinkhornProblem& p, ScheduleEnd& end, stages::PlanMeasure& plan, double& epsilon) {
  const double eps = p.options.epsilon;
  epsilon = end.last_epsilon;
  if (p.beside) {
    StageResult plain = p.beside->result();
    stages::PlanMeasure plain_plan = measured_plan(p, plain, eps);
    if (plain_plan.marginal_error < plan.marginal_error || epsilon != eps) {
      end.last = std::move(plain);
      plan = std::move(plain_plan);
      epsilon = eps;
    }
  }
  if (end.reached) {
    stages::PlanMeasure reached_plan = measured_plan(p, *end.reached, end.reached_epsilon);
    if (reached_plan.marginal_error < plan.marginal_error) {
      end.last = std::move(*end.reached);
      plan = std::move(reached_plan);
      epsilon = end.reached_epsilon;
    }
  }
}

}  // namespace

// Epsilon schedule: geometric from epsilon_start (or the operator's cost range) down to epsilon
// (Schmitzer 2019, "Stabilized sparse scaling algorithms for entropy regularized transport
// problems", Sec. 3.2).
std::vector<double> stages::epsilon_schedule(const SoftMin& op, const SinkhornOptions& options) {
  std::vector<double> schedule;
  const double start = options.epsilon_start < 0.0 ? op.cost_range() : options.epsilon_start;
  if (start > options.epsilon && std::isfinite(start))
    for (double e = start; e > options.epsilon; e /= options.epsilon_decay) schedule.push_back(e);
  schedule.push_back(options.epsilon);
  return schedule;
}

SinkhornResult sinkhorn(const SoftMin& op, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                        const SinkhornOptions& options) {
  const Eigen::Index n = op.rows(), m = op.cols();
  check_weights(a, n, "a", "points");
  check_weights(b, m, "b", "points");
  check_sinkhorn_options(options);
  SinkhornProblem p{op, a, b, a.array().log(), b.array().log(), options};
  StageResult state;
  state.f = options.f_init.size() == n ? options.f_init : Eigen::VectorXd::Zero(n);
  state.g = options.g_init.size() == m ? options.g_init : Eigen::VectorXd::Zero(m);
  // Kernel mode's scalings u = a / (P~ v) are 0 / 0 on an empty bin: with empty bins the
  // log-domain loop runs (log a_i = -inf drops the bin from every soft-min; ot.hpp).
  // Unbalanced problems run the log-domain loop too (kernel mode scales to fixed marginals).
  const bool kernel_mode = options.kernel_mode && !has_empty_bins(a) && !has_empty_bins(b) && stages::balanced(p);
  const std::vector<double> schedule = stages::epsilon_schedule(op, options);
  SinkhornResult r;
  r.marginal_penalty = options.marginal_penalty;
  if (is_plain(options, schedule.size(), kernel_mode)) {
    run_plain(p, state.g, r);
    return r;
  }
  std::optional<stages::PlainLoop> beside;
  // No plain loop beside an operator that does not visit pairs (the grid): from a cold start at the
  // final epsilon, the plain loop's potentials weight the sums by factors exp(f / eps) spread over
  // thousands of orders of magnitude, heaviest far from each target, and the grid's certificate
  // rejects nearly every row (measured: 19 300 to 20 000 of 20 000 rows summed exactly in each of
  // its soft-mins at eps = 0.05, against 0 to 11 in the epsilon-scaled loop's).
  if (!kernel_mode && options.plain_beside && op.visits_pairs())
    p.beside = &beside.emplace(p, state.g, false);
  stages::KernelStorage kernels;
  kernels.use_float = options.tol >= 16.0 * 0x1p-24;  // the float32 kernel (ot.hpp)
  const auto run_stage = [&](SinkhornStage s) {
    return kernel_mode ? stages::kernel_mode_stage(p, kernels, std::move(s))
                       : stages::log_domain_stage(p, std::move(s));
  };
  ScheduleEnd end = run_schedule(p, schedule, std::move(state), run_stage, r, true);
  stages::check_finite(end.last.f);
  stages::check_finite(end.last.g);
  stages::PlanMeasure plan;
  confirm_final_stage(p, end, plan);
  r.iterations = end.used;
  if (beside && beside->done()) {  // the plain loop finished first: its result
    StageResult won = beside->result();
    stages::PlanMeasure won_plan = measured_plan(p, won, options.epsilon);
    finish(p, std::move(won), std::move(won_plan), options.epsilon, r);
    return r;
  }
  double epsilon = end.last_epsilon;
  if (!(end.last.status == StageStatus::converged && epsilon == options.epsilon))
    choose_unconverged(p, end, plan, epsilon);
  finish(p, std::move(end.last), std::move(plan), epsilon, r);
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
  const std::vector<double> schedule = stages::epsilon_schedule(op, options);
  StageResult state;
  if (options.f_init.size() == n) state.f = options.f_init;
  const auto run_stage = [&](SinkhornStage s) {
    // Cold start at the soft-min of the zero potential, T(0), as GeomLoss does, at the epsilon of
    // the first stage that runs: under a small budget the intermediate stages get no iteration,
    // and a T(0) of a larger epsilon (of the order of the cost range) carried into a stage at a
    // small one overflows its plan (exp((f_i + f_j - C_ij) / eps) with f ~ the cost range).
    if (s.f.size() != n) {
      op.softmin_rows(s.epsilon, p.log_a, s.f);
      s.f *= stages::damping(p, s.epsilon);
    }
    return stages::symmetric_stage(p, std::move(s));
  };
  SinkhornResult r;
  r.marginal_penalty = options.marginal_penalty;
  ScheduleEnd end = run_schedule(p, schedule, std::move(state), run_stage, r);
  stages::PlanMeasure plan;
  confirm_final_stage(p, end, plan, true);
  r.iterations = end.used;
  end.last.g = end.last.f;
  finish(p, std::move(end.last), std::move(plan), end.last_epsilon, r);
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
  if (!std::isinf(self_options.marginal_penalty)) {  // Sejourne et al.'s mass term (ot.hpp)
    const double gap = a.sum() - b.sum();
    d.value += 0.5 * self_options.epsilon * gap * gap;
  }
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
