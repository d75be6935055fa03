// tokenflow/ot_solve.hpp: optimal transport between two weighted point clouds (or for a given cost
// matrix) solved the way `tokenflow ot` and Python's tokenflow.sinkhorn / exact_ot solve it, so
// that both give the same numbers to the last digit: the options are checked in one place, the
// soft-min operator is chosen by size, epsilon-scaling's start is resolved, and summary.json is
// built here (DESIGN.md section 2, `tokenflow ot`).
//
// Errors are InputError with keys named as Python's arguments ("method", "epsilon", "tol",
// "max_iter", "epsilon_start", "epsilon_decay", "operator", "divergence", "cost"); the CLI names
// them as its flags ("--" + the key with '_' -> '-').
#pragma once

#include <Eigen/Core>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "tokenflow/measure.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/wasserstein.hpp"

namespace tokenflow {

using CostMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// C_ij = c(x_i, y_j), n x m (rows in parallel; each entry is pair_cost, so the result does not
// depend on the thread count).
CostMatrix cost_matrix(const CostMatrix& x, const CostMatrix& y, CostKind cost);

// Sizes (n m pairs) up to which matrices are held in memory by default.
constexpr long long kDenseSoftMinMaxPairs = 1LL << 24;  // dense operator: C and C^T, 256 MiB
constexpr long long kExactMaxPairs = 1LL << 24;         // network simplex: one arc per pair
constexpr long long kPlanMaxPairs = 1LL << 26;          // the plan: 512 MiB
// "auto" runs kernel mode (SinkhornOptions::kernel_mode) on the dense operator from this many
// pairs up to kDenseSoftMinMaxPairs; below it a solve takes milliseconds either way, and the
// plain log-domain loop has no P~ to build.
constexpr long long kKernelMinPairs = 1LL << 16;

// InputError (key "operator") unless choice is auto, kernel, dense or online.
void check_operator(const std::string& choice);
// The operator "auto" means for n m pairs: kernel (kKernelMinPairs <= n m <=
// kDenseSoftMinMaxPairs), dense (fewer pairs) or online (more); other choices are themselves.
std::string resolve_operator(const std::string& choice, long long pairs);

// The soft-min operator of x (n x p) against y (m x p): "dense" (C held), "kernel" (C held, and
// the Sinkhorn loop runs in kernel mode: the caller sets SinkhornOptions::kernel_mode), "online"
// (C recomputed, memory O(n + m)) or "auto" (resolve_operator). *used is set to the resolved
// name. InputError (key "operator") for another choice.
std::unique_ptr<SoftMin> make_soft_min(const CostMatrix& x, const CostMatrix& y, CostKind cost,
                                       const std::string& choice = "auto",
                                       std::string* used = nullptr);

// |pi 1 - a|_1 + |pi^T 1 - b|_1.
double plan_marginal_error(const CostMatrix& plan, const Eigen::VectorXd& a,
                           const Eigen::VectorXd& b);

struct OTSolveOptions {
  std::string method = "sinkhorn";  // sinkhorn | exact
  double epsilon = 0.1;             // sinkhorn: the options of SinkhornOptions
  double tol = 1e-9;
  int max_iter = 10000;
  std::string epsilon_start =
      "auto";  // auto (automatic_epsilon_start) | off | range | a number >= 0
  double epsilon_decay = 2.0;
  std::string op = "auto";        // auto | kernel | dense | online (online: points only)
  double overrelaxation = 0.0;    // kernel mode's w: 0 adaptive, or fixed in [1, 2)
  bool divergence = false;        // also the debiased Sinkhorn divergence (points only)
  std::optional<bool> want_plan;  // default: n m <= kPlanMaxPairs
  std::function<bool(int, double)>
      progress;  // Sinkhorn's (iteration, marginal error); false cancels
  int progress_every = 10;
};

struct OTSolution {
  std::string method, status;  // status: converged | max_iter (sinkhorn), optimal (exact)
  std::string ground_cost;     // sqeuclidean | euclidean | dot | matrix
  Eigen::Index n = 0, m = 0;
  Eigen::VectorXd f, g;
  CostMatrix plan;  // n x m when formed (plan_formed)
  bool plan_formed = false;
  double cost = 0.0, objective = 0.0, marginal_error = 0.0;
  std::optional<int> iterations;  // sinkhorn
  bool converged = false;
  double dual_objective = 0.0;  // exact: f . a + g . b
  // sinkhorn: the options as used
  double epsilon = 0.0, tol = 0.0, epsilon_start = 0.0, epsilon_decay = 0.0;
  int max_iter = 0;
  std::string op_used;  // kernel | dense | online
  int kernel_iterations = 0, kernel_absorptions = 0;  // kernel mode (SinkhornResult)
  double kernel_omega = 0.0;
  int kernel_anderson_depth = 0;
  // divergence: S_eps = objective - (xx.objective + yy.objective) / 2
  std::optional<double> divergence;
  SinkhornResult xx, yy;
  double solve_seconds = 0.0;  // the solver (cost matrix, loop, plan), not reading or writing
};

// Checks the options that do not depend on the data (method, operator, epsilon, tol, max_iter,
// epsilon_start, epsilon_decay); `cost_matrix_given` refuses what needs points.
void check_ot_options(const OTSolveOptions& options, bool cost_matrix_given, CostKind cost);

// Between the measures mu and nu (points and normalized weights; positions are ignored) for the
// ground cost `cost`.
OTSolution solve_ot(const Measure<double>& mu, const Measure<double>& nu, CostKind cost,
                    const OTSolveOptions& options);
// For a given cost matrix C (n x m) and normalized weights a (n), b (m).
OTSolution solve_ot(CostMatrix cost, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                    const OTSolveOptions& options);

// summary.json of `tokenflow ot`: "command", "method", "n", "m", "ground_cost", "status",
// "converged", "cost", "objective", "iterations", "marginal_error", "solve_seconds",
// "plan_written", sinkhorn: "epsilon", "tol", "max_iter", "operator", "epsilon_start",
// "epsilon_decay" (when scaling), "divergence" and "divergence_terms" (when asked); exact:
// "dual_objective"; then "wall_seconds".
std::string ot_summary_json(const OTSolution& solution, double wall_seconds);

// ---- W_p, as `tokenflow wasserstein` and Python's tokenflow.wasserstein compute it
// -----------------
struct WassersteinSolution {
  WassersteinResult result;  // method "conditional" is reported for conditional W_p
  bool conditional = false;
  Eigen::Index n = 0, m = 0, d = 0;
};

// Checks p (key "p"), the options (keys "method", "epsilon": >= 0, 0 meaning automatic, "tol",
// "max_iter") and the method against the data ("method": sorted needs d = 1, exact at most
// kExactMaxPairs pairs, conditional W_p is exact), then computes: conditional W_p (exact,
// position by position; errors about positions have the key "positions") when `conditional`,
// else wasserstein(mu, nu, p, options).
WassersteinSolution solve_wasserstein(const Measure<double>& mu, const Measure<double>& nu,
                                      double p, const WassersteinOptions& options,
                                      bool conditional);

// summary.json of `tokenflow wasserstein`: "command", "p", "n", "m", "d", "method", "value",
// "status" (optimal | converged | max_iter), "converged", Sinkhorn: "epsilon", "iterations",
// "marginal_error", "cost", "entropic_bias_bound"; then "wall_seconds".
std::string wasserstein_summary_json(const WassersteinSolution& solution, double wall_seconds);

}  // namespace tokenflow
