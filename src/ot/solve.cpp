// OT between point clouds as `tokenflow ot` and Python solve it (ot_solve.hpp).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "../io/json_values.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/ot_solve.hpp"

namespace tokenflow {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// epsilon_start: auto -> NaN (resolved once the operator exists), off -> 0, range -> -1 (the
// operator's cost range, as SinkhornOptions reads a negative value), or a number >= 0.
double parse_epsilon_start(const std::string& s) {
  if (s == "auto") return std::nan("");
  if (s == "off") return 0.0;
  if (s == "range") return -1.0;
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size() && std::isfinite(v) && v >= 0.0) return v;
  } catch (const std::exception&) {
  }
  throw InputError("", "epsilon_start", "'" + s + "' is not auto, off, range or a number >= 0");
}

using json_values::json_number;

OTSolution start(const OTSolveOptions& options, Eigen::Index n, Eigen::Index m,
                 const std::string& ground_cost) {
  OTSolution s;
  s.method = options.method;
  s.ground_cost = ground_cost;
  s.n = n;
  s.m = m;
  return s;
}

bool wants_plan(const OTSolveOptions& options, Eigen::Index n, Eigen::Index m) {
  return options.want_plan.value_or(static_cast<long long>(n) * static_cast<long long>(m) <=
                                    kPlanMaxPairs);
}

void solve_exact(CostMatrix cost, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                 bool want_plan, std::chrono::steady_clock::time_point clock, OTSolution& s) {
  ExactOTResult r = exact_ot(cost, a, b);
  s.solve_seconds = seconds_since(clock);  // cost matrix, graph and network simplex
  s.status = "optimal";
  s.converged = true;
  s.cost = r.cost;
  s.objective = r.cost;
  s.marginal_error = plan_marginal_error(r.plan, a, b);
  s.dual_objective = r.f.dot(a) + r.g.dot(b);
  s.f = std::move(r.f);
  s.g = std::move(r.g);
  s.plan_formed = want_plan;
  if (want_plan) s.plan = std::move(r.plan);
}

void check_exact_size(Eigen::Index n, Eigen::Index m) {
  const long long pairs = static_cast<long long>(n) * static_cast<long long>(m);
  if (pairs > kExactMaxPairs)
    throw InputError(
        "", "method",
        fmt::format(
            "exact OT holds one arc per pair; n m = {} is over {} (use the sinkhorn method)", pairs,
            kExactMaxPairs));
}

// The Sinkhorn loop on `op` with the options resolved as the CLI resolves them.
void solve_sinkhorn(const SoftMin& op, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                    const OTSolveOptions& options, bool want_plan, OTSolution& s) {
  SinkhornOptions opt;
  opt.epsilon = options.epsilon;
  opt.tol = options.tol;
  opt.max_iter = options.max_iter;
  opt.want_plan = want_plan;
  opt.epsilon_decay = options.epsilon_decay;
  opt.epsilon_start = parse_epsilon_start(options.epsilon_start);
  if (std::isnan(opt.epsilon_start)) opt.epsilon_start = automatic_epsilon_start(op, opt.epsilon);
  opt.progress = options.progress;
  opt.progress_every = options.progress_every;
  opt.kernel_mode = s.op_used == "kernel";
  opt.overrelaxation = options.overrelaxation;
  const auto clock = std::chrono::steady_clock::now();
  SinkhornResult r = sinkhorn(op, a, b, opt);
  s.solve_seconds = seconds_since(clock);  // the Sinkhorn loop and the plan
  s.status = r.converged ? "converged" : "max_iter";
  s.converged = r.converged;
  s.cost = r.cost;
  s.objective = r.objective;
  s.iterations = r.iterations;
  s.marginal_error = r.marginal_error;
  s.epsilon = opt.epsilon;
  s.tol = opt.tol;
  s.max_iter = opt.max_iter;
  s.epsilon_start = opt.epsilon_start < 0.0 ? op.cost_range() : opt.epsilon_start;
  s.epsilon_decay = opt.epsilon_start != 0.0 ? opt.epsilon_decay : 0.0;
  s.kernel_iterations = r.kernel_iterations;
  s.kernel_absorptions = r.kernel_absorptions;
  s.kernel_omega = r.kernel_omega;
  s.kernel_anderson_depth = r.kernel_anderson_depth;
  s.f = std::move(r.f);
  s.g = std::move(r.g);
  s.plan_formed = want_plan;
  if (want_plan) s.plan = std::move(r.plan);
}

}  // namespace

void check_operator(const std::string& choice) {
  if (choice != "auto" && choice != "dense" && choice != "online" && choice != "kernel")
    throw InputError("", "operator",
                     "unknown operator '" + choice + "'; one of: auto, kernel, dense, online");
}

std::string resolve_operator(const std::string& choice, long long pairs) {
  if (choice != "auto") return choice;
  if (pairs > kDenseSoftMinMaxPairs) return "online";
  return pairs >= kKernelMinPairs ? "kernel" : "dense";
}

CostMatrix cost_matrix(const CostMatrix& x, const CostMatrix& y, CostKind cost) {
  CostMatrix c(x.rows(), y.rows());
  const Eigen::Index d = x.cols();
#pragma omp parallel for schedule(static)
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index j = 0; j < y.rows(); ++j) c(i, j) = pair_cost(cost, &x(i, 0), &y(j, 0), d);
  return c;
}

std::unique_ptr<SoftMin> make_soft_min(const CostMatrix& x, const CostMatrix& y, CostKind cost,
                                       const std::string& choice, std::string* used) {
  check_operator(choice);
  const long long pairs = static_cast<long long>(x.rows()) * static_cast<long long>(y.rows());
  const std::string resolved = resolve_operator(choice, pairs);
  const bool dense = resolved != "online";
  if (used) *used = resolved;
  if (!dense) return std::make_unique<OnlineSoftMin>(x, y, cost);
  return std::make_unique<DenseSoftMin>(cost_matrix(x, y, cost));
}

double plan_marginal_error(const CostMatrix& plan, const Eigen::VectorXd& a,
                           const Eigen::VectorXd& b) {
  return (plan.rowwise().sum() - a).cwiseAbs().sum() +
         (plan.colwise().sum().transpose() - b).cwiseAbs().sum();
}

void check_ot_options(const OTSolveOptions& o, bool cost_matrix_given, CostKind cost) {
  if (o.method != "sinkhorn" && o.method != "exact")
    throw InputError("", "method", "unknown method '" + o.method + "'; one of: sinkhorn, exact");
  check_operator(o.op);
  if (!(o.overrelaxation == 0.0 || (o.overrelaxation >= 1.0 && o.overrelaxation < 2.0)))
    throw InputError("", "overrelaxation", "must be 0 (adaptive) or in [1, 2)");
  if (o.method == "exact") {
    if (o.divergence)
      throw InputError("", "divergence", "is a Sinkhorn quantity (use the sinkhorn method)");
    return;
  }
  if (o.divergence && cost_matrix_given)
    throw InputError("", "divergence", "needs the point clouds x and y, not a cost matrix");
  if (o.divergence && cost == CostKind::dot)
    throw InputError(
        "", "divergence",
        "needs a cost whose Gibbs kernel is positive definite (sqeuclidean, euclidean)");
  if (!(o.epsilon > 0.0) || !std::isfinite(o.epsilon))
    throw InputError("", "epsilon", "must be positive");
  if (!(o.tol > 0.0)) throw InputError("", "tol", "must be positive");
  if (o.max_iter < 1) throw InputError("", "max_iter", "must be at least 1");
  const double epsilon_start = parse_epsilon_start(o.epsilon_start);
  if (epsilon_start != 0.0 && !(o.epsilon_decay > 1.0))  // NaN (auto) != 0 too
    throw InputError("", "epsilon_decay", "must be greater than 1");
  if (cost_matrix_given && o.op == "online")
    throw InputError("", "operator", "a given cost matrix is always dense");
}

OTSolution solve_ot(const Measure<double>& mu, const Measure<double>& nu, CostKind cost,
                    const OTSolveOptions& options) {
  check_ot_options(options, false, cost);
  if (mu.d() != nu.d())
    throw InputError("", "y",
                     "points of dimension " + std::to_string(nu.d()) +
                         " cannot be compared with points of dimension " + std::to_string(mu.d()));
  OTSolution s = start(options, mu.n(), nu.n(), to_string(cost));
  const bool want_plan = wants_plan(options, mu.n(), nu.n());
  if (options.method == "exact") {
    check_exact_size(mu.n(), nu.n());
    const auto clock = std::chrono::steady_clock::now();
    solve_exact(cost_matrix(mu.points, nu.points, cost), mu.weights, nu.weights, want_plan, clock,
                s);
    return s;
  }
  const auto op = make_soft_min(mu.points, nu.points, cost, options.op, &s.op_used);
  solve_sinkhorn(*op, mu.weights, nu.weights, options, want_plan, s);
  if (options.divergence) {
    // S_eps = OT_eps(a, b) - (OT_eps(a, a) + OT_eps(b, b)) / 2 (ot.hpp), with the solve above as
    // OT_eps(a, b); the symmetric problems start cold and form no plan.
    const auto xx = make_soft_min(mu.points, mu.points, cost, options.op);
    const auto yy = make_soft_min(nu.points, nu.points, cost, options.op);
    SinkhornOptions sym;
    sym.epsilon = options.epsilon;
    sym.tol = options.tol;
    sym.max_iter = options.max_iter;
    sym.epsilon_decay = options.epsilon_decay;
    // The scaling start of the cross problem (a resolved number; "range" is the cross cost's).
    sym.epsilon_start = parse_epsilon_start(options.epsilon_start) < 0.0 ? -1.0 : s.epsilon_start;
    s.xx = sinkhorn_symmetric(*xx, mu.weights, sym);
    s.yy = sinkhorn_symmetric(*yy, nu.weights, sym);
    s.divergence = s.objective - 0.5 * (s.xx.objective + s.yy.objective);
  }
  return s;
}

OTSolution solve_ot(CostMatrix cost, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                    const OTSolveOptions& options) {
  check_ot_options(options, true, CostKind::sqeuclidean);
  OTSolution s = start(options, cost.rows(), cost.cols(), "matrix");
  const bool want_plan = wants_plan(options, cost.rows(), cost.cols());
  if (options.method == "exact") {
    check_exact_size(cost.rows(), cost.cols());
    const auto clock = std::chrono::steady_clock::now();
    solve_exact(std::move(cost), a, b, want_plan, clock, s);
    return s;
  }
  s.op_used = resolve_operator(options.op, static_cast<long long>(cost.rows()) * cost.cols());
  const DenseSoftMin op(std::move(cost));
  solve_sinkhorn(op, a, b, options, want_plan, s);
  return s;
}

std::string ot_summary_json(const OTSolution& r, double wall_seconds) {
  nlohmann::json s;
  s["command"] = "ot";
  s["method"] = r.method;
  s["n"] = r.n;
  s["m"] = r.m;
  s["ground_cost"] = r.ground_cost;
  s["solve_seconds"] = r.solve_seconds;
  s["status"] = r.status;
  s["converged"] = r.converged;
  s["cost"] = json_number(r.cost);
  s["objective"] = json_number(r.objective);
  s["iterations"] = r.iterations ? nlohmann::json(*r.iterations) : nlohmann::json(nullptr);
  s["marginal_error"] = json_number(r.marginal_error);
  if (r.method == "exact") {
    s["dual_objective"] = json_number(r.dual_objective);
  } else {
    s["epsilon"] = r.epsilon;
    s["tol"] = r.tol;
    s["max_iter"] = r.max_iter;
    s["operator"] = r.op_used;
    if (r.op_used == "kernel") {
      s["kernel_iterations"] = r.kernel_iterations;
      s["kernel_absorptions"] = r.kernel_absorptions;
      s["overrelaxation"] = r.kernel_omega;
      s["anderson_depth"] = r.kernel_anderson_depth;  // 0: over-relaxation
    }
    s["epsilon_start"] = json_number(r.epsilon_start);
    if (r.epsilon_decay != 0.0) s["epsilon_decay"] = r.epsilon_decay;  // set when scaling
  }
  if (r.divergence) {
    s["divergence"] = json_number(*r.divergence);
    s["divergence_terms"] = {{"xy", json_number(r.objective)},
                             {"xx", json_number(r.xx.objective)},
                             {"yy", json_number(r.yy.objective)},
                             {"xx_iterations", r.xx.iterations},
                             {"yy_iterations", r.yy.iterations},
                             {"xx_marginal_error", json_number(r.xx.marginal_error)},
                             {"yy_marginal_error", json_number(r.yy.marginal_error)},
                             {"converged", r.xx.converged && r.yy.converged}};
  }
  s["plan_written"] = r.plan_formed;
  s["wall_seconds"] = wall_seconds;
  return s.dump(2);
}

WassersteinSolution solve_wasserstein(const Measure<double>& mu, const Measure<double>& nu,
                                      double p, const WassersteinOptions& options,
                                      bool conditional) {
  if (!(p >= 1.0) || !std::isfinite(p)) throw InputError("", "p", "must be a finite number >= 1");
  if (options.epsilon < 0.0 || !std::isfinite(options.epsilon))
    throw InputError("", "epsilon", "must be positive");
  if (!(options.tol > 0.0)) throw InputError("", "tol", "must be positive");
  if (options.max_iter < 1) throw InputError("", "max_iter", "must be at least 1");
  if (mu.d() != nu.d())
    throw InputError("", "y",
                     "points of dimension " + std::to_string(nu.d()) +
                         " cannot be compared with points of dimension " + std::to_string(mu.d()));
  if (options.method == WassersteinMethod::sorted && mu.d() != 1)
    throw InputError("", "method", "sorted needs points of dimension 1");
  const long long pairs = static_cast<long long>(mu.n()) * static_cast<long long>(nu.n());
  if (options.method == WassersteinMethod::exact && pairs > kExactMaxPairs)
    throw InputError("", "method",
                     "exact OT holds one arc per pair; n m = " + std::to_string(pairs) +
                         " is over 2^24 (use sinkhorn or auto)");
  if (conditional && options.method == WassersteinMethod::sinkhorn)
    throw InputError("", "method", "conditional W_p is computed exactly, position by position");
  WassersteinSolution s;
  s.conditional = conditional;
  s.n = mu.n();
  s.m = nu.n();
  s.d = mu.d();
  if (conditional) {
    s.result.p = p;
    s.result.value = conditional_wasserstein(mu, nu, p);
    return s;
  }
  s.result = wasserstein(mu, nu, p, options);
  return s;
}

std::string wasserstein_summary_json(const WassersteinSolution& solution, double wall_seconds) {
  const WassersteinResult& r = solution.result;
  nlohmann::json s;
  s["command"] = "wasserstein";
  s["p"] = r.p;
  s["n"] = solution.n;
  s["m"] = solution.m;
  s["d"] = solution.d;
  s["method"] = solution.conditional ? "conditional" : to_string(r.method);
  s["value"] = json_number(r.value);
  if (!solution.conditional && r.method == WassersteinMethod::sinkhorn) {
    s["status"] = r.sinkhorn.converged ? "converged" : "max_iter";
    s["converged"] = r.sinkhorn.converged;
    s["epsilon"] = r.epsilon;
    s["iterations"] = r.sinkhorn.iterations;
    s["marginal_error"] = json_number(r.sinkhorn.marginal_error);
    s["cost"] = json_number(r.sinkhorn.cost);
    s["entropic_bias_bound"] = json_number(r.entropic_bias_bound);
  } else {
    s["status"] = "optimal";
    if (!solution.conditional) s["converged"] = true;
  }
  s["wall_seconds"] = wall_seconds;
  return s.dump(2);
}

}  // namespace tokenflow
