// The epsilon stages of the Sinkhorn solvers (src/ot/stages.cpp), behind one interface: a
// SinkhornStage says what to solve (epsilon, stopping tolerance, iteration budget, warm
// potentials), and each mode has one function that runs it and returns a StageResult
// (potentials, the marginal error reached, the iterations used, a StageStatus):
//   log_domain_stage   the alternating log-domain loop of ot.hpp (Eq. (23) of Feydy et al.)
//   kernel_mode_stage  the stabilized scaling iteration of ot_kernel.hpp, checked in float64 and
//                      finished by the log-domain loop
//   symmetric_stage    the averaged symmetric loop of sinkhorn_symmetric
// The epsilon-scaling driver (run_schedule in sinkhorn.cpp) chains the stages.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "tokenflow/ot.hpp"
#include "tokenflow/ot_kernel.hpp"

namespace tokenflow::stages {

using PlanMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Which potential a stage starts from: from_g computes f from g first (f = softmin_rows(g));
// from_f starts with g from f (the first iteration's column step).
enum class WarmStart { from_g, from_f };

// One epsilon stage. f (n) and g (m) are the warm start (the symmetric loop reads f only).
struct SinkhornStage {
  double epsilon = 0.0;
  double tol = 0.0;      // the stage stops once its marginal error is below tol
  int budget = 0;        // iterations at most (>= 1)
  int done_before = 0;   // iterations of the earlier stages: progress sees done_before + k
  bool final = false;    // the last epsilon of the schedule
  WarmStart start = WarmStart::from_g;
  Eigen::VectorXd f, g;
};

// What the scaling iteration of kernel mode did in a stage (SinkhornResult's kernel_* fields).
struct KernelStats {
  int iterations = 0, absorptions = 0;
  double omega = 0.0;
  int anderson_depth = 0;
};

// The plan pi_ij = a_i b_j exp((f_i + g_j - C_ij) / eps) of potentials (f, g), formed and measured
// in one pass over C (measure_plan): cost <C, pi>, objective sum_ij pi_ij (f_i + g_j) (ot.hpp), mass
// sum_ij pi_ij, the marginal error |pi 1 - a|_1 + |pi^T 1 - b|_1 of exactly these entries (row and
// column sums compensated), its rounding floor (below) and the plan itself (n x m) when asked.
//
// Forming an entry: s = f_i + g_j - C_ij by error-free transformations (TwoSum: s is the sum of
// the three doubles rounded once, plus 2 u^2 (|f_i| + |g_j| + |C_ij|)), x = log a_i + log b_j + s /
// eps, pi_ij = simd::exp_poly(x) (within kExpUlps = 2 ulp, i.e. 4 u relative; results below 2^-1021
// flushed to 0, less than n m 2^-1021 in all). Its relative error against the same formula in exact
// arithmetic on the same doubles is at most
//   form_ij = u (3 |x| + |log a_i| + |log b_j| + 6) + 2 u^2 (|f_i| + |g_j| + |C_ij|) / eps  (u = 2^-53)
// (6 = the exponential's 4 and 2 for x's remaining roundings).
// rounding floor: the potentials are doubles, so the plan they define is resolved no finer than
// half an ulp of f_i and of g_j (ulp(v) <= 2 u |v|): moving them by that changes the exponent by
// up to u (|f_i| + |g_j|) / eps; and the loop that chose them computed every soft-min exponent
// (g_j - C_ij) / eps, (f_i - C_ij) / eps with a rounding of up to u (|f_i| + |g_j| + |C_ij|) / eps,
// so its fixed point carries that much too. With
//   delta_ij = form_ij + u (|f_i| + |g_j|) / eps + u (|f_i| + |g_j| + |C_ij|) / eps,
// each entry counted once in its row and once in its column, plus the compensated sums' 2 u per
// row and column:
//   rounding_floor = 2 sum_ij pi_ij delta_ij + 4 u mass.
// In terms of max|C| / eps: on the support |f_i| + |g_j| >= |f_i + g_j| ~ |C_ij|, and centered
// potentials (centering_shift) are at most about max|C| each (plus eps |log a_i|, eps |log b_j|),
// so the floor lies between about 6 u <C, pi> / eps and 10 u max|C| / eps: up to 2e-2 at max|C| /
// eps = 2e13. Measured: on 5 x 6 standard Gaussian points 1e-3 at eps = 1e-12, 1e-6 at eps = 1e-9
// (docs/ot.md); on POT's 1-D stabilization problem at eps = 1e-5 it is at least 6.6e-9. A tol
// below it cannot be honoured: no doubles resolve the marginals that finely, and the measured
// error of one evaluation of the formula says nothing finer about another. Entries that are 0
// (empty bins, underflow) add nothing.
// Unbalanced (ot.hpp, Eq. (U1)): the errors are against the fixed point's marginals t_i = a_i
// exp(-f_i / rho) and s_j = b_j exp(-g_j / rho), the objective is the primal value sum_ij pi_ij (f_i +
// g_j) - eps (mass - m(a) m(b)) + rho KL(pi 1 | a) + rho KL(pi^T 1 | b), and the floor adds the
// rounding of the targets: exp(-f_i / rho) carries u (|f_i| / rho + 2) relative (the quotient, the
// exponential's 2 ulp), once in the row's error: 2 u sum_i t_i (|f_i| / rho + 2), columns alike.
struct PlanMeasure {
  double cost = 0.0, objective = 0.0, mass = 0.0;
  double row_error = 0.0, column_error = 0.0;
  double marginal_error = 0.0;  // row_error + column_error
  double rounding_floor = 0.0;
  PlanMatrix plan;
};

// The end of a stage: potentials (f, g) with g exact for f (the plan's columns sum to b), the
// marginal error of their plan, the iterations used and how the stage ended.
struct StageResult {
  Eigen::VectorXd f, g;
  double marginal_error = 0.0;
  int iterations = 0;
  StageStatus status = StageStatus::out_of_iterations;
  std::optional<KernelStats> kernel;  // kernel mode: its scaling iteration ran
  std::optional<PlanMeasure> plan;    // the stage measured the plan of (f, g) (kernel mode's check)
};

// The problem the stages of one solve share: operator C (n x m), weights a (n) and b (m) with
// their logarithms, and the options (tolerances, progress, kernel mode's settings).
class PlainLoop;
struct SinkhornProblem {
  const SoftMin& op;
  const Eigen::VectorXd& a;
  const Eigen::VectorXd& b;
  Eigen::VectorXd log_a, log_b;
  const SinkhornOptions& options;
  // The plain loop run beside the accelerated one (sinkhorn.cpp): every iteration of a
  // log-domain stage advances it by one iteration too, and the stage stops when it is done.
  PlainLoop* beside = nullptr;
};

// The coarse phase of a Sinkhorn loop: float32 soft-mins (SoftMin::coarse_error) while the row
// error is far above what they resolve. A logit of the float32 kernel is at most
// max|C| / eps + (max h - min h) in size, so each sum, and the row error measured from two of
// them, carries a relative error up to delta = coarse_error(that size). The phase needs
// delta <= kCoarseLimit and n m >= kCoarseMinPairs; it starts after a float64 iterate whose error is at least
// kCoarseMargin max(delta, tol) (so a loop that starts near convergence, a warm start, stays in
// float64) and ends for good at the first iterate whose error is below that, after kCoarseStall
// float32 iterates without a new smallest error (delta underestimated), and before a loop's last
// iteration (stop()). An iterate with a float32 soft-min only steers the loop: convergence, the
// iterate returned and every error reported come from float64 soft-mins.
class CoarsePhase {
 public:
  static constexpr double kCoarseLimit = 1e-2, kCoarseMargin = 8.0;
  static constexpr int kCoarseStall = 4;
  // Below this many pairs a soft-min takes about a millisecond and the loop stays in float64 (its
  // iterates, and so its result, then match the dense operator's to rounding).
  static constexpr double kCoarseMinPairs = 1 << 20;
  CoarsePhase(const SinkhornProblem& p, double eps) : CoarsePhase(p, eps, p.op.coarse_error(1.0) > 0.0) {}
  // The soft-min of h, in float32 when the phase is on; returns whether it was.
  bool softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out);
  bool softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out);
  // The row error of every iterate, against the loop's tol; `coarse`: it had a float32 soft-min.
  void measured(double error, double tol, bool coarse);
  void stop() { armed_ = false; }

 private:
  // has_coarse: the operator has a float32 soft-min (coarse_error(1) > 0), asked once.
  CoarsePhase(const SinkhornProblem& p, double eps, bool has_coarse)
      : op_(p.op), cost_size_(has_coarse ? p.op.cost_magnitude() / eps : 0.0),
        armed_(has_coarse && static_cast<double>(p.op.rows()) * static_cast<double>(p.op.cols()) >= kCoarseMinPairs) {}
  bool use(const Eigen::VectorXd& h);
  // fine, or coarse (its float32 form) when use(h) says so; returns whether it was coarse.
  bool softmin(SoftMinPart fine, SoftMinPart coarse, double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out);
  const SoftMin& op_;
  double cost_size_, delta_ = 0.0, best_ = std::numeric_limits<double>::infinity();
  bool armed_, on_ = false;
  int stall_ = 0;
};

// The stabilized kernels of kernel mode, kept from stage to stage (their memory is reused).
// float32 when tol leaves room for its rounding (16 * 2^-24, ot.hpp), else float64.
struct KernelStorage {
  bool use_float = true;
  ScalingKernel<float> single;
  ScalingKernel<double> full;
};

// Out of iterations, a log-domain stage returns the iterate with the smallest marginal error it
// measured (g exact for its f), not the last one.
StageResult log_domain_stage(const SinkhornProblem& p, SinkhornStage s);
StageResult kernel_mode_stage(const SinkhornProblem& p, KernelStorage& kernels, SinkhornStage s);
// The symmetric loop on p.op (square) for p.a; StageResult::g is left empty.
StageResult symmetric_stage(const SinkhornProblem& p, SinkhornStage s);

// The shift c for which (f + c, g - c), which defines the same plan in exact arithmetic, has the
// smallest sum_i a_i |f_i + c| + sum_j b_j |g_j - c| (a weighted median of -f and g): the
// potentials with the smallest magnitudes their plan allows, and so the smallest rounding floor
// (above).
double centering_shift(const Eigen::VectorXd& a, const Eigen::VectorXd& b, const Eigen::VectorXd& f,
                       const Eigen::VectorXd& g);

// What every solve of sinkhorn() does to its potentials before their plan is measured: f += c,
// then g made exact for the shifted f again (the column soft-min of log a + f / eps, computed from
// g - c, which is close to it). In floating point the shift is not free: the loop's potentials
// drift by a constant (Anderson's extrapolation, epsilon-scaling), and f_i + c rounds at the
// size of the uncentered f_i. Shifting g by -c alone left the pair off by that rounding over eps:
// measured, uncentered potentials near 1e3 at eps = 0.04 and costs near 70 gave column sums off
// by 9e-11 (a plan of mass 1 - 1.3e-10 whose cost fell below the exact OT cost). Recomputing g
// costs one pass over C per measured plan. Returns c. Unbalanced problems have no such gauge (f + c,
// g - c is another plan's pair): nothing moves and it returns 0.
double center_potentials(const SinkhornProblem& p, double eps, Eigen::VectorXd& f, Eigen::VectorXd& g);

PlanMeasure measure_plan(const SinkhornProblem& p, double eps, bool want_plan, const Eigen::VectorXd& f,
                         const Eigen::VectorXd& g);

// The plain loop (SinkhornOptions::overrelaxation 1, no epsilon-scaling) at p.options.epsilon, one
// iteration at a time: from g (f = softmin_rows(g) first), each iteration sets g = softmin_cols(f),
// f_new = softmin_rows(g) and the row error of (f, g) from them (as log_domain_stage); when that
// estimate is below its target (tol at first), the plan is measured (measure_plan): below tol
// with tol above the rounding floor it is done (converged); with tol at or below the floor it is
// done too (below_floor); else the target is divided by 4 and the loop goes on (f = f_new). Out
// of iterations the caller takes best(): the iterate with the smallest estimated error.
// `sinkhorn` runs it alone for the plain options and beside the accelerated loop by default, so
// that the two count iterations, and stop, identically.
class PlainLoop {
 public:
  PlainLoop(const SinkhornProblem& p, Eigen::VectorXd g_start, bool report_progress);
  // One iteration (counted); true once done. Throws NumericalFailure or Cancelled.
  bool step();
  bool done() const { return done_; }
  int iterations() const { return iterations_; }
  // The final state when done (its measured plan in .plan), else the best iterate seen.
  StageResult result() const;

 private:
  const SinkhornProblem& p_;
  bool report_;
  double target_;
  Eigen::VectorXd f_, g_, f_new_, h_rows_, h_cols_, best_f_, best_g_;
  double error_ = 0.0, best_error_;
  int iterations_ = 0;
  bool done_ = false;
  std::optional<PlanMeasure> measured_;
  CoarsePhase coarse_;
};

// Unbalanced transport (ot.hpp, Eq. (U1)): whether p is balanced (marginal_penalty = +inf), and
// the damping tau = rho / (rho + eps) of every soft-min at eps (1 when balanced).
inline bool balanced(const SinkhornProblem& p) { return std::isinf(p.options.marginal_penalty); }
inline double damping(const SinkhornProblem& p, double eps) {
  const double rho = p.options.marginal_penalty;
  return std::isinf(rho) ? 1.0 : rho / (rho + eps);
}

// The row marginal error of the plan of (f, g) whose columns are at their fixed point (g from f),
// from f_new (the damped row soft-min of g) alone: with R_i = sum_j b_j exp((g_j - C_ij) / eps) =
// exp(-f_new_i / (tau eps)), (pi 1)_i = a_i exp(f_i / eps) R_i, and its target a_i exp(-f_i / rho)
// (a_i when balanced), so |(pi 1)_i - target_i| = target_i |expm1((f_i - f_new_i) / (tau eps))|
// (1 / eps + 1 / rho = 1 / (tau eps)). Far from convergence the exponential may overflow to +inf,
// which is a (huge) error, not a failure.
double row_error(const SinkhornProblem& p, const Eigen::VectorXd& f, const Eigen::VectorXd& f_new, double eps);

// Throws NumericalFailure when a potential has left the range of double.
void check_finite(const Eigen::VectorXd& v);

// Calls options.progress every progress_every iterations; throws Cancelled when it returns false.
void report_progress(const SinkhornOptions& options, int iteration, double error);

// The epsilon-scaling schedule of options (sinkhorn.cpp): geometric from epsilon_start (negative:
// op.cost_range()) down to epsilon, epsilon alone when the start is not a finite value above it.
std::vector<double> epsilon_schedule(const SoftMin& op, const SinkhornOptions& options);

}  // namespace tokenflow::stages
