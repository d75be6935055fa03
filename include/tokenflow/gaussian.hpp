// tokenflow/gaussian.hpp: the Gaussian closure of the Transformer PDE, docs/design.md section 1.
//
// Started from N(m, S), the attention field of every kind below is affine in x,
// Gamma(x) = b + M x (b in R^d, M d x d), so the measure stays Gaussian and its moments solve
//   dm/dt = b + M m,      dS/dt = M S + S M^T.
// With A_h = scale K_h^T Q_h and C_h = W_h V_h (head h of the layer active at time t):
//   softmax:  Gamma(x) = sum_h C_h (m + S A_h x)
//   l2:       Gamma(x) = sum_h C_h R_h (m + 2 g S K_h^T Q_h x),  R_h = (I + 2 g S K_h^T K_h)^{-1},
//             g = scale
//   linear:   Gamma(x) = sum_h C_h (S + m m^T) A_h x
//   sinkhorn: Gamma(x) = sum_h C_h (m + M_h (x - m)),  M_h = (A_h^T)^{-1} S^{-1} C_S (A_h -> A_h / epsilon),
//             C_S = 1/2 (S^{1/2} (4 S^{1/2} A_h^T S A_h S^{1/2} + I)^{1/2} S^{-1/2} - I)
// Sigmoid, causal masks, attention sinks and the sphere do not keep Gaussians Gaussian: asking for
// their closure is an InputError. Sinkhorn needs every A_h invertible (the formula inverts it).
//
// Softmax with C_h = I for every head and A = sum_h A_h: dS/dt = S (A + A^T) S, solved by
// S(t) = (S0^{-1} - t (A + A^T))^{-1}: blow-up at t* = 1 / lambda_max(S0^{1/2} (A + A^T) S0^{1/2})
// when that eigenvalue is positive; when A + A^T = -B^T B <= 0, S(t) -> S* = S0 - S0 B^T
// (B S0 B^T)^+ B S0 as t -> infinity (clustering: the rank drops to d - rank(B S0 B^T)).
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenflow/attention.hpp"
#include "tokenflow/run_spec.hpp"

namespace tokenflow {

// A Gaussian N(mean, cov): mean (d), cov (d x d, symmetric positive semidefinite).
struct GaussianMoments {
  Eigen::VectorXd mean;
  Eigen::MatrixXd cov;
};

// Gamma(x) = offset + slope x.
struct AffineField {
  Eigen::VectorXd offset;  // b, d
  Eigen::MatrixXd slope;   // M, d x d
};

// Throws InputError when `params` has no Gaussian closure (sigmoid, mask = causal, sink > 0,
// normalize = sphere) or, for sinkhorn, when some A_h is singular (key "attention.Q" or
// "layers[i].Q"; the message names K too).
void check_gaussian_closure(const AttentionParams& params);

// Throws InputError(key) unless `cov` is d x d, finite, symmetric and positive semidefinite (the
// same criteria as sample_gaussian) and `mean` is finite.
void check_gaussian(const GaussianMoments& g, const std::string& mean_key = "init.mean",
                    const std::string& cov_key = "init.cov");

// The closure's affine field and moment rates, precomputed per layer and head. Thread-safe (const).
class MomentField {
 public:
  explicit MomentField(const AttentionParams& params);  // calls check_gaussian_closure
  // The affine field of the layer active at time t over N(m, S).
  AffineField affine(double t, const Eigen::VectorXd& m, const Eigen::MatrixXd& S) const;
  // dm/dt = b + M m, dS/dt = M S + S M^T (symmetrized exactly).
  void rates(double t, const Eigen::VectorXd& m, const Eigen::MatrixXd& S, Eigen::VectorXd& dm,
             Eigen::MatrixXd& dS) const;
  const AttentionParams& params() const { return params_; }

 private:
  struct Head {
    Eigen::MatrixXd A, C;            // A_h = scale K^T Q (sinkhorn: / epsilon), C_h = W V
    Eigen::MatrixXd KtK2g, KtQ2g;    // l2: 2 g K^T K, 2 g K^T Q
  };
  AttentionParams params_;
  std::vector<std::vector<Head>> layers_;  // [layer][head]
  const std::vector<Head>& heads_at(double t) const;
};

// ---- reference (src/gaussian/reference.cpp) ----------------------------------------------------
// The formulas of docs/design.md section 1 written out literally (explicit inverses and matrix square roots
// through eigendecompositions), head by head: the oracle for MomentField.
AffineField reference_gaussian_field(const AttentionParams& params, double t, const Eigen::VectorXd& m,
                                     const Eigen::MatrixXd& S);
void reference_moment_rates(const AttentionParams& params, double t, const Eigen::VectorXd& m,
                            const Eigen::MatrixXd& S, Eigen::VectorXd& dm, Eigen::MatrixXd& dS);

// ---- the moment ODE (src/gaussian/solve.cpp) ----------------------------------------------------
struct GaussianRunSpec {
  // Uses T, dt (dopri5: first trial step; euler/rk4: the step), integrator, save_every, blowup
  // (on trace S), tol (dopri5: atol = rtol = tol), rank_tol.
  RunSpec run;
  // Status "converged" (and the run stops) when, in the last layer,
  //   |dm/dt|_2 <= converge_tol (1 + |m|_2)  and  |dS/dt|_F <= converge_tol (1 + |S|_F).
  double converge_tol = 1e-9;
  // save_every = 0: frames at the uniform grid t_j = j T / grid_frames (dopri5 shortens steps to
  // land on them; euler/rk4 save every max(1, steps / grid_frames) steps), plus the final state.
  int grid_frames = 100;
};

struct GaussianResult {
  // "blowup" | "converged" | "horizon" | "stalled" (dopri5's step fell below dopri5_step_floor
  // away from a singularity) | "failed" (non-finite moments, or the run ended before T):
  // `reason` says why for the last two.
  std::string status;
  std::string reason;
  std::optional<double> blowup_time;  // status "blowup": the refined singular time (see solve.cpp)
  double t_final = 0.0;               // time of the last state (the first one past `blowup`)
  long steps = 0, rejected_steps = 0;
  GaussianMoments final;
  std::vector<double> times;          // frames: initial, saved steps, final
  std::vector<Eigen::VectorXd> means;
  std::vector<Eigen::MatrixXd> covs;
  // Positive semidefiniteness, checked after every accepted step (S is symmetrized, never
  // projected): the most negative lambda_min(S) / (1 + lambda_max(S)) seen (0 if none), the
  // allowance for the integrator's error, and whether S left the cone by more than it.
  double psd_worst_relative_eigenvalue = 0.0;
  double psd_allowance = 0.0;
  bool left_psd_cone = false;
  double left_psd_cone_time = 0.0;
};

// Integrates the moment ODE from `initial`. Throws InputError for bad run settings
// (check_run_spec), for an attention without closure, for a bad initial Gaussian and for initial
// moments where the ODE is not computable (non-finite rates: key init.cov or init.mean) or that
// are already past run.blowup (trace S0 > blowup: key init.cov).
GaussianResult solve_moments(const AttentionParams& params, const GaussianRunSpec& spec,
                             const GaussianMoments& initial, const ProgressCallback& progress = {});

// ---- closed forms and predictions ---------------------------------------------------------------
// Number of eigenvalues of the symmetric S above rank_tol * its largest (0 when S = 0).
int covariance_rank(const Eigen::MatrixXd& S, double rank_tol);
// W_2 between Gaussians, wasserstein.hpp's bures_wasserstein_psd (psd_sqrt is wasserstein.hpp's too).
double bures_wasserstein(const GaussianMoments& a, const GaussianMoments& b);

// The matrix A = sum_h A_h when `params` is softmax with one layer and C_h = W_h V_h = I for every
// head (to 1e-12 relative): the case with the closed form S(t) = (S0^{-1} - t (A + A^T))^{-1}.
std::optional<Eigen::MatrixXd> identity_value_softmax_matrix(const AttentionParams& params);
// t* = 1 / lambda_max(S0^{1/2} (A + A^T) S0^{1/2}) in that case, when lambda_max > 0 (beyond
// rounding: 1e-12 of the largest eigenvalue magnitude).
std::optional<double> predicted_blowup_time(const AttentionParams& params, const Eigen::MatrixXd& S0);
// The clustering limit S* = S0 - S0 B^T (B S0 B^T)^+ B S0 in that case, when A + A^T = -B^T B is
// negative semidefinite (lambda_max(A + A^T) <= 1e-12 |A + A^T|). B is read off the
// eigendecomposition of -(A + A^T) (eigenvalues above 1e-12 of the largest).
struct ClusteringPrediction {
  Eigen::MatrixXd cov;
  int rank = 0;
};
std::optional<ClusteringPrediction> predicted_clustering_limit(const AttentionParams& params,
                                                               const Eigen::MatrixXd& S0, double rank_tol);
// The closed form S(t) = (S0^{-1} - t (A + A^T))^{-1} (S0 invertible; before blow-up).
Eigen::MatrixXd closed_form_covariance(const Eigen::MatrixXd& A, const Eigen::MatrixXd& S0, double t);

}  // namespace tokenflow
