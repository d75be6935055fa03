// tokenflow ot: entropic (Sinkhorn) or exact optimal transport between two point clouds or for a
// given cost matrix, DESIGN.md section 2.
#include "tokenflow/ot.hpp"

#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "point_cloud_args.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/io.hpp"

namespace tokenflow::cli {

namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Sizes (entries n m) up to which matrices are held in memory.
constexpr long long kDenseMaxPairs = 1LL << 24;  // dense operator: C and C^T, 256 MiB
constexpr long long kExactMaxPairs = 1LL << 24;  // network simplex: one arc per pair
constexpr long long kPlanMaxPairs = 1LL << 26;   // plan.npy: 512 MiB

constexpr const char* kOtFooter =
    R"(Outputs: summary.json ("command", "status", "wall_seconds", "method", "converged", "cost" = <C, pi>,
  "objective" = <C, pi> + epsilon KL(pi | a b^T) (exact: the cost), "iterations" (exact: null),
  "marginal_error" = |pi 1 - a|_1 + |pi^T 1 - b|_1, ...), f.npy and g.npy (dual potentials),
  plan.npy (n x m, when n m <= 2^26).
status: "converged" or "max_iter" (sinkhorn), "optimal" (exact).
Operators: dense (C held, n m <= 2^24) or online (C recomputed from the points, memory O(n + m)).)";

struct OtArgs {
  std::string x, y, a, b, cost = "sqeuclidean", cost_matrix, method = "sinkhorn",
                          epsilon_start = "auto", op = "auto", out;
  double epsilon = 0.1, tol = 1e-9, epsilon_decay = 2.0;
  int max_iter = 10000;
  bool divergence = false;
};

struct Problem {
  Measure<double> mu, nu;           // points are empty (0 x 0) when the cost matrix is given
  std::unique_ptr<RowMatrix> cost;  // the user's cost matrix (n x m), when given
  CostKind cost_kind = CostKind::sqeuclidean;
  Eigen::Index n = 0, m = 0;
};

RowMatrix read_cost_matrix(const std::string& path) {
  const NpyArray arr = read_npy(path, "--cost-matrix");
  if (arr.shape.size() != 2) throw InputError(path, "--cost-matrix", "must be a 2-D array (n x m)");
  if (arr.shape[0] == 0 || arr.shape[1] == 0) throw InputError(path, "--cost-matrix", "is empty");
  RowMatrix C(static_cast<Eigen::Index>(arr.shape[0]), static_cast<Eigen::Index>(arr.shape[1]));
  for (std::size_t k = 0; k < arr.size(); ++k) {
    if (!std::isfinite(arr.data[k]))
      throw InputError(
          path, "--cost-matrix",
          fmt::format("non-finite value at row {}, column {}", k / arr.shape[1], k % arr.shape[1]));
    C.data()[k] = arr.data[k];
  }
  return C;
}

Problem read_problem(const OtArgs& args, bool cost_given) {
  Problem p;
  const bool have_points = !args.x.empty() || !args.y.empty();
  if (!args.cost_matrix.empty()) {
    if (cost_given) throw InputError("", "--cost", "give either --cost or --cost-matrix, not both");
    p.cost = std::make_unique<RowMatrix>(read_cost_matrix(args.cost_matrix));
    p.n = p.cost->rows();
    p.m = p.cost->cols();
  } else {
    if (args.x.empty()) throw InputError("", "--x", "is required (or give --cost-matrix)");
    if (args.y.empty()) throw InputError("", "--y", "is required (or give --cost-matrix)");
    try {
      p.cost_kind = cost_kind_from_string(args.cost);
    } catch (const InputError& e) {
      throw InputError("", "--cost", e.detail());
    }
  }
  if (have_points) {
    if (args.x.empty() || args.y.empty())
      throw InputError("", args.x.empty() ? "--x" : "--y", "give both --x and --y");
    p.mu = read_point_cloud(args.x, "--x", args.a, "--a");
    p.nu = read_point_cloud(args.y, "--y", args.b, "--b");
    if (p.mu.d() != p.nu.d())
      throw InputError(
          args.y, "--y",
          fmt::format("points of dimension {} cannot be compared with the {}-dimensional --x",
                      p.nu.d(), p.mu.d()));
    if (p.cost && (p.cost->rows() != p.mu.n() || p.cost->cols() != p.nu.n()))
      throw InputError(args.cost_matrix, "--cost-matrix",
                       fmt::format("is {} x {}, but --x has {} points and --y {}", p.cost->rows(),
                                   p.cost->cols(), p.mu.n(), p.nu.n()));
    p.n = p.mu.n();
    p.m = p.nu.n();
  } else {
    // Only a cost matrix: the weights have its sizes.
    auto weights = [](const std::string& path, const char* flag, Eigen::Index size) {
      Eigen::VectorXd w;
      if (!path.empty()) w = read_vector(path, flag, size);
      try {  // checked and normalized as for point clouds (make_measure), with placeholder points
        return make_measure<double>(Points<double>::Zero(size, 1), std::move(w)).weights;
      } catch (const InputError& e) {
        throw InputError(path, flag, e.detail());
      }
    };
    p.mu.weights = weights(args.a, "--a", p.n);
    p.nu.weights = weights(args.b, "--b", p.m);
  }
  return p;
}

RowMatrix dense_cost(const Problem& p) {
  if (p.cost) return *p.cost;
  RowMatrix C(p.n, p.m);
  const Eigen::Index d = p.mu.d();
#pragma omp parallel for schedule(static)
  for (Eigen::Index i = 0; i < p.n; ++i)
    for (Eigen::Index j = 0; j < p.m; ++j)
      C(i, j) = pair_cost(p.cost_kind, &p.mu.points(i, 0), &p.nu.points(j, 0), d);
  return C;
}

double marginal_error(const RowMatrix& plan, const Eigen::VectorXd& a, const Eigen::VectorXd& b) {
  return (plan.rowwise().sum() - a).cwiseAbs().sum() +
         (plan.colwise().sum().transpose() - b).cwiseAbs().sum();
}

// The operator for points x (rows) against y (cols): dense when it fits (or is forced), online
// otherwise.
std::unique_ptr<SoftMin> make_operator(const std::string& choice, const Points<double>& x,
                                       const Points<double>& y, CostKind kind, std::string& used) {
  const long long pairs = static_cast<long long>(x.rows()) * static_cast<long long>(y.rows());
  const bool dense = choice == "dense" || (choice == "auto" && pairs <= kDenseMaxPairs);
  used = dense ? "dense" : "online";
  if (!dense) return std::make_unique<OnlineSoftMin>(x, y, kind);
  RowMatrix C(x.rows(), y.rows());
#pragma omp parallel for schedule(static)
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index j = 0; j < y.rows(); ++j)
      C(i, j) = pair_cost(kind, &x(i, 0), &y(j, 0), x.cols());
  return std::make_unique<DenseSoftMin>(std::move(C));
}

// --epsilon-start: auto (NaN here, resolved once the operator exists), off, range or a number.
double parse_epsilon_start(const std::string& s) {
  if (s == "auto") return std::nan("");
  if (s == "off") return 0.0;
  if (s == "range") return -1.0;  // the operator's cost range
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size() && std::isfinite(v) && v >= 0.0) return v;
  } catch (const std::exception&) {
  }
  throw InputError("", "--epsilon-start", "'" + s + "' is not auto, off, range or a number >= 0");
}

void run_ot(const OtArgs& args, bool cost_given) {
  Stopwatch clock;
  if (args.method != "sinkhorn" && args.method != "exact")
    throw InputError("", "--method",
                     "unknown method '" + args.method + "'; one of: sinkhorn, exact");
  if (args.op != "auto" && args.op != "dense" && args.op != "online")
    throw InputError("", "--operator",
                     "unknown operator '" + args.op + "'; one of: auto, dense, online");
  Problem p = read_problem(args, cost_given);
  const long long pairs = static_cast<long long>(p.n) * static_cast<long long>(p.m);
  const bool want_plan = pairs <= kPlanMaxPairs;
  const Eigen::VectorXd& a = p.mu.weights;
  const Eigen::VectorXd& b = p.nu.weights;

  nlohmann::json s;
  s["command"] = "ot";
  s["method"] = args.method;
  s["n"] = p.n;
  s["m"] = p.m;
  s["ground_cost"] = p.cost ? "matrix" : to_string(p.cost_kind);
  Eigen::VectorXd f, g;
  RowMatrix plan;

  if (args.method == "exact") {
    if (pairs > kExactMaxPairs)
      throw InputError(
          "", "--method",
          fmt::format(
              "exact OT holds one arc per pair; n m = {} is over {} (use --method sinkhorn)", pairs,
              kExactMaxPairs));
    if (args.divergence)
      throw InputError("", "--divergence", "is a Sinkhorn quantity (use --method sinkhorn)");
    OutputDir out(args.out);
    const Stopwatch solve_clock;
    ExactOTResult r = exact_ot(dense_cost(p), a, b);
    s["solve_seconds"] = solve_clock.seconds();  // cost matrix, graph and network simplex
    s["status"] = "optimal";
    s["converged"] = true;
    s["cost"] = r.cost;
    s["objective"] = r.cost;
    s["iterations"] = nullptr;  // LEMON's network simplex does not report its pivot count
    s["marginal_error"] = marginal_error(r.plan, a, b);
    s["dual_objective"] = r.f.dot(a) + r.g.dot(b);
    write_npy(out.staged("f.npy"), r.f.data(), {static_cast<std::size_t>(p.n)});
    write_npy(out.staged("g.npy"), r.g.data(), {static_cast<std::size_t>(p.m)});
    if (want_plan)
      write_npy(out.staged("plan.npy"), r.plan.data(),
                {static_cast<std::size_t>(p.n), static_cast<std::size_t>(p.m)});
    s["plan_written"] = want_plan;
    s["wall_seconds"] = clock.seconds();
    write_summary(out, s);
    out.commit();
    return;
  }

  SinkhornOptions opt;
  opt.epsilon = args.epsilon;
  opt.tol = args.tol;
  opt.max_iter = args.max_iter;
  opt.want_plan = want_plan;
  opt.epsilon_start = parse_epsilon_start(args.epsilon_start);
  opt.epsilon_decay = args.epsilon_decay;
  if (args.divergence && p.cost)
    throw InputError("", "--divergence", "needs the point clouds --x and --y, not --cost-matrix");
  if (args.divergence && p.cost_kind == CostKind::dot)
    throw InputError(
        "", "--divergence",
        "needs a cost whose Gibbs kernel is positive definite (sqeuclidean, euclidean)");
  // Check the options with an empty problem before anything is written.
  if (!(opt.epsilon > 0.0) || !std::isfinite(opt.epsilon))
    throw InputError("", "--epsilon", "must be positive");
  if (!(opt.tol > 0.0)) throw InputError("", "--tol", "must be positive");
  if (opt.max_iter < 1) throw InputError("", "--max-iter", "must be at least 1");
  if (opt.epsilon_start != 0.0 && !(opt.epsilon_decay > 1.0))
    throw InputError("", "--epsilon-decay", "must be greater than 1");  // NaN != 0 too
  if (p.cost && args.op == "online")
    throw InputError("", "--operator", "a given cost matrix is always dense");

  std::string op_used = "dense";
  std::unique_ptr<SoftMin> op;
  if (p.cost)
    op = std::make_unique<DenseSoftMin>(std::move(*p.cost));  // p.cost is not read again
  else
    op = make_operator(args.op, p.mu.points, p.nu.points, p.cost_kind, op_used);

  if (std::isnan(opt.epsilon_start)) opt.epsilon_start = automatic_epsilon_start(*op, opt.epsilon);

  OutputDir out(args.out);
  ProgressBar bar("ot");
  opt.progress_every = 1;
  opt.progress = [&](int it, double err) {
    // Progress on a log scale, from error 1 to tol.
    const double frac = err <= opt.tol ? 1.0 : err >= 1.0 ? 0.0 : std::log(err) / std::log(opt.tol);
    bar.update(frac, fmt::format("iteration {} error {:.2e}", it, err));
    return true;
  };
  const Stopwatch solve_clock;
  const SinkhornResult r = sinkhorn(*op, a, b, opt);
  s["solve_seconds"] = solve_clock.seconds();  // the Sinkhorn loop and the plan, not the I/O
  bar.finish();
  s["status"] = r.converged ? "converged" : "max_iter";
  s["converged"] = r.converged;
  s["cost"] = r.cost;
  s["objective"] = r.objective;
  s["iterations"] = r.iterations;
  s["marginal_error"] = r.marginal_error;
  s["epsilon"] = opt.epsilon;
  s["tol"] = opt.tol;
  s["max_iter"] = opt.max_iter;
  s["operator"] = op_used;
  s["epsilon_start"] = opt.epsilon_start < 0.0 ? op->cost_range() : opt.epsilon_start;
  if (opt.epsilon_start != 0.0) s["epsilon_decay"] = opt.epsilon_decay;
  if (args.divergence) {
    std::string used_xx, used_yy;
    const auto xx = make_operator(args.op, p.mu.points, p.mu.points, p.cost_kind, used_xx);
    const auto yy = make_operator(args.op, p.nu.points, p.nu.points, p.cost_kind, used_yy);
    SinkhornOptions sym = opt;
    sym.want_plan = false;
    sym.progress = {};
    sym.f_init.resize(0);
    const SinkhornResult rxx = sinkhorn_symmetric(*xx, a, sym);
    const SinkhornResult ryy = sinkhorn_symmetric(*yy, b, sym);
    // S_eps = OT_eps(a, b) - (OT_eps(a, a) + OT_eps(b, b)) / 2 (ot.hpp), with r as OT_eps(a, b).
    s["divergence"] = r.objective - 0.5 * (rxx.objective + ryy.objective);
    s["divergence_terms"] = {{"xy", r.objective},
                             {"xx", rxx.objective},
                             {"yy", ryy.objective},
                             {"xx_iterations", rxx.iterations},
                             {"yy_iterations", ryy.iterations},
                             {"xx_marginal_error", rxx.marginal_error},
                             {"yy_marginal_error", ryy.marginal_error},
                             {"converged", rxx.converged && ryy.converged}};
  }
  write_npy(out.staged("f.npy"), r.f.data(), {static_cast<std::size_t>(p.n)});
  write_npy(out.staged("g.npy"), r.g.data(), {static_cast<std::size_t>(p.m)});
  if (want_plan)
    write_npy(out.staged("plan.npy"), r.plan.data(),
              {static_cast<std::size_t>(p.n), static_cast<std::size_t>(p.m)});
  s["plan_written"] = want_plan;
  s["wall_seconds"] = clock.seconds();
  write_summary(out, s);
  out.commit();
}

}  // namespace

void add_ot_command(CLI::App& app) {
  auto args = std::make_shared<OtArgs>();
  CLI::App* cmd = app.add_subcommand(
      "ot", "Optimal transport between two point clouds: Sinkhorn (log domain) or exact");
  cmd->add_option("--x", args->x, "Source points, n x d (.npy)");
  cmd->add_option("--y", args->y, "Target points, m x d (.npy)");
  cmd->add_option("--a", args->a, "Source weights, n (.npy; default uniform)");
  cmd->add_option("--b", args->b, "Target weights, m (.npy; default uniform)");
  CLI::Option* cost =
      cmd->add_option("--cost", args->cost, "Ground cost: sqeuclidean (default), euclidean, dot");
  cmd->add_option("--cost-matrix", args->cost_matrix,
                  "A cost matrix C, n x m (.npy), instead of --cost");
  cmd->add_option("--method", args->method, "sinkhorn (default) or exact (network simplex)");
  cmd->add_option("--epsilon", args->epsilon, "Entropic regularization (default 0.1)");
  cmd->add_option("--tol", args->tol,
                  "Stop when |pi 1 - a|_1 + |pi^T 1 - b|_1 < tol (default 1e-9)");
  cmd->add_option("--max-iter", args->max_iter,
                  "Iterations in total, over all epsilon stages (default 10000)");
  cmd->add_option(
      "--epsilon-start", args->epsilon_start,
      "Epsilon-scaling: auto (default: from the cost range when epsilon < 1e-3 of it), off, range, "
      "or the first epsilon");
  cmd->add_option("--epsilon-decay", args->epsilon_decay,
                  "Epsilon-scaling ratio between stages (default 2)");
  cmd->add_option("--operator", args->op, "Soft-min operator: auto (default), dense or online");
  cmd->add_flag(
      "--divergence", args->divergence,
      "Also the debiased Sinkhorn divergence OT(a,b) - (OT(a,a) + OT(b,b))/2 in summary.json");
  cmd->add_option("--out", args->out, "Output directory")->required();
  cmd->footer(kOtFooter);
  cmd->callback([args, cost] { run_ot(*args, cost->count() > 0); });
}

}  // namespace tokenflow::cli
