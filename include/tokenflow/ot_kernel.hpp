// tokenflow/ot_kernel.hpp: the stabilized kernel-mode ("scaling") Sinkhorn iteration, a fast path
// of the log-domain loop of ot.hpp (SinkhornOptions::kernel_mode).
//
// Schmitzer 2019, "Stabilized sparse scaling algorithms for entropy regularized transport
// problems" (SIAM J. Sci. Comput. 41(3)), Alg. 2 and Sec. 3.1 (absorption): the potentials are
// split as F = f + eps log u, G = g + eps log v, with (f, g) in float64 and the stabilized kernel
//   P~_ij = a_i b_j exp((f_i + g_j - C_ij) / eps)                         (n x m, row-major)
// held as a dense matrix of Scalar (float: n m * 4 bytes, 64 MB at 4000^2). The plan is
//   pi_ij = u_i P~_ij v_j,
// and Sinkhorn's two half-steps are matrix-vector products:
//   u_i = a_i / (P~ v)_i,        v_j = b_j / (P~^T u)_j.
// When max |log u|, |log v| exceeds the absorption threshold the scalings are absorbed
// (f += eps log u, g += eps log v, P~ rebuilt, u = v = 1), so u, v stay far from overflow and
// the entries of P~ that round to zero (below the smallest normal Scalar) stay negligible.
//
// Over-relaxation (Thibault, Chizat, Dossal, Papadakis 2017, "Overrelaxed Sinkhorn-Knopp
// algorithm for regularized optimal transport", arXiv:1711.01851, Eq. (6); in log form
// f <- (1 - w) f + w softmin(...)): u <- u^(1 - w) (a / P~ v)^w, and the same for v. The
// adaptive choice of w follows Lehmann, von Renesse, Sambale, Uschmajew 2021, "A note on
// overrelaxation in the Sinkhorn algorithm" (Optim. Lett.), Thm. 1 / Eq. (4): with theta the
// local convergence rate of plain Sinkhorn, w_opt = 2 / (1 + sqrt(1 - theta)), the relaxed rate
// being w_opt - 1. theta is estimated from the plain iterations at the start of each stage.
//
// Both products read P~ row-major in one pass: the fused pass below computes, row by row, the
// row sums (P~ v)_i, the new u_i and the axpy into the column sums (P~^T u); each block of
// kRowBlock rows accumulates into its own column-sum vector, and the blocks are summed in block
// order, so the result does not depend on the number of threads or on scheduling.
//
// Arithmetic: entries are rounded once to Scalar (relative error <= u_S = 2^-24 for float,
// 2^-53 for double; the exponent is computed in double), every product and sum is in double
// (each entry converted exactly). A row or column sum of positive terms therefore has relative
// error <= u_S + (terms) 2^-53 against the same sum over the exact kernel P.
#pragma once

#include <Eigen/Core>
#include <functional>
#include <vector>

#include "tokenflow/ot.hpp"

namespace tokenflow {

template <class Scalar>
class ScalingKernel {
 public:
  static constexpr Eigen::Index kRowBlock = 128;  // rows per column-sum block

  // Sets P~_ij = exp(log_a_i + log_b_j + (f_i + g_j - C_ij) / eps) (C from op.for_each_row),
  // rounded to Scalar; entries below the smallest normal Scalar are set to 0 (no denormals).
  // Returns false when an entry is +inf or NaN (then P~ must not be used).
  bool assign(const SoftMin& op, const Eigen::VectorXd& log_a, const Eigen::VectorXd& log_b,
              const Eigen::VectorXd& f, const Eigen::VectorXd& g, double eps);

  // P~_ij <- P~_ij u_i v_j, rounded once more (entries below the smallest normal set to 0): an
  // absorption without C. P~ then no longer satisfies entry_error() (one more rounding, and
  // entries set to 0 earlier stay 0); kernel_sinkhorn_stage rebuilds it before it may stop.
  // Returns false when an entry overflows.
  bool rescale(const Eigen::VectorXd& u, const Eigen::VectorXd& v);

  Eigen::Index rows() const { return n_; }
  Eigen::Index cols() const { return m_; }
  const Scalar* row(Eigen::Index i) const { return data_.data() + i * m_; }
  std::size_t bytes() const { return data_.size() * sizeof(Scalar); }

  // out = P~ v (size n).
  void multiply(const Eigen::VectorXd& v, Eigen::VectorXd& out) const;
  // out = P~^T u (size m).
  void multiply_transposed(const Eigen::VectorXd& u, Eigen::VectorXd& out) const;

  // One Sinkhorn iteration in one pass over P~ (v_exact = b / P~^T u should hold on entry):
  //   returns      sum_i |u_i (P~ v_exact)_i - a_i|      (the row error of the column-exact plan)
  //   u_next_i  =  u_i^(1 - w) (a_i / (P~ v_relaxed)_i)^w
  //   column_sums = P~^T u_next
  // v_relaxed may be the same vector as v_exact (w = 1: one dot product per row instead of two).
  double fused_pass(const Eigen::VectorXd& a, const Eigen::VectorXd& v_relaxed,
                    const Eigen::VectorXd& v_exact, double omega, const Eigen::VectorXd& u,
                    Eigen::VectorXd& u_next, Eigen::VectorXd& column_sums) const;

  // A bound on the relative error of one entry of P~ against exp(...) in exact arithmetic: the
  // rounding to Scalar plus that of the exponent (its terms are each rounded in double).
  double entry_error() const { return entry_error_; }

 private:
  void sum_blocks(Eigen::VectorXd& out) const;  // out_j = sum over blocks, in block order

  Eigen::Index n_ = 0, m_ = 0;
  double entry_error_ = 0.0;
  std::vector<Scalar> data_;
  mutable std::vector<double> block_sums_;  // (blocks x m) column sums of each row block
};

extern template class ScalingKernel<float>;
extern template class ScalingKernel<double>;

// How an epsilon stage of Sinkhorn ended (kernel mode's here; the log-domain and symmetric
// stages of src/ot/stages.hpp end the same ways, failed aside).
enum class StageStatus {
  converged,          // marginal error below the stage's target
  out_of_iterations,  // the iteration budget is spent; the potentials are the last ones measured
  failed,             // an entry of P~ or a scaling left the range: use the log-domain loop
};

// One epsilon stage of kernel-mode Sinkhorn.
struct KernelStageResult {
  int iterations = 0;
  double marginal_error = 0.0;  // estimated with P~ (see the arithmetic above)
  // converged: marginal_error < target (see KernelStageOptions::tol)
  StageStatus status = StageStatus::out_of_iterations;
  int absorptions = 0;
  double omega = 1.0;           // the relaxation used last
};

struct KernelStageOptions {
  // Stop when the estimated marginal error is below target = max(tol - 3 d (1 + tol), tol / 2),
  // d = entry_error() of P~. Derivation: P~ = P (1 + D) with |D_ij| <= d; v_exact = b / P~^T u
  // is within a factor (1 +- d) of the exact b / P^T u, and the row sums u_i (P~ v_exact)_i of
  // positive terms within (1 +- d)^2 of the exact ones, so the estimate is within about
  // 2 d (1 + error) of the exact row error of the same f (the double sums add (n + m) 2^-53,
  // far less). Stopping at the target thus leaves the exact error below tol whenever
  // tol > 6 d; below that the caller's log-domain loop finishes the descent.
  double tol = 1e-6;
  int max_iterations = 1000;
  double omega = 0.0;          // >= 1: fixed over-relaxation; 0: adaptive (Lehmann et al.)
  // Absorb when max |log u|, |log v| exceeds it. An entry set to 0 (below the smallest normal
  // Scalar N) then stands for plan mass u_i P_ij v_j < N e^(2 * 24) each, at most n m N e^48 in
  // all: 1.4e-10 for float at n m = 2^24 (2^30: 9e-9), far below the margin 3 d ~ 2e-7 of the
  // stopping target, and the caller's float64 check measures the returned plan anyway.
  // (16 cost one more absorption, a rebuild of P~, on the benchmark problem.)
  double absorb_threshold = 24.0;
  // Anderson acceleration of the column scalings (kernel.cpp) with this many past steps; 0 =
  // over-relaxation (omega above) instead.
  int anderson_depth = 0;
  // Anderson only: absorptions while the error is above 1e-2 rescale P~ in place (ScalingKernel::
  // rescale) instead of rebuilding it from C; a fresh rebuild follows before the stage may stop.
  bool in_place_absorption = true;
  // (iterations done in the stage, estimated error); false cancels (throws Cancelled)
  std::function<bool(int, double)> progress;
};

// Runs Sinkhorn at `eps` from potentials (f, g) with g exact for f (g = softmin over i of f):
// on return (f, g) are the potentials of the last column-exact plan (g exact for f up to the
// rounding of P~), also when not converged or failed (then the last finite ones).
template <class Scalar>
KernelStageResult kernel_sinkhorn_stage(const SoftMin& op, const Eigen::VectorXd& a,
                                        const Eigen::VectorXd& b, double eps,
                                        const KernelStageOptions& options, Eigen::VectorXd& f,
                                        Eigen::VectorXd& g, ScalingKernel<Scalar>& kernel);

// The unit roundoff of Scalar (2^-24, 2^-53): the relative error of one entry of P~.
template <class Scalar>
constexpr double kernel_unit_roundoff() {
  return sizeof(Scalar) == 4 ? 0x1p-24 : 0x1p-53;
}

}  // namespace tokenflow
