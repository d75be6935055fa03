// OT between point clouds as `tokenflow ot` and Python solve it (ot_solve.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <optional>
#include <vector>

#include "tokenflow/echo.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/ot_batch.hpp"
#include "tokenflow/ot_solve.hpp"
#include "tokenflow/measure.hpp"
#include "tokenflow/memory_budget.hpp"
#include "parallel_pairs.hpp"

namespace tokenflow {

Measure<double> make_transport_measure(Points<double> points, Eigen::VectorXd weights, Eigen::VectorXd positions,
                                       bool normalize) {
  const Eigen::Index n = points.rows();
  Measure<double> mu = make_measure<double>(std::move(points), Eigen::VectorXd(), std::move(positions));
  if (weights.size() == 0) return mu;
  if (weights.size() != n)
    throw InputError("", "weights",
                     "has " + std::to_string(weights.size()) + " entries for " + std::to_string(n) + " points");
  bool any_mass = false;
  for (Eigen::Index i = 0; i < n; ++i) {
    if (!std::isfinite(weights[i]) || weights[i] < 0.0)
      throw InputError("", "weights", fmt::format("entry {} is {:g}; weights must be finite and non-negative", i,
                                                  weights[i]));
    any_mass = any_mass || weights[i] > 0.0;
  }
  if (!any_mass) throw InputError("", "weights", "are all zero: there is no mass to transport");
  if (normalize) {
    mu.weights = normalized_weights(weights);  // without overflow: [1e308, 1e308] is [0.5, 0.5]
  } else {
    // Unbalanced transport keeps the masses, which are data: their total must be a double.
    if (!std::isfinite(weights.sum())) throw InputError("", "weights", "sum to more than the largest double");
    mu.weights = weights;
  }
  return mu;
}

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
  throw InputError("", "epsilon_start", "'" + echo(s) + "' is not auto, off, range or a number >= 0");
}

constexpr double kUnitRoundoff = 0x1p-53;

// The key that names the data of a point-cloud problem whose costs are out of range: the cloud
// with the larger coordinates.
std::string larger_cloud(const Measure<double>& mu, const Measure<double>& nu) {
  const double x = mu.points.size() ? mu.points.cwiseAbs().maxCoeff() : 0.0;
  const double y = nu.points.size() ? nu.points.cwiseAbs().maxCoeff() : 0.0;
  return !std::isfinite(x) || x >= y ? "x" : "y";
}

// Why an exact plan is not a result (empty when it is one): the network simplex moves masses that
// are integer multiples of 2^-52 within one unit of a_i and b_j (exact.cpp), so each marginal is
// within n 2^-52 (m 2^-52) of a (b), plus the rounding of a and b themselves.
std::string exact_result_defect(const ExactOTResult& r, const Eigen::VectorXd& a, const Eigen::VectorXd& b) {
  if (!std::isfinite(r.cost)) return fmt::format("the transport cost <C, pi> is not finite ({:g})", r.cost);
  if (!r.f.allFinite() || !r.g.allFinite()) return "the dual potentials are not finite";
  const double tol = static_cast<double>(a.size() + b.size() + 2) * 0x1p-51;
  return coupling_defect(r.plan, a, b, tol, tol);
}

OTSolution start(const OTSolveOptions& options, Eigen::Index n, Eigen::Index m,
                 const std::string& ground_cost) {
  OTSolution s;
  s.method = options.method;
  s.ground_cost = ground_cost;
  s.n = n;
  s.m = m;
  return s;
}

// The bytes of the n x m float64 matrices a solve holds at once, besides the points and a given
// cost matrix: C (unless given) and C^T for the dense operator, C (unless given) and the kernel in
// kernel mode, exact OT's cost matrix (unless given) and plan, and the plan when it is formed.
long double ot_matrix_bytes(Eigen::Index n, Eigen::Index m, const std::string& method, const std::string& op,
                            bool want_plan, bool cost_given) {
  const long double matrix = 8.0L * static_cast<long double>(n) * static_cast<long double>(m);
  const long double c = cost_given ? 0 : matrix;
  if (method == "exact") return c + matrix;
  return (want_plan ? matrix : 0) + (op == "dense" || op == "kernel" ? c + matrix : 0);
}

// Whether the plan is formed: as asked, or by default when it has at most kPlanMaxPairs entries
// and fits in memory beside the operator.
bool wants_plan(const OTSolveOptions& options, Eigen::Index n, Eigen::Index m, const std::string& op = "online",
                bool cost_given = false) {
  return options.want_plan.value_or(static_cast<long long>(n) * static_cast<long long>(m) <= kPlanMaxPairs &&
                                    fits_in_memory(ot_matrix_bytes(n, m, options.method, op, true, cost_given)));
}

// Refuses before anything is allocated a solve whose matrices do not fit in memory
// (tokenflow/memory_budget.hpp; a plan of 10^5 x 10^5 points was solved for, then its allocation
// failed with std::bad_alloc). The key: "plan" when the plan asked for is the largest part,
// "method" for exact OT, else "operator".
void check_ot_memory(Eigen::Index n, Eigen::Index m, const OTSolveOptions& options, const std::string& op,
                     bool want_plan, bool cost_given) {
  const long double bytes = ot_matrix_bytes(n, m, options.method, op, want_plan, cost_given);
  if (fits_in_memory(bytes)) return;
  const bool exact = options.method == "exact";
  const bool plan_only = !exact && want_plan && ot_matrix_bytes(n, m, options.method, op, false, cost_given) == 0;
  const std::string what =
      exact ? "exact OT (its cost matrix and plan)"
            : std::string(want_plan ? "the plan" : "") + (want_plan && !plan_only ? " and " : "") +
                  (plan_only ? "" : "the " + op + " operator's matrices");
  check_memory(bytes, fmt::format("{} of {} x {} points, in float64,", what, n, m), "",
               exact ? "method" : plan_only || (want_plan && options.want_plan) ? "plan" : "operator",
               exact || plan_only ? "use fewer points, or the sinkhorn method without the plan"
                                  : "use fewer points, or the online operator");
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
  s.pivots = r.pivots;
  s.reason = exact_result_defect(r, a, b);
  if (!s.reason.empty()) {
    s.status = "failed";
    s.converged = false;
  }
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
            "exact OT holds the n x m cost matrix and plan; n m = {} is over {} (use the sinkhorn method)", pairs,
            kExactMaxPairs));
}

// The SinkhornOptions of `options` for the operator op: epsilon_start "auto" resolved
// (automatic_epsilon_start), kernel mode when the operator used is "kernel".
SinkhornOptions sinkhorn_options(const OTSolveOptions& options, const SoftMin& op, bool want_plan, bool kernel_mode) {
  SinkhornOptions opt = options.sinkhorn;
  opt.want_plan = want_plan;
  opt.kernel_mode = kernel_mode;
  opt.epsilon_start = parse_epsilon_start(options.epsilon_start);
  if (std::isnan(opt.epsilon_start)) opt.epsilon_start = automatic_epsilon_start(op, opt.epsilon);
  return opt;
}

// The Sinkhorn loop on `op` with the options resolved as the CLI resolves them (`used`): sets
// the status, reason, options and timing of s, and returns the result (take_sinkhorn_result
// moves it into s). symmetric: the self-transport OT_eps(a, a) of a symmetric cost (b == a), by
// sinkhorn_symmetric.
// `run`, when given, solves instead of sinkhorn(op, a, b, opt) (the multiscale schedule).
SinkhornResult solve_sinkhorn(const SoftMin& op, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                              const SinkhornOptions& opt, const std::string& cost_key, OTSolution& s,
                              bool symmetric = false, const std::function<SinkhornResult()>& run = {}) {
  const double magnitude = op.cost_magnitude();
  check_cost_range(magnitude, opt.epsilon, cost_key);
  const auto clock = std::chrono::steady_clock::now();
  SinkhornResult r;
  try {
    r = run ? run() : symmetric ? sinkhorn_symmetric(op, a, opt) : sinkhorn(op, a, b, opt);
    s.reason = sinkhorn_result_defect(r, a, b, magnitude, opt.epsilon);
  } catch (const NumericalFailure& e) {
    s.reason = e.what();
  }
  s.solve_seconds = seconds_since(clock);  // the Sinkhorn loop and the plan
  s.status = !s.reason.empty() ? "failed" : r.converged ? "converged" : r.below_floor ? "below_floor" : "max_iter";
  s.converged = s.reason.empty() && r.converged;
  s.epsilon = opt.epsilon;
  s.mass_a = a.sum();
  s.mass_b = b.sum();
  s.tol = opt.tol;
  s.max_iter = opt.max_iter;
  s.overrelaxation_requested = opt.overrelaxation;
  s.epsilon_start = opt.epsilon_start < 0.0 ? op.cost_range() : opt.epsilon_start;
  s.epsilon_decay = opt.epsilon_start != 0.0 ? opt.epsilon_decay : 0.0;
  return r;
}

// The numbers of a Sinkhorn result into s (the plan when it was asked for).
void take_sinkhorn_result(SinkhornResult r, bool want_plan, OTSolution& s) {
  s.cost = r.cost;
  s.objective = r.objective;
  s.marginal_penalty = r.marginal_penalty;
  s.plan_mass = r.plan_mass;
  s.iterations = r.iterations;
  s.marginal_error = r.marginal_error;
  s.rounding_floor = r.rounding_floor;
  s.epsilon_reached = r.epsilon_reached;
  s.kernel_iterations = r.kernel_iterations;
  s.kernel_absorptions = r.kernel_absorptions;
  s.kernel_omega = r.kernel_omega;
  s.kernel_anderson_depth = r.kernel_anderson_depth;
  s.f = std::move(r.f);
  s.g = std::move(r.g);
  s.plan_formed = want_plan;
  if (want_plan) s.plan = std::move(r.plan);
}

// S_eps (sinkhorn_divergence) for the cross result xy between mu and nu, solved with `cross`:
// the self-transport terms use the same epsilon, tolerances and scaling start (a resolved
// number; "range" is each self cost's), start cold, form no plan and report no progress. Their
// self costs are bounded by the cross problem's bound on the union of the points (sqeuclidean,
// euclidean: the diameter; dot: the largest norms), checked before the cross solve. A failure
// makes s failed, with the reason.
void add_divergence(const Measure<double>& mu, const Measure<double>& nu, CostKind cost, const std::string& op,
                    const SinkhornOptions& cross, SinkhornResult& xy, OTSolution& s) {
  const double grid_tol = grid_relative_tol(cross.tol);
  const auto xx = make_soft_min(mu.points, mu.points, cost, op, nullptr, grid_tol);
  const auto yy = make_soft_min(nu.points, nu.points, cost, op, nullptr, grid_tol);
  SinkhornOptions self = cross;
  self.want_plan = false;
  self.kernel_mode = false;
  self.progress = nullptr;
  try {
    SinkhornDivergence d = sinkhorn_divergence(std::move(xy), *xx, *yy, mu.weights, nu.weights, self);
    xy = std::move(d.xy);
    s.xx = std::move(d.xx);
    s.yy = std::move(d.yy);
    s.divergence = d.value;
    s.divergence_pot = xy.cost - 0.5 * (s.xx.cost + s.yy.cost);
    if (!std::isfinite(d.value)) s.reason = fmt::format("the Sinkhorn divergence is not finite ({:g})", d.value);
  } catch (const NumericalFailure& e) {
    s.reason = std::string("divergence: ") + e.what();
  }
  if (!s.reason.empty()) {
    s.status = "failed";
    s.converged = false;
  }
}

}  // namespace

void check_operator(const std::string& choice) {
  if (choice != "auto" && choice != "dense" && choice != "online" && choice != "kernel" &&
      choice != "grid")
    throw InputError(
        "", "operator",
        "unknown operator '" + choice + "'; one of: auto, kernel, dense, online, grid");
}

std::string resolve_operator(const std::string& choice, long long pairs, bool grid_applies) {
  if (choice != "auto") return choice;
  if (pairs > kDenseSoftMinMaxPairs) return grid_applies ? "grid" : "online";
  return pairs >= kKernelMinPairs ? "kernel" : "dense";
}

double grid_relative_tol(double tol) {
  return std::min(kGridMaxRelativeTol, tol / 16.0);
}

CostMatrix cost_matrix(const CostMatrix& x, const CostMatrix& y, CostKind cost) {
  CostMatrix c(x.rows(), y.rows());
  const Eigen::Index d = x.cols();
#pragma omp parallel for schedule(dynamic, pair_chunk(static_cast<double>(y.rows()))) \
    if (parallel_pairs(static_cast<double>(x.rows() * y.rows())))
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index j = 0; j < y.rows(); ++j) c(i, j) = pair_cost(cost, &x(i, 0), &y(j, 0), d);
  return c;
}

std::unique_ptr<SoftMin> make_soft_min(const CostMatrix& x, const CostMatrix& y, CostKind cost,
                                       const std::string& choice, std::string* used,
                                       double grid_tol) {
  check_operator(choice);
  const long long pairs = static_cast<long long>(x.rows()) * static_cast<long long>(y.rows());
  // auto's grid: 1 and 2 dimensions, where it was measured faster than online (docs/ot.md, "The
  // grid operator"); in 3 dimensions it is within a factor 1.25 of online either way there, and its
  // work grows as eps^(-3/2).
  const bool grid_applies = cost == CostKind::sqeuclidean && x.cols() >= 1 && x.cols() <= 2;
  const std::string resolved = resolve_operator(choice, pairs, grid_applies);
  if (resolved == "grid" && cost != CostKind::sqeuclidean)
    throw InputError("", "operator",
                     std::string("grid needs the sqeuclidean cost, not ") + to_string(cost));
  if (used) *used = resolved;
  if (resolved == "grid") return std::make_unique<GridSoftMin>(x, y, grid_tol);
  if (resolved == "online") return std::make_unique<OnlineSoftMin>(x, y, cost);
  return std::make_unique<DenseSoftMin>(cost_matrix(x, y, cost));
}

double plan_marginal_error(const CostMatrix& plan, const Eigen::VectorXd& a,
                           const Eigen::VectorXd& b) {
  return (plan.rowwise().sum() - a).cwiseAbs().sum() +
         (plan.colwise().sum().transpose() - b).cwiseAbs().sum();
}

void check_cost_range(double max_abs_cost, double epsilon, const std::string& cost_key) {
  if (!std::isfinite(max_abs_cost))
    throw InputError("", cost_key, "gives costs that are not finite (they overflow double precision)");
  if (max_abs_cost > kMaxCostMagnitude)
    throw InputError("", cost_key,
                     fmt::format("gives costs up to |C| = {:g}, above {:g} (the potentials and objectives "
                                 "sum many costs and would overflow); rescale the data",
                                 max_abs_cost, kMaxCostMagnitude));
  if (!(epsilon > 0.0)) return;  // exact OT: no epsilon
  if (!std::isfinite(1.0 / epsilon))
    throw InputError("", "epsilon", fmt::format("{:g} is so small that 1 / epsilon overflows", epsilon));
  check_epsilon_resolves(max_abs_cost, epsilon, "epsilon", fmt::format("costs up to |C| = {:g}", max_abs_cost));
}

void check_epsilon_resolves(double largest, double epsilon, const std::string& key, const std::string& what) {
  if (!(largest / epsilon > kMaxCostOverEpsilon)) return;
  throw InputError("", key,
                   fmt::format("{:g} is too small for {}: the log-domain exponents / epsilon (up to {:g}) keep no "
                               "correct digit in double precision beyond 2^50 = {:g}; use epsilon >= {:g} (or "
                               "rescale the data)",
                               epsilon, what, largest / epsilon, kMaxCostOverEpsilon, largest / kMaxCostOverEpsilon));
}

std::string coupling_defect(const CostMatrix& plan, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                            double row_tol, double col_tol) {
  if (!plan.allFinite()) {
    const Eigen::Index bad = static_cast<Eigen::Index>(
        std::find_if(plan.data(), plan.data() + plan.size(), [](double v) { return !std::isfinite(v); }) -
        plan.data());
    return fmt::format("the plan has a non-finite entry ({:g} at row {}, column {})", plan.data()[bad],
                       bad / plan.cols(), bad % plan.cols());
  }
  if ((plan.array() < 0.0).any()) return fmt::format("the plan has a negative entry ({:g})", plan.minCoeff());
  const double rows = (plan.rowwise().sum() - a).cwiseAbs().sum();
  const double cols = (plan.colwise().sum().transpose() - b).cwiseAbs().sum();
  if (!(rows <= row_tol))
    return fmt::format("the plan is not a coupling: its row sums are off the weights by {:g} (l1) > {:g}", rows,
                       row_tol);
  if (!(cols <= col_tol))
    return fmt::format("the plan is not a coupling: its column sums are off the weights by {:g} (l1) > {:g}",
                       cols, col_tol);
  return {};
}

std::string sinkhorn_result_defect(const SinkhornResult& r, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                                   double max_abs_cost, double epsilon) {
  if (!r.f.allFinite() || !r.g.allFinite()) return "the Sinkhorn potentials are not finite";
  if (!std::isfinite(r.cost)) return fmt::format("the transport cost <C, pi> is not finite ({:g})", r.cost);
  if (!std::isfinite(r.objective)) return fmt::format("the objective is not finite ({:g})", r.objective);
  if (!std::isfinite(r.marginal_error))
    return fmt::format("the marginal error is not finite ({:g})", r.marginal_error);
  if (r.plan.size() > 0) {
    if (!r.plan.allFinite()) return coupling_defect(r.plan, a, b, INFINITY, INFINITY);
    if ((r.plan.array() < 0.0).any()) return fmt::format("the plan has a negative entry ({:g})", r.plan.minCoeff());
  }
  // The columns of the plan sum to b (ot.hpp), so its mass is 1 up to rounding, and the row error
  // bounds |mass - 1| too. Rounding: each entry exp(z) carries the absolute error of its exponent
  // z = log a_i + log b_j + (f_i + g_j - C_ij) / eps, at most 4 u Z with Z the largest term
  // (u = 2^-53), plus 2 ulp of exp; the row and lane sums add at most (n + m) u relative.
  const double Z = (r.f.cwiseAbs().maxCoeff() + r.g.cwiseAbs().maxCoeff() + max_abs_cost) / epsilon +
                   a.array().log().abs().maxCoeff() + b.array().log().abs().maxCoeff();
  // Unbalanced (ot.hpp): the columns sum to b e^{-g/rho}, so the mass is sum_j b_j e^{-g_j/rho}
  // within rounding (relative, as above), and the row error bounds its distance to sum_i a_i
  // e^{-f_i/rho} too; the expected mass is the latter.
  double expected = 1.0;
  if (!std::isinf(r.marginal_penalty)) {
    expected = 0.0;
    for (Eigen::Index i = 0; i < a.size(); ++i)
      if (a[i] != 0.0) expected += a[i] * std::exp(-r.f[i] / r.marginal_penalty);
  }
  const double rounding =
      (4.0 * Z + 8.0 + static_cast<double>(a.size() + b.size())) * kUnitRoundoff * std::max(1.0, expected);
  if (!(std::abs(r.plan_mass - expected) <= r.marginal_error + rounding))
    return fmt::format("the plan's mass is {:.17g}, off {:.17g} by more than its marginal error {:g} and rounding {:g}",
                       r.plan_mass, expected, r.marginal_error, rounding);
  return {};
}

void check_ot_options(const OTSolveOptions& o, bool cost_matrix_given, CostKind cost) {
  if (o.method != "sinkhorn" && o.method != "exact")
    throw InputError("", "method", "unknown method '" + o.method + "'; one of: sinkhorn, exact");
  check_operator(o.op);
  if (o.multiscale != "auto" && o.multiscale != "off")
    throw InputError("", "multiscale", "unknown value '" + o.multiscale + "'; one of: auto, off");
  check_overrelaxation(o.sinkhorn.overrelaxation);
  if (o.method == "exact") {
    if (o.divergence)
      throw InputError("", "divergence", "is a Sinkhorn quantity (use the sinkhorn method)");
    if (!std::isinf(o.sinkhorn.marginal_penalty))
      throw InputError("", "marginal_penalty", "is the penalty of unbalanced entropic transport (use the sinkhorn method)");
    return;
  }
  if (!std::isinf(o.sinkhorn.marginal_penalty) && o.op == "kernel")
    throw InputError("", "operator",
                     "kernel mode scales to fixed marginals; unbalanced transport (marginal_penalty) runs the "
                     "log-domain loop: use auto, dense, online or grid");
  if (o.divergence && cost_matrix_given)
    throw InputError("", "divergence", "needs the point clouds x and y, not a cost matrix");
  if (o.divergence && cost == CostKind::dot)
    throw InputError(
        "", "divergence",
        "needs a cost whose Gibbs kernel is positive definite (sqeuclidean, euclidean)");
  // epsilon, tol and max_iter first, then epsilon_start, then epsilon_decay (only read when
  // scaling: "auto", NaN here, counts as scaling).
  SinkhornOptions so = o.sinkhorn;
  so.epsilon_start = 0.0;
  so.kernel_mode = false;  // check_overrelaxation above
  check_sinkhorn_options(so);
  so.epsilon_start = parse_epsilon_start(o.epsilon_start);
  check_sinkhorn_options(so);
  if (cost_matrix_given && (o.op == "online" || o.op == "grid"))
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
  const bool grid_applies = cost == CostKind::sqeuclidean && mu.d() >= 1 && mu.d() <= 2;
  const std::string op_name =
      options.method == "exact" ? "exact"
                                : resolve_operator(options.op, static_cast<long long>(mu.n()) * nu.n(), grid_applies);
  const bool want_plan = wants_plan(options, mu.n(), nu.n(), op_name);
  check_ot_memory(mu.n(), nu.n(), options, op_name, want_plan, false);
  if (options.method == "exact") {
    check_exact_size(mu.n(), nu.n());
    const auto clock = std::chrono::steady_clock::now();
    CostMatrix C = cost_matrix(mu.points, nu.points, cost);
    check_cost_range(C.allFinite() ? C.cwiseAbs().maxCoeff() : INFINITY, 0.0, larger_cloud(mu, nu));
    solve_exact(std::move(C), mu.weights, nu.weights, want_plan, clock, s);
    return s;
  }
  const auto op = make_soft_min(mu.points, nu.points, cost, options.op, &s.op_used,
                                grid_relative_tol(options.sinkhorn.tol));
  if (s.op_used == "kernel" && !std::isinf(options.sinkhorn.marginal_penalty)) s.op_used = "dense";
  const SinkhornOptions opt = sinkhorn_options(options, *op, want_plan, s.op_used == "kernel");
  std::function<SinkhornResult()> multiscale;
  if (s.op_used == "grid" && options.multiscale == "auto")
    multiscale = [&] {
      std::optional<SinkhornResult> r = sinkhorn_multiscale(*op, mu.points, nu.points, mu.weights, nu.weights, opt,
                                                            MultiscaleOptions{}, &s.multiscale_levels);
      return r ? std::move(*r) : sinkhorn(*op, mu.weights, nu.weights, opt);
    };
  SinkhornResult r = solve_sinkhorn(*op, mu.weights, nu.weights, opt, larger_cloud(mu, nu), s, false, multiscale);
  if (const auto* grid = dynamic_cast<const GridSoftMin*>(op.get())) {
    s.grid_rows_exact = grid->rows_exact();
    s.grid_rows_total = grid->rows_total();
    s.grid_relative_tol = grid->softmin_relative_error();
  }
  if (options.divergence && s.status != "failed") add_divergence(mu, nu, cost, options.op, opt, r, s);
  take_sinkhorn_result(std::move(r), want_plan, s);
  return s;
}

void check_forbidden_pairs(const CostMatrix& cost, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                           const std::string& cost_key) {
  if (!has_forbidden_pairs(cost)) return;
  const Eigen::Index n = cost.rows(), m = cost.cols();
  Eigen::VectorXi row_allowed = Eigen::VectorXi::Zero(n), column_allowed = Eigen::VectorXi::Zero(m);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j)
      if (cost(i, j) < INFINITY && a[i] > 0.0 && b[j] > 0.0) row_allowed[i] = column_allowed[j] = 1;
  for (Eigen::Index i = 0; i < n; ++i)
    if (a[i] > 0.0 && !row_allowed[i])
      throw InputError("", cost_key, fmt::format("row {} (weight {:g}) has no allowed pair: every entry to a "
                                                 "column with mass is +inf (forbidden), so no plan exists", i, a[i]));
  for (Eigen::Index j = 0; j < m; ++j)
    if (b[j] > 0.0 && !column_allowed[j])
      throw InputError("", cost_key, fmt::format("column {} (weight {:g}) has no allowed pair: every entry to a "
                                                 "row with mass is +inf (forbidden), so no plan exists", j, b[j]));
}

void check_plan_exists(const CostMatrix& cost, const Eigen::VectorXd& a, const Eigen::VectorXd& b) {
  if (!has_forbidden_pairs(cost) || static_cast<double>(cost.rows()) * static_cast<double>(cost.cols()) > kPlanExistsMaxPairs)
    return;
  exact_ot(cost, a, b);  // throws InputError (cost_matrix) when the simplex finds no feasible flow
}

namespace {

// The indices of the bins that reach a bin with mass on the other side through an allowed pair,
// or have mass themselves (every bin with mass does: check_forbidden_pairs).
std::vector<Eigen::Index> reaching_bins(const CostMatrix& cost, const Eigen::VectorXd& w, const Eigen::VectorXd& other,
                                        bool rows) {
  std::vector<Eigen::Index> kept;
  const Eigen::Index count = rows ? cost.rows() : cost.cols(), across = rows ? cost.cols() : cost.rows();
  for (Eigen::Index i = 0; i < count; ++i) {
    bool reaches = w[i] > 0.0;
    for (Eigen::Index j = 0; j < across && !reaches; ++j)
      reaches = (rows ? cost(i, j) : cost(j, i)) < INFINITY && other[j] > 0.0;
    if (reaches) kept.push_back(i);
  }
  return kept;
}

// v (size of `kept`) placed at `kept` in a vector of `size` entries, `fill` elsewhere.
Eigen::VectorXd expanded(const Eigen::VectorXd& v, const std::vector<Eigen::Index>& kept, Eigen::Index size,
                         double fill) {
  if (v.size() == 0) return v;  // no result (a failed solve)
  Eigen::VectorXd out = Eigen::VectorXd::Constant(size, fill);
  for (std::size_t k = 0; k < kept.size(); ++k) out[kept[k]] = v[static_cast<Eigen::Index>(k)];
  return out;
}

// Sinkhorn with forbidden pairs where an empty bin (weight 0) reaches no bin with mass through an
// allowed pair: its potential, the soft-min of the other side's over an empty sum, is +inf (ot.hpp),
// which the loop cannot carry (log 0 + inf in the next soft-min). The problem is solved without
// such bins; they are reported with a plan line of zeros and potential 0 (finite, as the results
// must be; any value prices a bin that neither sends nor can receive mass). nullopt: none.
std::optional<OTSolution> solve_without_unreachable_bins(const CostMatrix& cost, const Eigen::VectorXd& a,
                                                         const Eigen::VectorXd& b, const OTSolveOptions& options) {
  if (options.method == "exact" || !has_forbidden_pairs(cost)) return std::nullopt;
  const std::vector<Eigen::Index> rows = reaching_bins(cost, a, b, true), cols = reaching_bins(cost, b, a, false);
  const auto n = static_cast<std::size_t>(cost.rows()), m = static_cast<std::size_t>(cost.cols());
  if (rows.size() == n && cols.size() == m) return std::nullopt;
  const Eigen::VectorXd a_kept = a(rows), b_kept = b(cols);
  OTSolveOptions kept_options = options;
  SinkhornOptions& so = kept_options.sinkhorn;
  if (so.f_init.size() == a.size()) so.f_init = Eigen::VectorXd(so.f_init(rows));
  if (so.g_init.size() == b.size()) so.g_init = Eigen::VectorXd(so.g_init(cols));
  OTSolution s = solve_ot(CostMatrix(cost(rows, cols)), a_kept, b_kept, kept_options);
  constexpr double kUnreachable = 0.0;
  s.f = expanded(s.f, rows, cost.rows(), kUnreachable);
  s.g = expanded(s.g, cols, cost.cols(), kUnreachable);
  if (s.plan_formed) {
    CostMatrix plan = CostMatrix::Zero(cost.rows(), cost.cols());
    plan(rows, cols) = s.plan;
    s.plan = std::move(plan);
  }
  s.n = cost.rows();
  s.m = cost.cols();
  return s;
}

}  // namespace

OTSolution solve_ot(CostMatrix cost, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                    const OTSolveOptions& options) {
  check_ot_options(options, true, CostKind::sqeuclidean);
  check_forbidden_pairs(cost, a, b, "cost_matrix");
  if (std::optional<OTSolution> s = solve_without_unreachable_bins(cost, a, b, options)) return std::move(*s);
  if (options.method != "exact" && std::isinf(options.sinkhorn.marginal_penalty)) check_plan_exists(cost, a, b);
  OTSolution s = start(options, cost.rows(), cost.cols(), "matrix");
  const std::string op_name =
      options.method == "exact" ? "exact"
                                : resolve_operator(options.op, static_cast<long long>(cost.rows()) * cost.cols());
  const bool want_plan = wants_plan(options, cost.rows(), cost.cols(), op_name, true);
  check_ot_memory(cost.rows(), cost.cols(), options, op_name, want_plan, true);
  if (options.method == "exact") {
    check_exact_size(cost.rows(), cost.cols());
    check_cost_range(allowed_cost_magnitude(cost), 0.0, "cost_matrix");
    const auto clock = std::chrono::steady_clock::now();
    solve_exact(std::move(cost), a, b, want_plan, clock, s);
    return s;
  }
  s.op_used = resolve_operator(options.op, static_cast<long long>(cost.rows()) * cost.cols());
  if (s.op_used == "kernel" && !std::isinf(options.sinkhorn.marginal_penalty)) s.op_used = "dense";
  // Kernel mode's stabilized kernels hold exp(-C / eps) with absorptions that assume finite costs:
  // forbidden pairs (+inf) run the log-domain loop, where they drop out of every soft-min.
  if (s.op_used == "kernel" && has_forbidden_pairs(cost)) s.op_used = "dense";
  const DenseSoftMin op(std::move(cost), true);
  const SinkhornOptions opt = sinkhorn_options(options, op, want_plan, s.op_used == "kernel");
  take_sinkhorn_result(solve_sinkhorn(op, a, b, opt, "cost_matrix", s), want_plan, s);
  return s;
}

OTSolution solve_ot_symmetric(CostMatrix cost, const Eigen::VectorXd& a, const OTSolveOptions& options) {
  check_ot_options(options, true, CostKind::sqeuclidean);
  if (options.method != "sinkhorn")
    throw InputError("", "method", "a symmetric self-transport problem is solved by the sinkhorn method");
  if (cost.rows() != cost.cols())
    throw InputError("", "cost_matrix", fmt::format("self-transport needs a square cost; it is {} x {}", cost.rows(),
                                                    cost.cols()));
  OTSolution s = start(options, cost.rows(), cost.cols(), "matrix");
  const bool want_plan = wants_plan(options, cost.rows(), cost.cols());
  s.op_used = "dense";  // the log-domain loop: kernel mode is not symmetric
  const DenseSoftMin op(std::move(cost));
  const SinkhornOptions opt = sinkhorn_options(options, op, want_plan, false);
  take_sinkhorn_result(solve_sinkhorn(op, a, a, opt, "cost_matrix", s, true), want_plan, s);
  return s;
}

namespace {

// Why a Sinkhorn result did not converge, in words (empty when it did).
std::string unconverged_because(const SinkhornResult& r, double epsilon, double tol, int max_iter) {
  if (r.converged) return {};
  std::string why;
  if (r.below_floor)
    why = fmt::format("tol {:g} is not above the rounding floor {:g} of this problem (the smallest tol double "
                      "arithmetic can honour at epsilon {:g}), marginal error {:g}",
                      tol, r.rounding_floor, r.epsilon_reached, r.marginal_error);
  else
    why = fmt::format("stopped at max_iter = {} with marginal error {:g} > tol {:g}", max_iter, r.marginal_error, tol);
  if (r.epsilon_reached != epsilon)
    why += fmt::format(", returning the plan of the last epsilon-scaling stage reached, epsilon = {:g}",
                       r.epsilon_reached);
  return why;
}

}  // namespace

std::string ot_convergence_warning(const OTSolution& r) {
  if (r.method != "sinkhorn" || r.status == "failed") return {};
  std::string line;
  auto add = [&](const char* what, const std::string& why) {
    if (!why.empty()) line += fmt::format("{}{} {}", line.empty() ? "" : "; ", what, why);
  };
  if (!r.converged) {
    SinkhornResult own;
    own.marginal_error = r.marginal_error;
    own.rounding_floor = r.rounding_floor;
    own.below_floor = r.status == "below_floor";
    own.epsilon_reached = r.epsilon_reached;
    add("Sinkhorn", unconverged_because(own, r.epsilon, r.tol, r.max_iter));
  }
  if (r.divergence) {
    add("the divergence's OT(a, a) term", unconverged_because(r.xx, r.epsilon, r.tol, r.max_iter));
    add("the divergence's OT(b, b) term", unconverged_because(r.yy, r.epsilon, r.tol, r.max_iter));
  }
  if (!line.empty())
    line += " (the result is reported with status and marginal error; raise max_iter or epsilon, or tol above the "
            "rounding floor)";
  return line;
}

WassersteinSolution solve_wasserstein(const Measure<double>& mu, const Measure<double>& nu,
                                      double p, const WassersteinOptions& options,
                                      bool conditional) {
  if (!(p >= 1.0) || !std::isfinite(p)) throw InputError("", "p", "must be a finite number >= 1");
  // epsilon 0 means automatic (resolved from the data by wasserstein()); the rest as Sinkhorn's.
  SinkhornOptions checked = options.sinkhorn;
  if (checked.epsilon == 0.0) checked.epsilon = 1.0;
  checked.epsilon_start = 0.0;  // not read (the solve scales as automatic_epsilon_start says)
  checked.kernel_mode = false;
  check_sinkhorn_options(checked);
  if (mu.d() != nu.d())
    throw InputError("", "y",
                     "points of dimension " + std::to_string(nu.d()) +
                         " cannot be compared with points of dimension " + std::to_string(mu.d()));
  if (options.method == WassersteinMethod::sorted && mu.d() != 1)
    throw InputError("", "method", "sorted needs points of dimension 1");
  // Exact W_p: its matrices against the memory limit first (as solve_ot does), then the simplex's size.
  if (options.method == WassersteinMethod::exact) {
    if (!conditional) check_exact_wasserstein_fits(mu.n(), nu.n());
    check_exact_size(mu.n(), nu.n());
  }
  if (conditional && options.method == WassersteinMethod::sinkhorn)
    throw InputError("", "method", "conditional W_p is computed exactly, position by position");
  WassersteinSolution s;
  s.conditional = conditional;
  s.tol = options.sinkhorn.tol;
  s.max_iter = options.sinkhorn.max_iter;
  s.n = mu.n();
  s.m = nu.n();
  s.d = mu.d();
  if (conditional) {
    s.result.p = p;
    s.result.value = conditional_wasserstein(mu, nu, p);
  } else {
    try {
      s.result = wasserstein(mu, nu, p, options);
    } catch (const NumericalFailure& e) {
      s.result.p = p;
      s.result.method = options.method;
      s.result.value = NAN;
      s.reason = e.what();
    }
  }
  if (s.reason.empty() && !std::isfinite(s.result.value))
    s.reason = fmt::format("W_p is not finite ({:g})", s.result.value);
  return s;
}

std::string wasserstein_convergence_warning(const WassersteinSolution& solution) {
  const WassersteinResult& r = solution.result;
  if (!solution.reason.empty() || solution.conditional || r.method != WassersteinMethod::sinkhorn ||
      r.sinkhorn.converged)
    return {};
  return "Sinkhorn " + unconverged_because(r.sinkhorn, r.epsilon, solution.tol, solution.max_iter) +
         " (the value is reported with its status; raise max_iter or epsilon, or tol above the rounding floor)";
}

}  // namespace tokenflow
