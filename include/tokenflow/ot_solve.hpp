// tokenflow/ot_solve.hpp: optimal transport between two weighted point clouds (or for a given cost
// matrix) solved the way `tokenflow ot` and Python's tokenflow.sinkhorn / exact_ot solve it, so
// that both give the same numbers to the last digit: the options are checked in one place, the
// soft-min operator is chosen by size, epsilon-scaling's start is resolved; summary.json is
// built from the results in summary.hpp (docs/design.md section 2, `tokenflow ot`).
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
#include "tokenflow/ot_multiscale.hpp"
#include "tokenflow/wasserstein.hpp"

namespace tokenflow {

using CostMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A measure to transport, checked as make_measure checks one (measure.hpp), except that weights
// may be zero (empty bins, as in histograms): finite, non-negative, with a positive and finite
// sum; normalized to sum 1. An empty bin carries no mass: its row (column) of every plan is 0.
// Its Sinkhorn potential is the soft-min of the other side's potential, the value a vanishing
// mass there would get (the first variation of OT_eps in that weight); its exact-OT potential is
// a feasible dual value (f_i + g_j <= C_ij holds for it too) (ot.hpp). Throws InputError with key "points" /
// "weights" / "positions". normalize false keeps the weights' mass (unbalanced transport, where the
// masses are data; uniform weights are still 1 / n).
Measure<double> make_transport_measure(Points<double> points, Eigen::VectorXd weights = {},
                                       Eigen::VectorXd positions = {}, bool normalize = true);

// C_ij = c(x_i, y_j), n x m (rows in parallel; each entry is pair_cost, so the result does not
// depend on the thread count).
CostMatrix cost_matrix(const CostMatrix& x, const CostMatrix& y, CostKind cost);

// Sizes (n m pairs) up to which matrices are held in memory by default.
constexpr long long kDenseSoftMinMaxPairs = 1LL << 24;  // dense operator: C and C^T, 256 MiB
constexpr long long kExactMaxPairs = 1LL << 26;         // exact OT: the cost matrix and the plan, 512 MiB each
constexpr long long kPlanMaxPairs = 1LL << 26;          // the plan: 512 MiB
// "auto" runs kernel mode (SinkhornOptions::kernel_mode) on the dense operator from this many
// pairs up to kDenseSoftMinMaxPairs; below it a solve takes milliseconds either way, and the
// plain log-domain loop has no P~ to build.
constexpr long long kKernelMinPairs = 1LL << 16;

// InputError (key "operator") unless choice is auto, kernel, dense, online or grid.
void check_operator(const std::string& choice);
// The operator "auto" means for n m pairs: kernel (kKernelMinPairs <= n m <=
// kDenseSoftMinMaxPairs), dense (fewer pairs) or, with more, grid where it applies (grid_applies:
// make_soft_min passes the sqeuclidean cost in 1 or 2 dimensions) and online elsewhere; other
// choices are themselves. Measured (docs/ot.md, "The grid operator"): 2.3x faster than online at
// n = m = 2 10^4 in 2-D; in 3-D the grid (p^3 Taylor terms per point) is not auto's choice.
std::string resolve_operator(const std::string& choice, long long pairs, bool grid_applies = false);

// The grid operator's relative tolerance per soft-min for a solve to tol: tol / 16 (the marginal
// errors it reports carry twice it, ot.hpp GridSoftMin), at most kGridMaxRelativeTol.
constexpr double kGridMaxRelativeTol = 1e-7;
double grid_relative_tol(double tol);

// The soft-min operator of x (n x p) against y (m x p): "dense" (C held), "kernel" (C held, and
// the Sinkhorn loop runs in kernel mode: the caller sets SinkhornOptions::kernel_mode), "online"
// (C recomputed, memory O(n + m)), "grid" (sqeuclidean, p <= 3: Gauss transforms, GridSoftMin with
// relative tolerance grid_tol) or "auto" (resolve_operator). *used is set to the resolved name.
// InputError (key "operator") for another choice, or grid with another cost or p > 3.
std::unique_ptr<SoftMin> make_soft_min(const CostMatrix& x, const CostMatrix& y, CostKind cost,
                                       const std::string& choice = "auto",
                                       std::string* used = nullptr, double grid_tol = 1e-10);

// ---- what double arithmetic can carry (checked before a solve) ----------------------------------
// The log-domain loop computes exponents such as (f_i + g_j - C_ij) / epsilon from terms of size
// up to max|C| / epsilon (the potentials are of the size of the costs) and exponentiates them:
// each plan entry exp(z) carries the rounding of z, about 3 * 2^-53 * max|C| / epsilon in absolute
// terms, as a relative error (the Gibbs kernel exp(-C / epsilon) itself is never formed unshifted,
// so its underflow does not matter). Above max|C| / epsilon = 2^50 that error is above 3/8: not one
// entry of the plan is known to one digit (nor the marginal error that decides convergence).
constexpr double kMaxCostOverEpsilon = 0x1p50;
// The largest max|C| the solvers accept: the potentials are sums of up to n + m costs and the
// objectives sum n m products, which must stay far from overflow (2^-64 of the largest double).
constexpr double kMaxCostMagnitude = 0x1p-64 * 1.7976931348623157e308;
// The one "epsilon too small" guard: throws InputError (key) unless largest / epsilon <=
// kMaxCostOverEpsilon, `largest` bounding the exponents' numerators (costs, logits), described in
// the message by `what` (e.g. "costs up to |C| = 8.5"); the message names the smallest epsilon
// allowed. check_cost_range, Sinkhorn attention (check_sinkhorn_attention_range) and the model's
// Sinkhorn layer use it.
void check_epsilon_resolves(double largest, double epsilon, const std::string& key, const std::string& what);
// Throws InputError unless max_abs_cost (max_ij |C_ij|, from SoftMin::cost_magnitude) is finite
// and at most kMaxCostMagnitude (key cost_key: "x" or "y" for point clouds, "cost_matrix" for a
// given matrix) and, when epsilon > 0 (Sinkhorn), 1 / epsilon is finite and max_abs_cost /
// epsilon <= kMaxCostOverEpsilon (key "epsilon"). Messages print the numbers and the smallest
// epsilon the costs allow.
void check_cost_range(double max_abs_cost, double epsilon, const std::string& cost_key);

// A cost matrix's forbidden pairs (+inf entries, ot.hpp) against the weights: throws InputError
// (key cost_key) naming the first row i with a_i > 0 (column j with b_j > 0) whose every pair to
// a column (row) with mass is forbidden: no plan exists then. Other infeasible patterns (Hall's
// condition on larger sets of bins) are check_plan_exists's.
void check_forbidden_pairs(const CostMatrix& cost, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                           const std::string& cost_key);

// Balanced transport with forbidden pairs: whether any plan of marginals a, b avoids them (Hall's
// condition on every set of bins), decided by the network simplex on the same matrix (exact_ot),
// which throws InputError (key cost_matrix) when no flow is feasible. Sinkhorn alone would run to
// max_iter there without converging. Up to kPlanExistsMaxPairs pairs (the simplex then costs about
// a few hundred Sinkhorn iterations); beyond, such a problem ends unconverged and says so.
inline constexpr double kPlanExistsMaxPairs = 1 << 20;
void check_plan_exists(const CostMatrix& cost, const Eigen::VectorXd& a, const Eigen::VectorXd& b);

// Why a Sinkhorn result is not a result (empty when it is one): non-finite potentials, cost,
// objective or marginal error; a formed plan with a non-finite or negative entry; or a plan whose
// total mass is off 1 by more than its marginal error allows plus the rounding of forming it.
// max_abs_cost and epsilon as for check_cost_range; n m entries.
std::string sinkhorn_result_defect(const SinkhornResult& r, const Eigen::VectorXd& a,
                                   const Eigen::VectorXd& b, double max_abs_cost, double epsilon);

// Why `plan` is not a coupling of (a, b): empty when its entries are finite and non-negative, its
// row sums within row_tol of a and its column sums within col_tol of b (l1 norms).
std::string coupling_defect(const CostMatrix& plan, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                            double row_tol, double col_tol);

// The column tolerance for a Sinkhorn Transformer's plan (tokenflow couple, Python's couple): its
// columns sum to b up to the rounding of exp and of the column sums (about 1e-16 m for the sizes
// of texts); 1e-6 flags only plans whose exponents lost more than half their digits. Its rows
// are those of a finite number of Sinkhorn iterations (reported as marginal_error, not checked).
constexpr double kCouplingColumnTol = 1e-6;

// |pi 1 - a|_1 + |pi^T 1 - b|_1.
double plan_marginal_error(const CostMatrix& plan, const Eigen::VectorXd& a,
                           const Eigen::VectorXd& b);

struct OTSolveOptions {
  std::string method = "sinkhorn";  // sinkhorn | exact
  // sinkhorn: the loop's options, in the one Sinkhorn options type (ot.hpp; its defaults are
  // tokenflow ot's, tokenflow.sinkhorn's and tokenflow.torch's): epsilon, tol, max_iter,
  // epsilon_decay, epsilon_stage_tol, overrelaxation (kernel mode: 0 Anderson acceleration, or a
  // fixed w in [1, 2)), anderson_depth, plain_beside, progress and progress_every. Its
  // epsilon_start, want_plan and kernel_mode are not read: solve_ot sets them from epsilon_start,
  // want_plan and op below. Its marginal_penalty (finite: unbalanced transport, ot.hpp) is read: the
  // operator "kernel" then runs the dense log-domain loop ("auto" says "dense"; asking for "kernel"
  // is refused), the weights keep their masses, and method exact is refused.
  SinkhornOptions sinkhorn{};
  std::string epsilon_start =
      "auto";                     // auto (automatic_epsilon_start) | off | range | a number >= 0
  std::string op = "auto";  // auto | kernel | dense | online | grid (online, grid: points only)
  bool divergence = false;        // also the debiased Sinkhorn divergence (points only)
  // The grid operator's multiscale schedule (ot_multiscale.hpp): auto (where it applies: balanced,
  // epsilon-scaling, at least 2^15 points a side, clouds that shrink into cells) | off.
  std::string multiscale = "auto";
  std::optional<bool> want_plan;  // default: n m <= kPlanMaxPairs
};

struct OTSolution {
  // status: converged | max_iter | below_floor (sinkhorn: tol is not above the rounding floor, so
  // it cannot be honoured; converged is false), optimal (exact), failed (no result: `reason` says
  // why, e.g. non-finite potentials; f, g and the plan are then not to be used)
  std::string method, status;
  std::string reason;
  std::string ground_cost;     // sqeuclidean | euclidean | dot | matrix
  Eigen::Index n = 0, m = 0;
  Eigen::VectorXd f, g;
  CostMatrix plan;  // n x m when formed (plan_formed)
  bool plan_formed = false;
  double cost = 0.0, objective = 0.0, marginal_error = 0.0;
  // sinkhorn: rho (+inf: balanced), the plan's mass sum_ij pi_ij and the weights' masses (unbalanced
  // transport, ot.hpp; summary.json has them when rho is finite).
  double marginal_penalty = kSinkhornBalanced, plan_mass = 0.0, mass_a = 0.0, mass_b = 0.0;
  std::optional<int> iterations;  // sinkhorn
  double rounding_floor = 0.0;    // sinkhorn: SinkhornResult's
  double epsilon_reached = 0.0;   // sinkhorn: the epsilon of the returned plan (SinkhornResult)
  bool converged = false;
  double dual_objective = 0.0;  // exact: f . a + g . b
  long long pivots = 0;         // exact: the network simplex's pivots (ExactOTResult)
  // sinkhorn: the options as used
  double epsilon = 0.0, tol = 0.0, epsilon_start = 0.0, epsilon_decay = 0.0;
  int max_iter = 0;
  std::string op_used;  // kernel | dense | online | grid
  // grid: the rows its soft-mins summed exactly (the certificate rejected them) and all rows
  // summed, over the whole solve (GridSoftMin::rows_exact, rows_total).
  long long grid_rows_exact = 0, grid_rows_total = 0;
  double grid_relative_tol = 0.0;  // grid: each soft-min's sum within this relative error
  // grid with the multiscale schedule: its coarse solves, in order (empty: not used); `iterations`
  // counts those on the given points only.
  std::vector<MultiscaleLevel> multiscale_levels;
  int kernel_iterations = 0, kernel_absorptions = 0;  // kernel mode (SinkhornResult)
  double kernel_omega = 0.0;            // kernel mode: the fixed w its loop ran (1 under Anderson)
  double overrelaxation_requested = 0.0;  // the options' overrelaxation, as asked (0: Anderson)
  int kernel_anderson_depth = 0;
  // divergence: S_eps = objective - (xx.objective + yy.objective) / 2, built from the entropic
  // objectives OT_eps (Feydy et al.'s definition; >= 0). divergence_pot: the same combination of
  // the transport costs <C, pi> of the three plans, cost - (xx.cost + yy.cost) / 2, which is what
  // POT's ot.bregman.empirical_sinkhorn_divergence returns (it combines ot.sinkhorn2's <C, pi>);
  // it is not a divergence (it can be negative) and differs from S_eps by eps times the
  // combination of the three KL terms.
  std::optional<double> divergence, divergence_pot;
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
// For a given cost matrix C (n x m; +inf entries are forbidden pairs, check_forbidden_pairs) and
// normalized weights a (n), b (m).
OTSolution solve_ot(CostMatrix cost, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                    const OTSolveOptions& options);

// The one-line warning for a Sinkhorn solve that did not converge (stopped at max_iter, or tol not
// above the rounding floor, or returned at a larger epsilon; with the divergence's self-transport
// terms), or "" when every solve converged: printed by the CLI after
// "tokenflow: warning: " and issued as tokenflow.ConvergenceWarning in Python. Numbers in %g style.
std::string ot_convergence_warning(const OTSolution& solution);

// ---- W_p, as `tokenflow wasserstein` and Python's tokenflow.wasserstein compute it
// -----------------
struct WassersteinSolution {
  WassersteinResult result;  // method "conditional" is reported for conditional W_p
  bool conditional = false;
  Eigen::Index n = 0, m = 0, d = 0;
  std::string reason;  // non-empty: no result (status "failed" in the summary), and why
  double tol = 0.0;    // Sinkhorn's tolerance and iteration limit, as used
  int max_iter = 0;
};

// Checks p (key "p"), the options (keys "method", "epsilon": >= 0, 0 meaning automatic, "tol",
// "max_iter") and the method against the data ("method": sorted needs d = 1, exact at most
// kExactMaxPairs pairs, conditional W_p is exact), then computes: conditional W_p (exact,
// position by position; errors about positions have the key "positions") when `conditional`,
// else wasserstein(mu, nu, p, options).
WassersteinSolution solve_wasserstein(const Measure<double>& mu, const Measure<double>& nu,
                                      double p, const WassersteinOptions& options,
                                      bool conditional);

// As ot_convergence_warning, for the Sinkhorn method of W_p.
std::string wasserstein_convergence_warning(const WassersteinSolution& solution);

}  // namespace tokenflow
