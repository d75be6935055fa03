// tokenflow/wasserstein.hpp: Wasserstein distances W_p, docs/design.md section 1 "Optimal transport".
//
//   W_p(mu, nu) = (min_{pi in Pi(a, b)} <|x - y|^p, pi>)^{1/p},  p >= 1, |.| the Euclidean norm.
//
// - wasserstein_exact: the network simplex (exact_ot) on the n x m matrix |x_i - y_j|^p.
// - wasserstein_1d: in one dimension the monotone (sorted) coupling is optimal for every p >= 1,
//   so W_p^p = int_0^1 |F^{-1}(t) - G^{-1}(t)|^p dt with the quantile functions F^{-1}, G^{-1}:
//   O((n + m) log(n + m)), exact.
// - bures_wasserstein: W_2 between Gaussians, closed form.
// - conditional_wasserstein: W_p of measures with positions, position by position.
// - wasserstein: picks one of the above (or entropic OT for large point clouds) by size.
// All take weights that need not be normalized (they are, here); empty weights mean uniform.
#pragma once

#include <Eigen/Core>
#include <functional>
#include <string>

#include "tokenflow/measure.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {

// |x_i - y_j|^p (n x m); p == 2 is the squared distance without a square root.
Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> power_cost_matrix(
    const Points<double>& x, const Points<double>& y, double p);

// W_p by the network simplex. x (n x d), y (m x d); a (n), b (m) or empty (uniform). Its n x m
// cost matrix and plan are checked against the memory limit first (check_exact_wasserstein_fits).
double wasserstein_exact(const Points<double>& x, const Points<double>& y, const Eigen::VectorXd& a,
                         const Eigen::VectorXd& b, double p);

// Refuses (InputError on "method", tokenflow/memory_budget.hpp) an exact W_p of n x m points whose
// cost matrix and plan (float64) do not fit in memory, before either is allocated.
void check_exact_wasserstein_fits(Eigen::Index n, Eigen::Index m);

// W_p on the real line by sorting (x of size n, y of size m). Its reference is wasserstein_exact on
// the same points (tests).
double wasserstein_1d(const Eigen::VectorXd& x, const Eigen::VectorXd& y, const Eigen::VectorXd& a,
                      const Eigen::VectorXd& b, double p);

// The symmetric positive semidefinite square root V sqrt(max(Lambda, 0)) V^T of the symmetric part
// of S (Eigen's SelfAdjointEigenSolver; negative eigenvalues clamped to 0).
Eigen::MatrixXd psd_sqrt(const Eigen::MatrixXd& S);

// W_2(N(m1, S1), N(m2, S2)) (the Bures-Wasserstein distance):
//   W_2^2 = |m1 - m2|^2 + tr S1 + tr S2 - 2 tr (S1^{1/2} S2 S1^{1/2})^{1/2},
// symmetric square roots by eigendecomposition (Eigen's SelfAdjointEigenSolver). S1, S2 symmetric
// positive semidefinite (asymmetry or negative eigenvalues beyond rounding, 1e-10 relative, throw
// InputError with key "S1"/"S2"; within rounding they are symmetrized and clamped).
double bures_wasserstein(const Eigen::VectorXd& m1, const Eigen::MatrixXd& S1,
                         const Eigen::VectorXd& m2, const Eigen::MatrixXd& S2);
// The same formula without the checks, for covariances that are symmetric positive semidefinite by
// construction (a moment ODE's, a sample's; gaussian.hpp's overload): S1, S2 are symmetrized and
// their negative eigenvalues clamped to 0. The one implementation: bures_wasserstein checks, then
// calls it.
double bures_wasserstein_psd(const Eigen::VectorXd& m1, const Eigen::MatrixXd& S1, const Eigen::VectorXd& m2,
                             const Eigen::MatrixXd& S2);
// The same through another route, for tests: tr (S1^{1/2} S2 S1^{1/2})^{1/2} = sum_k sqrt(lambda_k)
// over the eigenvalues of the (non-symmetric) S1 S2, which are those of S1^{1/2} S2 S1^{1/2}.
double reference_bures_wasserstein(const Eigen::VectorXd& m1, const Eigen::MatrixXd& S1,
                                   const Eigen::VectorXd& m2, const Eigen::MatrixXd& S2);

// Conditional W_p of measures with positions (docs/design.md section 1):
//   CW_p(mu, nu) = (sum_r lambda(r) W_p(mu_r, nu_r)^p)^{1/p},
// r over the distinct positions (compared exactly), lambda(r) the positional marginal (the total
// weight at r, which must be the same in mu and nu to within 1e-9), mu_r the tokens of mu at
// position r with their weights normalized. Each W_p is exact (sorting when d = 1). Throws
// InputError (key "positions") when a measure has no positions, a position has tokens in one
// measure only, or the positional marginals differ.
double conditional_wasserstein(const Measure<double>& mu, const Measure<double>& nu, double p);

// ---- W_p chosen by size (the `wasserstein` command and Python's wasserstein) ------------------
enum class WassersteinMethod { automatic, exact, sorted, sinkhorn };
const char* to_string(WassersteinMethod method);
WassersteinMethod wasserstein_method_from_string(const std::string& s);  // InputError key "method"

struct WassersteinOptions {
  WassersteinMethod method = WassersteinMethod::automatic;
  // automatic: sorted when d = 1, exact when n m <= exact_max_pairs, Sinkhorn otherwise.
  long long exact_max_pairs = 1LL << 22;
  // Sinkhorn: the one Sinkhorn options type (ot.hpp). sinkhorn.epsilon <= 0 (the default here)
  // means 1e-2 * (E_{a x b} |x - y|^2)^{p/2}, the scale of the cost. The Sinkhorn value
  // <|x - y|^p, pi_eps>^{1/p} lies above W_p: <C, pi_eps> - W_p^p is at most epsilon min(H(a),
  // H(b)) (H the Shannon entropy) plus the marginal error times max C. Its epsilon_start is not
  // read: the solve scales epsilon as automatic_epsilon_start says; its progress callback is called
  // every progress_every iterations (1 here).
  SinkhornOptions sinkhorn{.epsilon = 0.0, .progress_every = 1};
  // Dense cost matrix for Sinkhorn when n m is at most this; online otherwise (p = 1 or 2 only).
  long long dense_max_pairs = 1LL << 24;
};

struct WassersteinResult {
  double value = 0.0;  // W_p (the Sinkhorn estimate when method == sinkhorn)
  double p = 2.0;
  WassersteinMethod method = WassersteinMethod::exact;  // the one used
  // Sinkhorn only: the solve, its epsilon and the bound epsilon min(H(a), H(b)) on the entropic
  // excess of value^p over W_p^p.
  SinkhornResult sinkhorn;
  double epsilon = 0.0;
  double entropic_bias_bound = 0.0;
};

WassersteinResult wasserstein(const Measure<double>& mu, const Measure<double>& nu, double p,
                              const WassersteinOptions& options = {});

}  // namespace tokenflow
