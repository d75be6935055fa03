// Wasserstein distances: exact (network simplex), 1-D by sorting, Bures-Wasserstein for
// Gaussians, conditional W_p for measures with positions, and the size-based choice between them.
#include "tokenflow/wasserstein.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <vector>

#include "tokenflow/error.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/ot_solve.hpp"
#include "parallel_pairs.hpp"
#include "tokenflow/measure.hpp"
#include "tokenflow/memory_budget.hpp"

namespace tokenflow {

namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void check_p(double p) {
  if (!(p >= 1.0) || !std::isfinite(p)) throw InputError("", "p", "must be a finite number >= 1");
}

// Normalized weights: uniform when empty; otherwise finite, non-negative (empty bins allowed, as
// in make_transport_measure), of size n, with a positive sum.
Eigen::VectorXd normalized(const Eigen::VectorXd& w, Eigen::Index n, const char* key) {
  if (w.size() == 0) return Eigen::VectorXd::Constant(n, 1.0 / static_cast<double>(n));
  if (w.size() != n)
    throw InputError(
        "", key,
        "has " + std::to_string(w.size()) + " entries for " + std::to_string(n) + " points");
  for (double v : w)
    if (!(v >= 0.0) || !std::isfinite(v))
      throw InputError("", key, "weights must be finite and non-negative");
  if (!(w.maxCoeff() > 0.0)) throw InputError("", key, "weights are all zero: there is no mass to transport");
  return normalized_weights(w);
}

double distance_power(const double* x, const double* y, Eigen::Index d, double p) {
  double s = 0.0;
  for (Eigen::Index c = 0; c < d; ++c) s += (x[c] - y[c]) * (x[c] - y[c]);
  if (p == 2.0) return s;
  if (p == 1.0) return std::sqrt(s);
  return std::pow(s, 0.5 * p);
}

double entropy(const Eigen::VectorXd& w) {
  double h = 0.0;
  for (double v : w) h -= v * std::log(v);
  return h;
}

// Symmetrized S, checked symmetric positive semidefinite to within 1e-10 relative.
Eigen::MatrixXd checked_covariance(const Eigen::MatrixXd& S, Eigen::Index d, const char* key) {
  if (S.rows() != d || S.cols() != d)
    throw InputError("", key,
                     "is " + std::to_string(S.rows()) + " x " + std::to_string(S.cols()) +
                         ", expected " + std::to_string(d) + " x " + std::to_string(d));
  if (!S.allFinite()) throw InputError("", key, "has a non-finite entry");
  const double scale = std::max(S.cwiseAbs().maxCoeff(), 1e-300);
  if ((S - S.transpose()).cwiseAbs().maxCoeff() > 1e-10 * scale)
    throw InputError("", key, "is not symmetric");
  return 0.5 * (S + S.transpose());
}

// Throws InputError (key) when the symmetric S has an eigenvalue below -1e-10 of its largest
// magnitude (beyond rounding).
void check_positive_semidefinite(const Eigen::MatrixXd& S, const char* key) {
  const Eigen::VectorXd lambda = linalg::symmetric_eigenvalues(S);
  const double scale = std::max(lambda.cwiseAbs().maxCoeff(), 1e-300);
  if (lambda.minCoeff() < -1e-10 * scale) throw InputError("", key, "is not positive semidefinite");
}

// The argument whose costs overflow names the cloud with the larger coordinates ("x" or "y"; "x"
// when x is not finite): the one a user rescales.
std::string larger_points(const Points<double>& x, const Points<double>& y) {
  const double mx = x.size() ? x.cwiseAbs().maxCoeff() : 0.0;
  const double my = y.size() ? y.cwiseAbs().maxCoeff() : 0.0;
  return !std::isfinite(mx) || mx >= my ? "x" : "y";
}

}  // namespace

RowMatrix power_cost_matrix(const Points<double>& x, const Points<double>& y, double p) {
  check_p(p);
  if (x.cols() != y.cols())
    throw InputError("", "y",
                     "points of dimension " + std::to_string(y.cols()) +
                         " cannot be compared with points of dimension " +
                         std::to_string(x.cols()));
  RowMatrix C(x.rows(), y.rows());
#pragma omp parallel for schedule(dynamic, pair_chunk(static_cast<double>(y.rows()))) \
    if (parallel_pairs(static_cast<double>(x.rows() * y.rows())))
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index j = 0; j < y.rows(); ++j)
      C(i, j) = distance_power(&x(i, 0), &y(j, 0), x.cols(), p);
  return C;
}

// Refuses, before they are allocated, the two n x m float64 matrices of a dense or exact W_p (the
// cost matrix, and C^T or the exact plan) when they do not fit in memory (memory_budget.hpp).
void check_two_matrices_fit(Eigen::Index n, Eigen::Index m, const char* what, const char* key) {
  check_memory(16.0L * static_cast<long double>(n) * static_cast<long double>(m),
               fmt::format("{} of {} x {} points", what, n, m), "", key, "use fewer points");
}

void check_exact_wasserstein_fits(Eigen::Index n, Eigen::Index m) {
  check_two_matrices_fit(n, m, "exact W_p (its cost matrix and plan, in float64)", "method");
}

double wasserstein_exact(const Points<double>& x, const Points<double>& y, const Eigen::VectorXd& a,
                         const Eigen::VectorXd& b, double p) {
  check_exact_wasserstein_fits(x.rows(), y.rows());
  const RowMatrix C = power_cost_matrix(x, y, p);
  check_cost_range(C.allFinite() ? C.cwiseAbs().maxCoeff() : INFINITY, 0.0, larger_points(x, y));
  const ExactOTResult r = exact_ot(C, normalized(a, x.rows(), "a"), normalized(b, y.rows(), "b"));
  return std::pow(std::max(r.cost, 0.0), 1.0 / p);
}

double wasserstein_1d(const Eigen::VectorXd& x, const Eigen::VectorXd& y, const Eigen::VectorXd& a,
                      const Eigen::VectorXd& b, double p) {
  check_p(p);
  if (x.size() == 0 || y.size() == 0) throw InputError("", "points", "need at least one point");
  if (!x.allFinite() || !y.allFinite()) throw InputError("", "points", "non-finite value");
  const Eigen::VectorXd wa = normalized(a, x.size(), "a"), wb = normalized(b, y.size(), "b");
  auto order = [](const Eigen::VectorXd& v) {
    std::vector<Eigen::Index> idx(static_cast<std::size_t>(v.size()));
    std::iota(idx.begin(), idx.end(), Eigen::Index{0});
    std::stable_sort(idx.begin(), idx.end(),
                     [&](Eigen::Index i, Eigen::Index j) { return v[i] < v[j]; });
    return idx;
  };
  const auto ix = order(x), iy = order(y);
  // Walk the two quantile functions together: each step moves the mass min(left_a, left_b)
  // between the current atoms (one of the two is then exactly zero) and advances past every atom
  // that is used up. Rounding leaves at most O((n + m) u) of mass unmatched at the end.
  std::size_t i = 0, j = 0;
  double left_a = wa[ix[0]], left_b = wb[iy[0]], total = 0.0;
  while (i < ix.size() && j < iy.size()) {
    const double mass = std::min(left_a, left_b);
    total += mass * std::pow(std::abs(x[ix[i]] - y[iy[j]]), p);
    left_a -= mass;
    left_b -= mass;
    if (left_a <= 0.0 && ++i < ix.size()) left_a = wa[ix[i]];
    if (left_b <= 0.0 && ++j < iy.size()) left_b = wb[iy[j]];
  }
  return std::pow(std::max(total, 0.0), 1.0 / p);
}

Eigen::MatrixXd psd_sqrt(const Eigen::MatrixXd& S) {
  const linalg::SymmetricEigen eig = linalg::symmetric_eigen(0.5 * (S + S.transpose()));
  return eig.vectors * eig.values.cwiseMax(0.0).cwiseSqrt().asDiagonal() * eig.vectors.transpose();
}

double bures_wasserstein_psd(const Eigen::VectorXd& m1, const Eigen::MatrixXd& S1_in, const Eigen::VectorXd& m2,
                             const Eigen::MatrixXd& S2_in) {
  const Eigen::MatrixXd S1 = 0.5 * (S1_in + S1_in.transpose()), S2 = 0.5 * (S2_in + S2_in.transpose());
  const Eigen::MatrixXd R = psd_sqrt(S1);
  Eigen::MatrixXd M = R * S2 * R;
  M = 0.5 * (M + M.transpose());
  const double cross = linalg::symmetric_eigenvalues(M).cwiseMax(0.0).cwiseSqrt().sum();
  const double w2 = (m1 - m2).squaredNorm() + S1.trace() + S2.trace() - 2.0 * cross;
  return std::sqrt(std::max(w2, 0.0));
}

double bures_wasserstein(const Eigen::VectorXd& m1, const Eigen::MatrixXd& S1_in,
                         const Eigen::VectorXd& m2, const Eigen::MatrixXd& S2_in) {
  const Eigen::Index d = m1.size();
  if (m2.size() != d)
    throw InputError(
        "", "m2", "has dimension " + std::to_string(m2.size()) + ", expected " + std::to_string(d));
  if (!m1.allFinite() || !m2.allFinite()) throw InputError("", "mean", "has a non-finite entry");
  const Eigen::MatrixXd S1 = checked_covariance(S1_in, d, "S1"),
                        S2 = checked_covariance(S2_in, d, "S2");
  check_positive_semidefinite(S1, "S1");
  check_positive_semidefinite(S2, "S2");
  return bures_wasserstein_psd(m1, S1, m2, S2);
}

double reference_bures_wasserstein(const Eigen::VectorXd& m1, const Eigen::MatrixXd& S1,
                                   const Eigen::VectorXd& m2, const Eigen::MatrixXd& S2) {
  const Eigen::VectorXcd lambda = linalg::eigenvalues(S1 * S2);
  double cross = 0.0;
  for (Eigen::Index k = 0; k < lambda.size(); ++k) cross += std::sqrt(std::max(lambda[k].real(), 0.0));
  const double w2 = (m1 - m2).squaredNorm() + S1.trace() + S2.trace() - 2.0 * cross;
  return std::sqrt(std::max(w2, 0.0));
}

double conditional_wasserstein(const Measure<double>& mu, const Measure<double>& nu, double p) {
  check_p(p);
  if (!mu.has_positions() || !nu.has_positions())
    throw InputError("", "positions", "conditional W_p needs positions for both measures");
  if (mu.d() != nu.d())
    throw InputError("", "y",
                     "points of dimension " + std::to_string(nu.d()) +
                         " cannot be compared with points of dimension " + std::to_string(mu.d()));
  // Tokens grouped by position (exact comparison), in increasing position.
  auto group = [](const Measure<double>& m) {
    std::map<double, std::vector<Eigen::Index>> g;
    for (Eigen::Index i = 0; i < m.n(); ++i) g[m.positions[i]].push_back(i);
    return g;
  };
  const auto gx = group(mu), gy = group(nu);
  auto missing = [](double r, const char* where) {
    return InputError("", "positions", fmt::format("position {:g} has tokens in {} only", r, where));
  };
  for (const auto& [r, idx] : gy)
    if (!gx.count(r)) throw missing(r, "nu");
  double total = 0.0;
  for (const auto& [r, ix] : gx) {
    const auto it = gy.find(r);
    if (it == gy.end()) throw missing(r, "mu");
    const auto& iy = it->second;
    Points<double> xr(static_cast<Eigen::Index>(ix.size()), mu.d()),
        yr(static_cast<Eigen::Index>(iy.size()), nu.d());
    Eigen::VectorXd ar(xr.rows()), br(yr.rows());
    for (Eigen::Index k = 0; k < xr.rows(); ++k) {
      xr.row(k) = mu.points.row(ix[static_cast<std::size_t>(k)]);
      ar[k] = mu.weights[ix[static_cast<std::size_t>(k)]];
    }
    for (Eigen::Index k = 0; k < yr.rows(); ++k) {
      yr.row(k) = nu.points.row(iy[static_cast<std::size_t>(k)]);
      br[k] = nu.weights[iy[static_cast<std::size_t>(k)]];
    }
    const double lambda = ar.sum();
    if (std::abs(lambda - br.sum()) > 1e-9)
      throw InputError("", "positions",
                       fmt::format("the positional marginals differ at position {:g} ({:g} vs {:g})", r, lambda,
                                   br.sum()));
    if (lambda == 0.0 && br.sum() == 0.0) continue;  // a position whose tokens are all empty bins
    const double w = mu.d() == 1 ? wasserstein_1d(xr.col(0), yr.col(0), ar, br, p)
                                 : wasserstein_exact(xr, yr, ar, br, p);
    total += lambda * std::pow(w, p);
  }
  return std::pow(total, 1.0 / p);
}

const char* to_string(WassersteinMethod method) {
  switch (method) {
    case WassersteinMethod::automatic:
      return "auto";
    case WassersteinMethod::exact:
      return "exact";
    case WassersteinMethod::sorted:
      return "sorted";
    case WassersteinMethod::sinkhorn:
      return "sinkhorn";
  }
  return "?";
}

WassersteinMethod wasserstein_method_from_string(const std::string& s) {
  if (s == "auto") return WassersteinMethod::automatic;
  if (s == "exact") return WassersteinMethod::exact;
  if (s == "sorted") return WassersteinMethod::sorted;
  if (s == "sinkhorn") return WassersteinMethod::sinkhorn;
  throw InputError("", "method",
                   "unknown method '" + s + "'; one of: auto, exact, sorted, sinkhorn");
}

namespace {

// 1e-2 (E_{a x b} |x - y|^2)^{p/2}, the scale of the cost (when WassersteinOptions's
// sinkhorn.epsilon <= 0), with E_{a x b} |x - y|^2 = sum a_i |x_i|^2 + sum b_j |y_j|^2 - 2
// <mean_x, mean_y>.
double automatic_epsilon(const Measure<double>& mu, const Measure<double>& nu, double p) {
  const Eigen::VectorXd mx = mu.points.transpose() * mu.weights,
                        my = nu.points.transpose() * nu.weights;
  const double second = mu.weights.dot(mu.points.rowwise().squaredNorm()) +
                        nu.weights.dot(nu.points.rowwise().squaredNorm()) - 2.0 * mx.dot(my);
  return 1e-2 * std::pow(std::max(second, 1e-300), 0.5 * p);
}

// W_p by entropic OT on the cost |x - y|^p (n m = pairs), into r: the dense operator up to
// options.dense_max_pairs, else the online one (p = 1, 2); throws NumericalFailure when the
// Sinkhorn result is not one (sinkhorn_result_defect).
void sinkhorn_wasserstein(const Measure<double>& mu, const Measure<double>& nu, double p, long long pairs,
                          const WassersteinOptions& options, WassersteinResult& r) {
  SinkhornOptions so = options.sinkhorn;
  if (!(so.epsilon > 0.0)) so.epsilon = automatic_epsilon(mu, nu, p);
  std::unique_ptr<SoftMin> op;
  if (pairs <= options.dense_max_pairs) {
    check_two_matrices_fit(mu.n(), nu.n(), "the dense operator's cost matrix and its transpose (float64)",
                           "dense_max_pairs");
    op = std::make_unique<DenseSoftMin>(power_cost_matrix(mu.points, nu.points, p));
  }
  else if (p == 1.0 || p == 2.0)
    op = std::make_unique<OnlineSoftMin>(mu.points, nu.points,
                                         p == 2.0 ? CostKind::sqeuclidean : CostKind::euclidean);
  else
    throw InputError("", "p",
                     "Sinkhorn beyond " + std::to_string(options.dense_max_pairs) +
                         " pairs (the online operator) supports p = 1 and p = 2 only");
  const double magnitude = op->cost_magnitude();
  check_cost_range(magnitude, so.epsilon, larger_points(mu.points, nu.points));
  so.epsilon_start = automatic_epsilon_start(*op, so.epsilon);
  r.sinkhorn = sinkhorn(*op, mu.weights, nu.weights, so);
  const std::string defect = sinkhorn_result_defect(r.sinkhorn, mu.weights, nu.weights, magnitude, so.epsilon);
  if (!defect.empty()) throw NumericalFailure(defect);
  r.value = std::pow(std::max(r.sinkhorn.cost, 0.0), 1.0 / p);
  r.epsilon = so.epsilon;
  r.entropic_bias_bound = so.epsilon * std::min(entropy(mu.weights), entropy(nu.weights));
}

}  // namespace

WassersteinResult wasserstein(const Measure<double>& mu, const Measure<double>& nu, double p,
                              const WassersteinOptions& options) {
  check_p(p);
  if (mu.d() != nu.d())
    throw InputError("", "y",
                     "points of dimension " + std::to_string(nu.d()) +
                         " cannot be compared with points of dimension " + std::to_string(mu.d()));
  const long long pairs = static_cast<long long>(mu.n()) * static_cast<long long>(nu.n());
  WassersteinResult r;
  r.p = p;
  r.method = options.method;
  if (r.method == WassersteinMethod::automatic)
    r.method = mu.d() == 1                        ? WassersteinMethod::sorted
               : pairs <= options.exact_max_pairs ? WassersteinMethod::exact
                                                  : WassersteinMethod::sinkhorn;
  switch (r.method) {
    case WassersteinMethod::sorted:
      if (mu.d() != 1) throw InputError("", "method", "sorted needs points of dimension 1");
      r.value = wasserstein_1d(mu.points.col(0), nu.points.col(0), mu.weights, nu.weights, p);
      return r;
    case WassersteinMethod::exact:
      r.value = wasserstein_exact(mu.points, nu.points, mu.weights, nu.weights, p);
      return r;
    default:
      break;
  }
  sinkhorn_wasserstein(mu, nu, p, pairs, options, r);
  return r;
}

}  // namespace tokenflow
