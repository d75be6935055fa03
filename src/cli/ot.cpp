// tokenflow ot: entropic (Sinkhorn) or exact optimal transport between two point clouds or for a
// given cost matrix, docs/design.md section 2.
#include "tokenflow/ot_solve.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "commands.hpp"
#include "common.hpp"
#include "../config/summary_documents.hpp"
#include "point_cloud_args.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow::cli {

namespace {

constexpr const char* kOtFooter =
    R"(Outputs: summary.json ("command", "status", "wall_seconds", "method", "converged", "cost" = <C, pi>,
  "objective" = <C, pi> + epsilon KL(pi | a b^T) (exact: the cost), "iterations" (exact: null),
  "marginal_error" = |pi 1 - a|_1 + |pi^T 1 - b|_1 of the returned plan, sinkhorn: "rounding_floor"
  (the smallest tol double arithmetic can honour), "epsilon_reached" (the epsilon of the returned
  plan), ...), f.npy and g.npy (dual potentials),
  with --marginal-penalty RHO (unbalanced): "marginal_penalty", "plan_mass", "mass_a", "mass_b", the
  objective <C, pi> + epsilon KL(pi | a b^T) + RHO (KL(pi 1 | a) + KL(pi^T 1 | b)) and the marginal
  error against the fixed point's marginals |pi 1 - a e^{-f/RHO}|_1 + |pi^T 1 - b e^{-g/RHO}|_1;
  plan.npy (n x m, when n m <= 2^26); exact: the plan's entries that are not zero (at most
  n + m - 1), plan_indices.npy (k x 2 int64: row, column) and plan_masses.npy (k), "plan_format"
  "sparse" and "plan_entries" k in summary.json, or with --dense-plan plan.npy ("plan_format" "dense").
status: "converged", "max_iter" or "below_floor" (sinkhorn: tol not above the rounding floor; the last
  two print a warning on stderr), "optimal"
  (exact), "failed" (no result, exit 1: "reason" says why; only summary.json is written).
Operators: dense (C held, n m <= 2^24; the log-domain loop), kernel (C held, and the stabilized
  float32 kernel-mode loop with Anderson acceleration before the log-domain loop checks the result; auto's
  choice from 2^16 to 2^24 pairs), online (C recomputed from the points, memory O(n + m)) or grid
  (sqeuclidean in 1 to 3 dimensions: each soft-min a Gauss transform on a Taylor grid, time and memory
  O(n + m); its certified error is added to the marginal error; auto's choice above 2^24 pairs in 1 or 2
  dimensions, online elsewhere).
The same solver as Python's tokenflow.sinkhorn / tokenflow.exact_ot (include/tokenflow/ot_solve.hpp).)";

struct OtArgs {
  std::string x, y, a, b, cost = "sqeuclidean", cost_matrix, out;
  // The solver's options, the struct Python's tokenflow.sinkhorn fills too: the flags write its
  // fields, so the defaults are the library's.
  OTSolveOptions options;
  bool no_plan = false;
  bool dense_plan = false;
};

// The library names its options as Python's arguments (max_iter); the CLI as its flags (--max-iter).
InputError as_flag(const InputError& e) {
  std::string key = e.key();
  std::replace(key.begin(), key.end(), '_', '-');
  return InputError(e.source(), "--" + key, e.detail());
}

// An exact plan has at most n + m - 1 entries that are not zero (a vertex of the transport
// polytope): plan_indices.npy (k x 2, int64: row, column) and plan_masses.npy (k), in row order.
// Returns k.
std::size_t write_sparse_plan(OutputDir& out, const CostMatrix& plan) {
  std::vector<std::int64_t> indices;
  std::vector<double> masses;
  for (Eigen::Index i = 0; i < plan.rows(); ++i)
    for (Eigen::Index j = 0; j < plan.cols(); ++j)
      if (plan(i, j) != 0.0) {
        indices.insert(indices.end(), {static_cast<std::int64_t>(i), static_cast<std::int64_t>(j)});
        masses.push_back(plan(i, j));
      }
  write_npy(out.staged("plan_indices.npy"), indices.data(), {masses.size(), 2});
  write_npy(out.staged("plan_masses.npy"), masses.data(), {masses.size()});
  return masses.size();
}

CostMatrix read_cost_matrix(const std::string& path) {
  const NpyArray arr = read_npy(path, "--cost-matrix");
  if (arr.shape.size() != 2) throw InputError(path, "--cost-matrix", "must be a 2-D array (n x m)");
  if (arr.shape[0] == 0 || arr.shape[1] == 0) throw InputError(path, "--cost-matrix", "is empty");
  CostMatrix C(static_cast<Eigen::Index>(arr.shape[0]), static_cast<Eigen::Index>(arr.shape[1]));
  for (std::size_t k = 0; k < arr.size(); ++k) {
    if (std::isnan(arr.data[k]) || arr.data[k] == -INFINITY)
      throw InputError(path, "--cost-matrix",
                       fmt::format("invalid value {} at row {}, column {} (accepted: real costs, +inf for a "
                                   "forbidden pair)",
                                   arr.data[k], k / arr.shape[1], k % arr.shape[1]));
    C.data()[k] = arr.data[k];
  }
  return C;
}

// Weights of a problem given by a cost matrix only: checked and normalized (unless `normalize` is
// false: unbalanced) as for point clouds (make_transport_measure), with placeholder points.
Eigen::VectorXd matrix_weights(const std::string& path, const char* flag, Eigen::Index size, bool normalize) {
  Eigen::VectorXd w;
  if (!path.empty()) w = read_vector(path, flag, size);
  try {
    return make_transport_measure(Points<double>::Zero(size, 1), std::move(w), Eigen::VectorXd(), normalize)
        .weights;
  } catch (const InputError& e) {
    throw InputError(path, flag, e.detail());
  }
}

void run_ot(const OtArgs& args, bool cost_given) {
  Stopwatch clock;
  OTSolveOptions options = args.options;
  if (args.no_plan) options.want_plan = false;
  CostKind cost_kind = CostKind::sqeuclidean;
  const bool matrix = !args.cost_matrix.empty();
  if (matrix && cost_given) throw InputError("", "--cost", "give either --cost or --cost-matrix, not both");
  // Points and a cost matrix are two definitions of the costs: refused rather than one ignored.
  if (matrix && (!args.x.empty() || !args.y.empty()))
    throw InputError(args.cost_matrix, "--cost-matrix",
                     "give either points (--x and --y) or a cost matrix, not both (with a cost matrix, "
                     "--a and --b give the weights)");
  if (!matrix) {
    if (args.x.empty()) throw InputError("", "--x", "is required (or give --cost-matrix)");
    if (args.y.empty()) throw InputError("", "--y", "is required (or give --cost-matrix)");
    try {
      cost_kind = cost_kind_from_string(args.cost);
    } catch (const InputError& e) {
      throw InputError("", "--cost", e.detail());
    }
  }
  try {
    check_ot_options(options, matrix, cost_kind);
  } catch (const InputError& e) {
    throw as_flag(e);
  }

  // The data: two point clouds, or a cost matrix with its weights (unbalanced: their masses kept).
  const bool normalize = std::isinf(options.sinkhorn.marginal_penalty);
  Measure<double> mu, nu;
  if (!matrix) {
    mu = read_point_cloud(args.x, "--x", args.a, "--a", "", "", normalize);
    nu = read_point_cloud(args.y, "--y", args.b, "--b", "", "", normalize);
    if (mu.d() != nu.d())
      throw InputError(args.y, "--y",
                       fmt::format("points of dimension {} cannot be compared with the {}-dimensional --x", nu.d(),
                                   mu.d()));
  }
  CostMatrix C;
  if (matrix) {
    C = read_cost_matrix(args.cost_matrix);
    mu.weights = matrix_weights(args.a, "--a", C.rows(), normalize);
    nu.weights = matrix_weights(args.b, "--b", C.cols(), normalize);
  }

  OutputPlan plan{"ot", {"summary.json", "f.npy", "g.npy"}, {}};
  if (!args.no_plan) {
    if (args.options.method == "exact" && !args.dense_plan)
      plan.outputs.insert(plan.outputs.end(), {"plan_indices.npy", "plan_masses.npy"});
    else
      plan.outputs.push_back("plan.npy");
  }
  OutputDir out(args.out, plan);
  ProgressBar bar("ot");
  options.sinkhorn.progress_every = 1;
  options.sinkhorn.progress = sinkhorn_progress(bar, options.sinkhorn.tol);
  OTSolution r;
  try {
    r = matrix ? solve_ot(std::move(C), mu.weights, nu.weights, options) : solve_ot(mu, nu, cost_kind, options);
  } catch (const InputError& e) {
    // Costs out of range name the file they come from.
    const std::string& k = e.key();
    const std::string file = k == "x" ? args.x : k == "y" ? args.y : k == "cost_matrix" ? args.cost_matrix : "";
    throw as_flag(file.empty() ? e : InputError(file, k, e.detail()));
  }
  bar.finish();
  if (r.status == "failed") {
    // No result: summary.json says why; no potentials or plan are written.
    write_text(out.staged("summary.json"), ot_summary_json(r, clock.seconds()) + "\n");
    out.commit();
    throw std::runtime_error("ot failed: " + r.reason + " (status \"failed\" in " + args.out + "/summary.json)");
  }
  if (const std::string warning = ot_convergence_warning(r); !warning.empty())
    std::cerr << "tokenflow: warning: " << warning << "\n";
  write_npy(out.staged("f.npy"), r.f.data(), {static_cast<std::size_t>(r.n)});
  write_npy(out.staged("g.npy"), r.g.data(), {static_cast<std::size_t>(r.m)});
  nlohmann::json summary = ot_summary(r, 0.0);
  if (r.plan_formed) {
    const bool sparse = r.method == "exact" && !args.dense_plan;
    summary["plan_format"] = sparse ? "sparse" : "dense";
    if (sparse)
      summary["plan_entries"] = write_sparse_plan(out, r.plan);
    else
      write_npy(out.staged("plan.npy"), r.plan.data(), {static_cast<std::size_t>(r.n), static_cast<std::size_t>(r.m)});
  }
  summary["wall_seconds"] = clock.seconds();
  write_text(out.staged("summary.json"), summary.dump(2) + "\n");
  out.commit();
}

}  // namespace

void add_ot_command(CLI::App& app) {
  auto args = std::make_shared<OtArgs>();
  const OTSolveOptions defaults;
  CLI::App* cmd = app.add_subcommand(
      "ot", "Optimal transport between two point clouds: Sinkhorn (stabilized kernel or log domain) or exact");
  cmd->add_option("--x", args->x, "Source points, n x d (.npy)");
  cmd->add_option("--y", args->y, "Target points, m x d (.npy)");
  cmd->add_option("--a", args->a, "Source weights, n (.npy; default uniform)");
  cmd->add_option("--b", args->b, "Target weights, m (.npy; default uniform)");
  CLI::Option* cost =
      cmd->add_option("--cost", args->cost, "Ground cost: sqeuclidean (default), euclidean, dot");
  cmd->add_option("--cost-matrix", args->cost_matrix,
                  "A cost matrix C, n x m (.npy), instead of --x, --y and --cost (weights: --a, --b)");
  cmd->add_option("--method", args->options.method, "sinkhorn (default) or exact (network simplex)");
  cmd->add_option("--epsilon", args->options.sinkhorn.epsilon,
                  with_default("Entropic regularization", defaults.sinkhorn.epsilon));
  cmd->add_option(
      "--tol", args->options.sinkhorn.tol,
      with_default("Stop when |pi 1 - a|_1 + |pi^T 1 - b|_1 < tol", defaults.sinkhorn.tol));
  cmd->add_option("--marginal-penalty", args->options.sinkhorn.marginal_penalty,
                  "Unbalanced transport: the KL penalty rho on each marginal (POT's reg_m; default: balanced); "
                  "the weights then keep their masses");
  cmd->add_option(
      "--max-iter", args->options.sinkhorn.max_iter,
      with_default("Iterations in total, over all epsilon stages", defaults.sinkhorn.max_iter));
  cmd->add_option(
      "--epsilon-start", args->options.epsilon_start,
      "Epsilon-scaling: auto (default: from the cost range when epsilon < 1e-3 of it), off, range, "
      "or the first epsilon");
  cmd->add_option(
      "--epsilon-decay", args->options.sinkhorn.epsilon_decay,
      with_default("Epsilon-scaling ratio between stages", defaults.sinkhorn.epsilon_decay));
  cmd->add_option("--operator", args->options.op,
                  "Soft-min operator: auto (default), kernel, dense, online or grid");
  cmd->add_option("--overrelaxation", args->options.sinkhorn.overrelaxation,
                  "The acceleration: 0 (default) Anderson acceleration, 1 plain Sinkhorn, or a "
                  "fixed over-relaxation w in (1, 2)");
  cmd->add_option("--multiscale", args->options.multiscale,
                  "grid: auto (default) runs the epsilon-scaling stages on coarse clouds (cells of "
                  "side 0.2 sqrt(epsilon) and up) and the given points at the final epsilon only, "
                  "where it applies (balanced, at least 32768 points a side); off: every stage on the given points");
  cmd->add_flag("--no-plan", args->no_plan, "Do not form or write the plan");
  cmd->add_flag("--dense-plan", args->dense_plan,
                "exact: write the dense plan.npy (n x m) instead of plan_indices.npy and plan_masses.npy");
  cmd->add_flag(
      "--divergence", args->options.divergence,
      "Also the debiased Sinkhorn divergence OT(a,b) - (OT(a,a) + OT(b,b))/2 in summary.json");
  cmd->add_option("--out", args->out, kOutHelp)->required();
  cmd->footer(kOtFooter);
  cmd->callback([args, cost] { run_ot(*args, cost->count() > 0); });
}

}  // namespace tokenflow::cli
