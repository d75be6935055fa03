// tokenflow/ot.hpp: entropic and exact optimal transport, docs/design.md section 1 "Optimal transport".
//
// Sinkhorn solves  min_{pi in Pi(a, b)} <C, pi> + epsilon KL(pi | a b^T)  in the log domain:
//   pi_ij = a_i b_j exp((f_i + g_j - C_ij) / epsilon),
//   f_i = -epsilon log sum_j b_j exp((g_j - C_ij) / epsilon)      (soft-min over j)
//   g_j = -epsilon log sum_i a_i exp((f_i - C_ij) / epsilon)      (soft-min over i)
// The loop is written once against a SoftMin operator (GeomLoss style, Feydy et al. 2019,
// Eq. (23)); the operator decides how C is held: dense (an n x m matrix) or online (recomputed
// from the points in tiles, memory O(n + m)). The marginal error is |pi 1 - a|_1 + |pi^T 1 - b|_1.
//
// Reported values (SinkhornResult), for the returned potentials (f, g) and the plan pi they define:
//   cost       = <C, pi>
//   objective  = <C, pi> + epsilon KL(pi | a b^T), KL(pi | a b^T) = sum_ij pi_ij log(pi_ij / (a_i b_j)),
//                the primal objective of docs/design.md section 1 evaluated on the returned plan; it equals
//                sum_ij pi_ij (f_i + g_j) exactly (log(pi_ij / a_i b_j) = (f_i + g_j - C_ij) / eps).
//                The returned plan has exact column sums b (mass 1), so the KL needs no "- mass + 1"
//                term. At convergence it equals OT_eps(a, b) to within about
//                marginal_error * (max C - min C) (the potentials are the derivative of OT_eps in the
//                marginals, and their oscillation is at most that of C).
// Unbalanced transport (marginal_penalty rho < inf; Chizat, Peyre, Schmitzer and Vialard 2018,
// "Scaling algorithms for unbalanced optimal transport problems", Sec. 3 and 4.3): the marginals are
// penalized instead of fixed, and the plan minimizes
//   <C, pi> + eps KL(pi | a b^T) + rho KL(pi 1 | a) + rho KL(pi^T 1 | b),
// KL(p | q) = sum p log(p / q) - p + q (masses of a and b need not be equal nor 1). The plan has the
// same form, and the same loop computes it with every soft-min damped by tau = rho / (rho + eps):
//   f_i = tau (-eps log sum_j b_j exp((g_j - C_ij) / eps)),  g_j likewise   (Eq. (U1))
// At the fixed point pi 1 = a exp(-f / rho) and pi^T 1 = b exp(-g / rho) (the first-order
// conditions of the penalties), so the marginal error of (f, g) is measured against those:
//   |pi 1 - a e^{-f/rho}|_1 + |pi^T 1 - b e^{-g/rho}|_1,
// which is the balanced error when rho = inf (tau = 1). objective is then the whole primal value
// above on the returned plan. rho -> inf is the balanced problem.
// Epsilon-scaling runs the same loop at a geometric sequence of epsilons from epsilon_start down
// to epsilon, warm-starting each stage from the last (Schmitzer 2019, Sec. 3.2); `iterations`
// counts all of them. Under the budget max_iter the solver returns its best state: the iterate
// with the smallest marginal error of the final epsilon, or the last intermediate stage that
// converged when its error is smaller (SinkhornResult::epsilon_reached says which epsilon).
#pragma once

#include <Eigen/Core>
#include <functional>
#include <limits>
#include <mutex>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tokenflow {

// A solve that the floating-point arithmetic could not carry (a potential that left the range of
// double): not bad input, and no result. tokenflow ot reports it as status "failed" (exit 1).
class NumericalFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class CostKind { sqeuclidean, euclidean, dot };
const char* to_string(CostKind cost);
CostKind cost_kind_from_string(const std::string& s);  // throws InputError(key "cost")

// c(x, y) for one pair of points of dimension p.
double pair_cost(CostKind cost, const double* x, const double* y, Eigen::Index p);

// The soft-min operator of one cost matrix C (n x m):
//   rows: out_i = -eps log sum_j exp(h_j - C_ij / eps)   (h of size m)
//   cols: out_j = -eps log sum_i exp(h_i - C_ij / eps)   (h of size n)
class SoftMin {
 public:
  virtual ~SoftMin() = default;
  virtual Eigen::Index rows() const = 0;
  virtual Eigen::Index cols() const = 0;
  virtual void softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const = 0;
  virtual void softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const = 0;
  // Calls visit(i, j, C_ij) for every pair, row by row (row i's pairs in increasing j); used to
  // form the plan and the transport cost. Rows may be visited concurrently from several threads
  // (each row by one thread), so visit must only write to per-row state.
  virtual void for_each_row(const std::function<void(Eigen::Index i, const double* c_row)>& visit) const = 0;
  // Row i of C (m entries): a pointer into the operator's own storage, or into `buffer` (m
  // doubles, which it then fills). Safe to call from several threads with distinct buffers.
  virtual const double* cost_row(Eigen::Index i, double* buffer) const = 0;
  // An upper bound on max_ij C_ij - min_ij C_ij, used as the first epsilon of epsilon-scaling.
  // The default is exact and costs one pass over C (for_each_row); operators that know a cheaper
  // bound (a bounding box of the points) override it.
  virtual double cost_range() const;
  // An upper bound on max_ij |C_ij|: the size of the numbers the loop divides by epsilon (see
  // check_sinkhorn_range in ot_solve.hpp). The default is exact (one pass over C).
  virtual double cost_magnitude() const;
  // Whether the solver may pass over all n m pairs (for_each_row, cost_row) to measure a plan.
  // False for operators built for sizes where it may not (the grid): the solver then measures the
  // plan from soft-mins (src/ot/stages.cpp, measure_plan) unless the plan itself is asked for.
  virtual bool visits_pairs() const { return true; }
  // The relative error each soft-min's sum may carry beyond rounding: out_i = -eps log(S_i (1 +
  // e_i)) with |e_i| <= this for the exact sum S_i. 0 for the exact operators.
  virtual double softmin_relative_error() const { return 0.0; }
  // Soft-mins in float32 for the iterations far from tol (the log-domain loop's coarse phase,
  // stages.cpp), where the operator has such a path (the online operator for the sqeuclidean and
  // dot costs, in the attention kernel's float32 sweep). coarse_error(L) bounds the relative error
  // of one of their sums whose logits are at most L in size; 0 means the operator has none (the
  // default; its coarse soft-mins are then the float64 ones). Nothing the solver returns comes
  // from them (only the progress callback sees their errors).
  virtual double coarse_error(double /*logit_size*/) const { return 0.0; }
  virtual void softmin_rows_coarse(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
    softmin_rows(eps, h, out);
  }
  virtual void softmin_cols_coarse(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
    softmin_cols(eps, h, out);
  }
  // The row means of the cost under the row-normalized kernel of h (size m):
  //   out_i = sum_j P_ij C_ij,   P_ij = exp(h_j - C_ij / eps) / sum_j' exp(h_j' - C_ij' / eps),
  // which the plan's cost <C, pi> = sum_i (pi 1)_i out_i needs without a pass over the pairs. The
  // default is exact (one pass over C; per row the maximum, then the shifted sums).
  virtual void row_mean_cost(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const;
};

// One of a SoftMin's soft-mins (&SoftMin::softmin_rows, softmin_cols and their coarse forms), for
// code that does the same around either (the distributed operator, the float32 phase).
using SoftMinPart = void (SoftMin::*)(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const;

// Forbidden pairs: a cost matrix given by the user (DenseSoftMin, exact_ot) may hold +inf, a pair
// that carries no mass (POT's convention: exp(-inf / eps) = 0). Every soft-min then sums over the
// allowed pairs only, and the plan is 0 on the forbidden ones; ranges and magnitudes are those of
// the allowed entries. NaN and -inf stay invalid.
// max |C_ij| over the entries below +inf (0 when there are none); +inf when an entry is NaN or -inf.
double allowed_cost_magnitude(const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& cost);
// Whether some entry is +inf (a forbidden pair).
bool has_forbidden_pairs(const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& cost);

// C held in memory (n x m, row-major), the fastest when it fits. forbidden_pairs (a matrix the user
// gave): +inf entries are forbidden pairs, the range and magnitude those of the other entries;
// otherwise (costs computed from points) every non-finite entry is an overflow, and the magnitude
// is then +inf (check_cost_range refuses it).
class DenseSoftMin final : public SoftMin {
 public:
  explicit DenseSoftMin(Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> cost,
                        bool forbidden_pairs = false);
  Eigen::Index rows() const override { return cost_.rows(); }
  Eigen::Index cols() const override { return cost_.cols(); }
  void softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void for_each_row(const std::function<void(Eigen::Index, const double*)>& visit) const override;
  const double* cost_row(Eigen::Index i, double*) const override { return &cost_(i, 0); }
  double cost_range() const override;
  double cost_magnitude() const override;
  const auto& cost() const { return cost_; }

 private:
  using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Matrix& transposed() const;  // C^T, copied on the first call (thread-safe)
  Matrix cost_;
  bool forbidden_pairs_;
  // C^T for softmin_cols, formed on first use: kernel mode (ot_kernel.hpp) reads C by rows only
  // and never needs it (128 MB and ~0.1 s saved at 4000^2).
  mutable Matrix cost_t_;
  mutable std::once_flag transposed_once_;
};

// C_ij = c(x_i, y_j) recomputed on the fly in tiles: memory O((n + m) p).
class OnlineSoftMin final : public SoftMin {
 public:
  using PointMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  OnlineSoftMin(PointMatrix x, PointMatrix y, CostKind cost);
  Eigen::Index rows() const override { return x_.rows(); }
  Eigen::Index cols() const override { return y_.rows(); }
  void softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  double coarse_error(double logit_size) const override;
  void softmin_rows_coarse(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void softmin_cols_coarse(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void for_each_row(const std::function<void(Eigen::Index, const double*)>& visit) const override;
  const double* cost_row(Eigen::Index i, double* buffer) const override;
  // From the bounding box B of the union of the points: diam(B)^2 (sqeuclidean), diam(B)
  // (euclidean), 2 max|x| max|y| (dot).
  double cost_range() const override;
  // sqeuclidean, euclidean: the costs are >= 0, so cost_range() bounds them; dot: max|x| max|y|.
  double cost_magnitude() const override;

 private:
  PointMatrix x_, y_;
  CostKind cost_;
};

// C_ij = |x_i - y_j|^2 for points in k <= 3 dimensions, each soft-min one Gauss transform of
// fast_gauss.hpp (gauss_average: a Taylor grid with a per-row certificate, the rows it cannot
// certify summed exactly): time and memory O(n + m) per soft-min where the clouds span a bounded
// number of bandwidths sqrt(eps), against O(n m) time for the online operator. Each soft-min is
// put in the Gauss form whose weights are flattest for the potential it is given (a quadratic fit
// of the log-weights, src/ot/grid_softmin.cpp), so that each row's heaviest terms lie near its
// target, where the certificate is tight.
// Guarantee: each soft-min's sum within relative error `relative_tol` (softmin_relative_error), so
// out_i within eps relative_tol of the exact soft-min; the solver adds that to every marginal error
// it reports (stages.cpp, measure_plan). The pairs are not visited unless a plan is asked for
// (visits_pairs() false); for_each_row and cost_row compute C from the points as the online
// operator does.
class GridSoftMin final : public SoftMin {
 public:
  using PointMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  // relative_tol in (0, 1e-2]. InputError (key "operator") for points of dimension above 3,
  // ("y") for clouds of different dimensions. max_cost_per_pair: GaussAverageOptions' (below it the
  // grid is built; else the rows are summed exactly); +inf makes every soft-min use the grid
  // (tests).
  GridSoftMin(PointMatrix x, PointMatrix y, double relative_tol, double max_cost_per_pair = 16.0);
  ~GridSoftMin() override;
  Eigen::Index rows() const override { return x_.rows(); }
  Eigen::Index cols() const override { return y_.rows(); }
  void softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  void for_each_row(
      const std::function<void(Eigen::Index i, const double* c_row)>& visit) const override;
  const double* cost_row(Eigen::Index i, double* buffer) const override;
  double cost_range() const override;
  double cost_magnitude() const override;
  bool visits_pairs() const override { return false; }
  double softmin_relative_error() const override { return tol_; }
  // Through one Gauss average with values (y_j, |y_j|^2) (centred points): out_i = |x_i|^2 -
  // 2 <x_i, E y> + E |y|^2, each average within relative_tol sum_j P_ij |(y_j, |y_j|^2)| of the
  // exact one (gauss_average's row bound).
  void row_mean_cost(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const override;
  // out as softmin_rows, and means_i = sum_j P_ij v_j for values v (cols() x c) under row i's
  // weights P_ij = exp(h_j - C_ij / eps) / sum_j' exp(h_j' - C_ij' / eps): each within relative_tol
  // sum_j P_ij |v_j|_2 of the exact one (gauss_average's row bound), from the same transform.
  void softmin_rows_and_means(double eps, const Eigen::VectorXd& h, const PointMatrix& values,
                              PointMatrix& means, Eigen::VectorXd& out) const;
  // Rows summed exactly (the certificate rejected them) and rows in all, over every soft-min so
  // far.
  long long rows_exact() const;
  long long rows_total() const;

 private:
  void transform(const PointMatrix& targets, const Eigen::VectorXd& target_norm2,
                 const PointMatrix& sources, const Eigen::VectorXd& source_norm2, double eps,
                 const Eigen::VectorXd& h, const PointMatrix& values, PointMatrix& means,
                 Eigen::VectorXd& out) const;
  PointMatrix x_, y_;  // centred on the mean of both clouds
  Eigen::VectorXd x_norm2_, y_norm2_;
  double tol_, max_cost_per_pair_;
  OnlineSoftMin pairs_;  // the original points, for cost_row and for_each_row
  struct Counters;
  std::unique_ptr<Counters> counters_;
};

// Sinkhorn's defaults, written once, and SinkhornOptions, the one type of the options of a
// Sinkhorn solve: OTSolveOptions::sinkhorn (tokenflow ot, Python's tokenflow.sinkhorn and
// tokenflow.torch), WassersteinOptions::sinkhorn and ModelConfig::sinkhorn (the model's Sinkhorn
// layer, couple()) hold one; the CLI's help and Python's signatures read their defaults from them.
inline constexpr double kSinkhornEpsilon = 0.1;
inline constexpr double kSinkhornTol = 1e-9;
inline constexpr int kSinkhornMaxIter = 10000;
// The budget of the inner solves that stop on their tol, not on a caller's count: sinkhorn
// attention's (attention.sinkhorn_max_iter), the Sinkhorn Transformer's converged solve (couple,
// the final evaluation) and the entropic-OT task's targets.
inline constexpr int kInnerSinkhornMaxIter = 100000;
inline constexpr double kSinkhornEpsilonDecay = 2.0;
// The marginal penalty rho of unbalanced transport (POT's reg_m): +inf is the balanced problem.
inline constexpr double kSinkhornBalanced = std::numeric_limits<double>::infinity();

struct SinkhornOptions {
  double epsilon = kSinkhornEpsilon;
  // rho of the unbalanced problem (above, Eq. (U1)); +inf (the default): balanced. Positive.
  // Unbalanced solves run the log-domain loop (kernel_mode is not used) and keep the weights'
  // masses (a and b need not sum to 1).
  double marginal_penalty = kSinkhornBalanced;
  double tol = kSinkhornTol;         // stop when the l1 marginal error is below tol
  int max_iter = kSinkhornMaxIter;   // in total, over all epsilon stages (the final stage gets at least one)
  bool want_plan = false;  // the dense plan (n x m) in the result
  // Warm start (both empty or sizes n and m; the symmetric solver reads f_init only).
  Eigen::VectorXd f_init{}, g_init{};
  // Epsilon-scaling: start at epsilon_start (if > epsilon; a negative value means the operator's
  // cost_range()) and divide by epsilon_decay per stage down to epsilon. Each intermediate stage
  // runs until its marginal error is below max(tol, epsilon_stage_tol) or out of iterations; only
  // the last stage decides `converged`. 0 turns the scaling off.
  // Measured (docs/ot.md, "Epsilon-scaling"), sqeuclidean cost between N(0, I) and N(1, I) clouds in R^2:
  // n = 30, eps = 0.02 (eps / range ~ 5e-4), tol 1e-5: 2.3-10x fewer iterations than no scaling
  // (12 instances); n = 40, eps = 0.01, tol 1e-6: stages to 1e-5 took 1.6-13x fewer iterations
  // than stages stopped at 1e-2, which leave the slow global mass transfer to the last stage.
  double epsilon_start = 0.0;
  double epsilon_decay = kSinkhornEpsilonDecay;
  double epsilon_stage_tol = 1e-5;
  // Kernel mode (ot_kernel.hpp): each epsilon stage runs the stabilized scaling iteration on
  // P~ = a b^T exp((f + g - C) / eps) held in float32 (when tol >= 16 * 2^-24, so that the
  // rounding of P~ leaves room; else float64), n m entries, with absorption and over-relaxation;
  // the final stage then hands its f to the log-domain loop above, which measures the marginal
  // error in float64 and continues until it is below tol. Everything reported (potentials,
  // plan, marginal error, the stopping rule) has the meaning it has without the kernel;
  // `iterations` counts the kernel's iterations too. Falls back to the log-domain loop when an
  // entry of P~ or a scaling leaves the floating-point range.
  bool kernel_mode = false;
  // The acceleration, in both loops: overrelaxation 0 (the default) runs Anderson acceleration
  // of depth anderson_depth, with a safeguard that falls back to the plain step when the error
  // grows or stalls (src/ot/anderson.hpp); a value in [1, 2) fixes w (1: plain Sinkhorn).
  // Kernel mode relaxes the column scaling (ot_kernel.hpp; with anderson_depth 0 it chooses w from
  // the measured convergence rate, Lehmann et al. 2021); the log-domain loop relaxes f, f <- f +
  // w (softmin_rows(softmin_cols(f)) - f) (anderson_depth 0: plain steps). The fixed point, and so
  // the converged result, is the same for every choice; the iterates differ.
  double overrelaxation = 0.0;
  int anderson_depth = 12;
  // The plain loop beside (the log-domain solves, not kernel mode): unless the options are
  // themselves plain (overrelaxation 1, or 0 with anderson_depth 0, and no scaling), every
  // iteration of the accelerated, epsilon-scaled loop also advances the plain loop at epsilon
  // from the same start (stages::PlainLoop), and the solve stops as soon as either is done. So
  // the default converges wherever the plain loop does, in at most its iterations (an iteration
  // then costs two soft-min pairs: the plain loop's and the accelerated loop's). Not with an
  // operator that does not visit pairs (SoftMin::visits_pairs: the grid, sinkhorn.cpp says why).
  bool plain_beside = true;
  // Called every `progress_every` iterations with (iteration, marginal error); false cancels
  // (the loop throws Cancelled).
  std::function<bool(int, double)> progress{};
  int progress_every = 10;
};

struct SinkhornResult {
  Eigen::VectorXd f, g;   // dual potentials
  double cost = 0.0;      // <C, pi>
  double objective = 0.0; // <C, pi> + epsilon KL(pi | a b^T) (+ the penalties when unbalanced)
  double marginal_penalty = kSinkhornBalanced;  // rho as solved (+inf: balanced)
  int iterations = 0;     // all epsilon stages together
  int final_stage_iterations = 0;  // those at the final epsilon (at least max_iter / 2 when the
                                   // intermediate stages did not converge: sinkhorn.cpp)
  // |pi 1 - a|_1 + |pi^T 1 - b|_1 of the returned plan: its entries formed as the plan is formed
  // (also when it is not kept: want_plan false, the online operator) and summed with compensation
  // (src/ot/stages.hpp, PlanMeasure).
  double marginal_error = 0.0;
  // The smallest tol the arithmetic can honour for this plan (stages.hpp, "rounding floor":
  // about 4 u <|f| + |g|>_pi / epsilon, u = 2^-53).
  double rounding_floor = 0.0;
  bool below_floor = false;     // tol <= rounding_floor: tol cannot be honoured, converged is false
  // The epsilon of the returned potentials and plan: epsilon, unless the solve ran out of
  // iterations and an intermediate stage of the schedule that converged had a smaller marginal
  // error than anything reached at epsilon (then that stage is returned; converged is false).
  double epsilon_reached = 0.0;
  // marginal_error < tol, tol above the rounding floor, at epsilon.
  bool converged = false;
  double plan_mass = 0.0;       // sum_ij pi_ij of the returned plan, summed as it is formed (1
                                // up to rounding: its columns sum to b; unbalanced: within the
                                // marginal error of sum_i a_i exp(-f_i / rho))
  // Kernel mode: its iterations (part of `iterations`), absorptions and the last w used.
  int kernel_iterations = 0, kernel_absorptions = 0;
  double kernel_omega = 0.0;
  int kernel_anderson_depth = 0;  // the Anderson depth used (0: over-relaxation)
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> plan;  // when asked
};

// The one check of SinkhornOptions, made by sinkhorn, sinkhorn_symmetric, solve_ot's
// check_ot_options and solve_wasserstein: throws InputError unless epsilon is positive and finite
// (key "epsilon"), marginal_penalty positive (+inf allowed; "marginal_penalty"), tol positive ("tol"), max_iter at least 1 ("max_iter"), epsilon_decay greater
// than 1 when epsilon_start != 0 (scaling; NaN counts as scaling) ("epsilon_decay") and, in kernel
// mode, check_overrelaxation holds.
void check_sinkhorn_options(const SinkhornOptions& options);
// InputError (key "overrelaxation") unless overrelaxation is 0 (adaptive) or in [1, 2).
void check_overrelaxation(double overrelaxation);

// The first epsilon of `epsilon_start = auto` (the CLI's default): op.cost_range() when epsilon is
// below 1e-3 of it, else 0 (no scaling). Measured (docs/ot.md, n = m = 1000 in R^3,
// sqeuclidean, range ~60, tol 1e-6): scaling costs 15-35% more iterations at eps = 1 and 0.1
// (every stage must reach epsilon_stage_tol) and wins at eps / range <~ 5e-4 (2-10x at n = 30).
double automatic_epsilon_start(const SoftMin& op, double epsilon);

// The Sinkhorn loop (log domain, or kernel mode when options.kernel_mode). a (n) and b (m)
// non-negative, each summing to 1. A zero weight is an empty bin: log a_i = -inf drops it from
// every soft-min, its plan row (column) is 0 and its potential is the soft-min of the other
// side's (f_i = -eps log sum_j b_j exp((g_j - C_ij) / eps)), the first variation of OT_eps in
// a_i; with empty bins kernel mode is not used (its scaling a_i / (P~ v)_i is 0 / 0 there). The
// returned plan has exact column sums b, so its marginal error is its row error (the columns' part
// is their sums' rounding). Each epsilon of the schedule is one stage (src/ot/stages.hpp)
// warm-started from the last; throws InputError for bad options or weights
// (check_sinkhorn_options), NumericalFailure when a potential leaves the range of double, Cancelled
// when progress returns false. A final stage stops on its estimate of the error; its plan is then
// measured, and while that is not below tol (an operator with a certified soft-min error, the
// grid's, measures more than it estimates) the loop goes on with a target 4 times smaller.
// sinkhorn_symmetric does the same. Unbalanced (options.marginal_penalty < inf): the same loop
// with damped soft-mins (Eq. (U1)), no centering of the potentials (f + c, g - c is another plan
// there), marginal errors against the fixed point's marginals; a and b keep their masses.
SinkhornResult sinkhorn(const SoftMin& op, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                        const SinkhornOptions& options);

// Self-transport OT_eps(a, a) for a symmetric cost (C_ij = C_ji, op.rows() == op.cols(); the
// caller guarantees the symmetry): the symmetric fixed point f = T(f) (unbalanced: f = tau T(f)),
//   T(f)_i = -eps log sum_j a_j exp((f_j - C_ij) / eps),
// reached by the averaged update f <- (f + T(f)) / 2 (the symmetric Sinkhorn update of Feydy et
// al. 2019, "Interpolating between optimal transport and MMD using Sinkhorn divergences",
// arXiv:1810.08278), which converges in a few iterations where the alternating loop oscillates. The plan pi_ij = a_i a_j exp((f_i + f_j -
// C_ij) / eps) is symmetric, so its row and column errors are equal: marginal_error = 2 |pi 1 - a|_1.
// The result has g == f. The options are checked as for sinkhorn (kernel_mode is not used).
SinkhornResult sinkhorn_symmetric(const SoftMin& op, const Eigen::VectorXd& a, const SinkhornOptions& options);

// The debiased Sinkhorn divergence (the definition of S_eps in Feydy et al. 2019, arXiv:1810.08278):
//   S_eps(a, b) = OT_eps(a, b) - 1/2 OT_eps(a, a) - 1/2 OT_eps(b, b),
// each OT_eps being the `objective` above; xx and yy are the symmetric self-transport problems
// (cost C(x_i, x_j) and C(y_i, y_j)). S_eps >= 0, with equality iff a = b on the same points, when
// exp(-C / eps) is a positive definite kernel (sqeuclidean, euclidean; not dot). Numerically, each
// term is within about marginal_error * cost_range of its limit (see `objective`).
// Unbalanced (options.marginal_penalty < inf): each OT_eps is the unbalanced objective and
//   S_eps(a, b) = OT_eps(a, b) - 1/2 OT_eps(a, a) - 1/2 OT_eps(b, b) + eps/2 (m(a) - m(b))^2
// (Sejourne, Feydy, Vialard, Trouve and Peyre 2019, "Sinkhorn divergences for unbalanced optimal
// transport", arXiv:1910.12958, Def. 6), >= 0 for the same kernels; the self terms are solved by the
// symmetric loop with the damping tau.
struct SinkhornDivergence {
  double value = 0.0;
  SinkhornResult xy, xx, yy;
};
// Solves the three problems with `options` (the cross term first; options.f_init warm-starts xx,
// options.g_init yy) and combines them (the overload below).
SinkhornDivergence sinkhorn_divergence(const SoftMin& xy, const SoftMin& xx, const SoftMin& yy,
                                       const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                                       const SinkhornOptions& options);
// The divergence of a solved cross term xy = OT_eps(a, b): solves the self-transport terms with
// sinkhorn_symmetric and self_options (its f_init warm-starts xx, its g_init yy) and forms
// value = xy.objective - (xx.objective + yy.objective) / 2. The one place S_eps is formed
// (solve_ot uses it too). xy is moved into the result once the self terms are solved; when they
// throw, xy is left as it was.
SinkhornDivergence sinkhorn_divergence(SinkhornResult&& xy, const SoftMin& xx, const SoftMin& yy,
                                       const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                                       const SinkhornOptions& self_options);

// ---- exact OT (src/ot/exact.cpp): LEMON's network simplex ------------------------------------
struct ExactOTResult {
  double cost = 0.0;  // <C, pi>, minimal
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> plan;  // n x m
  Eigen::VectorXd f, g;  // dual potentials: f_i + g_j <= C_ij, equality on the plan's support
  long long pivots = 0;  // the network simplex's pivots, its initial ones included
};
// a (n), b (m) non-negative (zero: an empty bin), each summing to 1. The masses are carried as integers (multiples of
// 2^-52) so the network simplex runs exactly on them; costs stay in double. keep_going (when given)
// is asked between the passes over the cost matrix and after every pivot: Cancelled when it
// returns false (a stop request lands within a pivot's or a pass's time).
ExactOTResult exact_ot(const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& cost,
                       const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                       const std::function<bool()>& keep_going = {});

// ---- reference (src/ot/reference.cpp) -----------------------------------------------------------
// Plain double loops over a dense cost matrix, log-sum-exp written out; the oracle for tests.
SinkhornResult reference_sinkhorn(const Eigen::MatrixXd& cost, const Eigen::VectorXd& a,
                                  const Eigen::VectorXd& b, double epsilon, double tol,
                                  int max_iter);
// The Sinkhorn dual's Hessian times -eps at the plan P (n x m), H = [[diag(P 1), P], [P^T,
// diag(P^T 1)]], made invertible along its null vector v = (1_n, -1_m) (the gauge f + c, g - c):
// H + s v v^T with s = mean(diag H) / (n + m). A residual orthogonal to v (both marginals of the
// same mass) sees H alone. What reference_sinkhorn_newton solves and the tests' plan sensitivity
// inverts; dense, (n + m)^2: test sizes.
Eigen::MatrixXd reference_gauged_dual_hessian(const Eigen::MatrixXd& plan);
// Newton's method on the Sinkhorn dual from start's potentials, to an l1 error of both marginals
// below tol (at most max_steps steps; iterations counts them on top of start's). a and b must have
// the same mass (else the error stays above |sum a - sum b| and the result is not converged). For
// the problems whose plain loop contracts too slowly to reach tol in a test's time: a plan close
// to block-diagonal, where the loop's rate near the fixed point (the square of the second singular
// value of diag(a)^-1/2 P diag(b)^-1/2) is near 1. Each step solves the dense (n + m) x (n + m)
// system of the dual's Hessian: test sizes.
SinkhornResult reference_sinkhorn_newton(const Eigen::MatrixXd& cost, const Eigen::VectorXd& a,
                                         const Eigen::VectorXd& b, double epsilon, double tol,
                                         SinkhornResult start, int max_steps = 100);
// The stabilized kernel of kernel mode (ot_kernel.hpp) in float64, plain loops:
//   P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps).
Eigen::MatrixXd reference_stabilized_kernel(const Eigen::MatrixXd& cost, const Eigen::VectorXd& a,
                                            const Eigen::VectorXd& b, const Eigen::VectorXd& f,
                                            const Eigen::VectorXd& g, double epsilon);
// Unbalanced Sinkhorn (Eq. (U1), marginal penalty rho), plain loops: the same iteration as
// reference_sinkhorn with every soft-min times tau = rho / (rho + eps), stopping when the error of the
// plan formed entry by entry against its fixed point's marginals, |pi 1 - a e^{-f/rho}|_1 +
// |pi^T 1 - b e^{-g/rho}|_1, is below tol; the plan, cost and unbalanced objective of the result.
SinkhornResult reference_sinkhorn_unbalanced(const Eigen::MatrixXd& cost, const Eigen::VectorXd& a,
                                             const Eigen::VectorXd& b, double epsilon, double rho, double tol,
                                             int max_iter);
// The symmetric self-transport loop of sinkhorn_symmetric (same iteration), plain loops.
SinkhornResult reference_sinkhorn_symmetric(const Eigen::MatrixXd& cost, const Eigen::VectorXd& a,
                                            double epsilon, double tol, int max_iter);

}  // namespace tokenflow
