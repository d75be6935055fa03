// Shared helpers for the C++ tests: fresh random inputs, relative errors, running the CLI.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tokenflow/attention.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/measure.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow::testing {

// Unit roundoffs of float64 and float32, and the float64 machine epsilon (2 kUnit64): the units in
// which the tests derive their tolerances.
constexpr double kUnit64 = 0x1p-53, kUnit32 = 0x1p-24;
constexpr double kEps = std::numeric_limits<double>::epsilon();

inline double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// A fresh seed per run (printed, so a failure can be replayed with TOKENFLOW_TEST_SEED).
inline std::uint64_t fresh_seed() {
  static const std::uint64_t base = [] {
    if (const char* s = std::getenv("TOKENFLOW_TEST_SEED")) return static_cast<std::uint64_t>(std::stoull(s));
    const auto t = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    std::printf("[ tokenflow ] random seed base %llu (set TOKENFLOW_TEST_SEED to replay)\n",
                static_cast<unsigned long long>(t));
    return t;
  }();
  static std::uint64_t counter = 0;
  return base + 7919 * (++counter);
}

inline Eigen::MatrixXd random_matrix(std::mt19937_64& rng, Eigen::Index r, Eigen::Index c, double sd) {
  std::normal_distribution<double> normal(0.0, sd);
  Eigen::MatrixXd m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

inline Measure<double> random_measure(std::mt19937_64& rng, Eigen::Index n, Eigen::Index d, bool weighted,
                                      bool with_positions = false) {
  Points<double> x = random_matrix(rng, n, d, 1.0);
  Eigen::VectorXd a, pos;
  std::uniform_real_distribution<double> uni(0.5, 1.5), unit(0.0, 1.0);
  if (weighted) {
    a.resize(n);
    for (auto& v : a) v = uni(rng);
  }
  if (with_positions) {
    pos.resize(n);
    for (auto& v : pos) v = unit(rng);
  }
  return make_measure<double>(std::move(x), std::move(a), std::move(pos));
}

// Weights drawn from U(0.5, 1.5), normalized to sum 1.
inline Eigen::VectorXd random_weights(std::mt19937_64& rng, Eigen::Index n) {
  std::uniform_real_distribution<double> uni(0.5, 1.5);
  Eigen::VectorXd w(n);
  for (auto& v : w) v = uni(rng);
  return w / w.sum();
}

// The condition number of the Schur system that the implicit Sinkhorn backward solves
// (layers.hpp, plan_adjoint.hpp), for the plan exp(log_plan) (n x m, row-major): the amplification
// of that solve's rounding, and of the plan's own stopping error, in the gradient. The larger of
// two: the leading block that plan_adjoint factors (the Schur complement S onto the smaller side,
// without its last row and column: the gauge), and S made definite by mean(b) 1 1^T, whose
// smallest eigenvalue is S's smallest on the gradient's directions (orthogonal to the gauge).
inline double schur_condition(const double* log_plan, Eigen::Index n, Eigen::Index m) {
  using Rows = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Rows P = Eigen::Map<const Rows>(log_plan, n, m).array().exp();
  const Rows Q = m <= n ? Rows(P) : Rows(P.transpose());  // eliminate the larger side's rows
  const Eigen::VectorXd r = Q.rowwise().sum(), b = Q.colwise().sum().transpose();
  Eigen::MatrixXd S = -(Q.transpose() * r.cwiseInverse().asDiagonal() * Q);
  S.diagonal() += b;
  const auto condition = [](const Eigen::MatrixXd& M) {
    const Eigen::VectorXd ev = linalg::symmetric_eigenvalues(M);
    return ev.cwiseAbs().maxCoeff() / ev.cwiseAbs().minCoeff();
  };
  const Eigen::Index k = S.rows();
  const double block = k > 1 ? condition(S.topLeftCorner(k - 1, k - 1)) : 1.0;
  S.array() += b.mean();
  return std::max(block, condition(S));
}

// How far a Sinkhorn plan's entries move, relative, when its marginals or its costs are off. To
// first order a marginal residual r moves the dual potentials by eps H^+ r, H = [[diag(P 1), P],
// [P^T, diag(P^T 1)]] (the dual's Hessian times -eps; its null vector v = (1_n, -1_m) is the gauge
// f + c, g - c, and r is orthogonal to it when both marginals have the same mass), so
// P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps) moves by the relative (H^+ r)_i + (H^+ r)_{n+j}.
//  - per_marginal_l1: a residual with |r|_1 <= e (where a solver stops) moves an entry by at most
//    2 max|H^+| e.
//  - per_logit: costs off by at most delta (rounding) move an entry by at most
//    per_logit delta / eps: delta / eps directly, and through the residual they make, at most
//    delta / eps times P's own marginals m = (P 1, P^T 1) entry by entry, another
//    2 max_k sum_l |H^+_kl| m_l delta / eps.
// Both are about 1 / min(a, b) and 1 on a well-mixed plan, and grow with H's condition on a nearly
// block-diagonal one (clusters the cost barely connects, at a small epsilon): there a small
// marginal error leaves the blocks' potentials loosely tied.
struct SinkhornPlanSensitivity {
  double per_marginal_l1 = 0.0, per_logit = 0.0;
};
inline SinkhornPlanSensitivity sinkhorn_plan_sensitivity(const Eigen::MatrixXd& P) {
  const Eigen::Index n = P.rows(), m = P.cols(), size = n + m;
  Eigen::VectorXd marginals(size);
  marginals << P.rowwise().sum(), P.colwise().sum().transpose();
  // H^+ = Pi (H + s v v^T)^{-1} Pi, Pi the projection orthogonal to the unit v, for any s > 0
  // (the gauged Hessian of the library's reference); Pi M Pi = M - v (M v)^T - (M v) v^T +
  // (v^T M v) v v^T for the symmetric M: rank-one updates.
  Eigen::VectorXd v(size);
  v << Eigen::VectorXd::Ones(n), -Eigen::VectorXd::Ones(m);
  v /= std::sqrt(static_cast<double>(size));
  const Eigen::MatrixXd M = linalg::inverse(reference_gauged_dual_hessian(P));
  const Eigen::VectorXd Mv = M * v;
  const double vMv = v.dot(Mv);
  double largest = 0.0, largest_weighted_row = 0.0;
  for (Eigen::Index k = 0; k < size; ++k) {
    double weighted_row = 0.0;
    for (Eigen::Index l = 0; l < size; ++l) {
      const double entry = std::abs(M(k, l) - v[k] * Mv[l] - Mv[k] * v[l] + vMv * v[k] * v[l]);
      largest = std::max(largest, entry);
      weighted_row += entry * marginals[l];
    }
    largest_weighted_row = std::max(largest_weighted_row, weighted_row);
  }
  return {2.0 * largest, 1.0 + 2.0 * largest_weighted_row};
}

// max |a - b| / max |b|
template <class A, class B>
double relative_error(const A& got, const B& want) {
  const double scale = std::max(1e-300, want.template cast<double>().cwiseAbs().maxCoeff());
  return (got.template cast<double>() - want.template cast<double>()).cwiseAbs().maxCoeff() / scale;
}

struct CliResult {
  int exit_code;
  std::string stderr_text;
};

// Runs `build/tokenflow args` with stderr captured.
CliResult run_cli(const std::string& args);

std::filesystem::path temp_dir(const std::string& name);

// The whole content of a file ("" when it cannot be read).
std::string read_file_bytes(const std::filesystem::path& path);

// A row-major matrix or a vector saved as float64 .npy (C order).
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
void save_npy(const std::filesystem::path& path, const RowMatrix& m);
void save_npy(const std::filesystem::path& path, const Eigen::VectorXd& v);

// C_ij = pair_cost(cost, x_i, y_j): the dense cost matrix, written as plain loops.
RowMatrix cost_matrix(CostKind cost, const RowMatrix& x, const RowMatrix& y);

// The summary.json of an output folder.
nlohmann::json read_summary(const std::filesystem::path& dir);

// The entries of an output folder, without the manifest (.tokenflow-outputs) that every run writes.
long output_entries(const std::filesystem::path& dir);

}  // namespace tokenflow::testing
