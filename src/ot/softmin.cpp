// Soft-min operators: dense (C held) and online (C recomputed from the points in tiles).
//   rows: out_i = -eps log sum_j exp(h_j - C_ij / eps)
//   cols: out_j = -eps log sum_i exp(h_i - C_ij / eps)
// Each log-sum-exp is taken with a running maximum over tiles, so it neither overflows nor
// underflows for any eps. Parallel over outputs; each output's sum has a fixed order.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "../simd/exp.hpp"
#include "../simd/sum.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {

const char* to_string(CostKind cost) {
  switch (cost) {
    case CostKind::sqeuclidean: return "sqeuclidean";
    case CostKind::euclidean: return "euclidean";
    case CostKind::dot: return "dot";
  }
  return "?";
}

CostKind cost_kind_from_string(const std::string& s) {
  if (s == "sqeuclidean") return CostKind::sqeuclidean;
  if (s == "euclidean") return CostKind::euclidean;
  if (s == "dot") return CostKind::dot;
  throw InputError("", "cost", "unknown cost '" + s + "'; one of: sqeuclidean, euclidean, dot");
}

double pair_cost(CostKind cost, const double* x, const double* y, Eigen::Index p) {
  double s = 0.0;
  if (cost == CostKind::dot) {
    for (Eigen::Index c = 0; c < p; ++c) s += x[c] * y[c];
    return -s;
  }
  for (Eigen::Index c = 0; c < p; ++c) s += (x[c] - y[c]) * (x[c] - y[c]);
  return cost == CostKind::sqeuclidean ? s : std::sqrt(s);
}

namespace {

constexpr int kTile = 256;
// Below this many pairs a soft-min runs on one thread: a parallel region costs microseconds, far
// more under a loaded machine (spinning threads), and small problems (attention with a few dozen
// tokens, tests) call the soft-min thousands of times.
[[maybe_unused]] constexpr Eigen::Index kParallelMinPairs = 1 << 15;  // unused without OpenMP
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Running log-sum-exp over tiles of z_j, where z_j = value(j) is produced on demand.
template <class Value>
double streaming_logsumexp(Eigen::Index count, const Value& value) {
  double running_max = kNegInf, total = 0.0;
  std::array<double, kTile> z;
  for (Eigen::Index j0 = 0; j0 < count; j0 += kTile) {
    const int len = static_cast<int>(std::min<Eigen::Index>(kTile, count - j0));
    double tile_max = kNegInf;
    for (int jj = 0; jj < len; ++jj) {
      z[jj] = value(j0 + jj);
      tile_max = std::max(tile_max, z[jj]);
    }
    if (tile_max == kNegInf) continue;
    if (tile_max > running_max) {
      total *= std::exp(running_max - tile_max);
      running_max = tile_max;
    }
    // simd::exp_poly (within 2 ulp, src/simd/exp.hpp) vectorizes; std::exp is a call per term.
    // The sum in a fixed order (simd/sum.hpp): the same bits at any address.
    const double shift = running_max;
    const double* zz = z.data();
    total += simd::ordered_sum(len, [&](int jj) { return simd::exp_poly(zz[jj] - shift); });
  }
  return running_max + std::log(total);
}

}  // namespace

// ---- dense ----------------------------------------------------------------------------------
DenseSoftMin::DenseSoftMin(Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> cost)
    : cost_(std::move(cost)) {}

const DenseSoftMin::Matrix& DenseSoftMin::transposed() const {
  std::call_once(transposed_once_, [this] {
    // C^T in 64 x 64 tiles (a plain transposing copy of a large matrix misses the cache on every
    // write: 0.5 s at 4000^2); a copy, so the entries are exactly C's.
    constexpr Eigen::Index kBlock = 64;
    const Eigen::Index n = cost_.rows(), m = cost_.cols();
    cost_t_.resize(m, n);
#pragma omp parallel for schedule(static) if (n * m >= kParallelMinPairs)
    for (Eigen::Index i0 = 0; i0 < n; i0 += kBlock)
      for (Eigen::Index j0 = 0; j0 < m; j0 += kBlock)
        for (Eigen::Index i = i0; i < std::min(n, i0 + kBlock); ++i)
          for (Eigen::Index j = j0; j < std::min(m, j0 + kBlock); ++j) cost_t_(j, i) = cost_(i, j);
  });
  return cost_t_;
}

void DenseSoftMin::softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  const Eigen::Index n = cost_.rows(), m = cost_.cols();
  out.resize(n);
  const double inv = 1.0 / eps;
#pragma omp parallel for schedule(static) if (rows() * cols() >= kParallelMinPairs)
  for (Eigen::Index i = 0; i < n; ++i) {
    const double* c = &cost_(i, 0);
    out[i] = -eps * streaming_logsumexp(m, [&](Eigen::Index j) { return h[j] - c[j] * inv; });
  }
}

void DenseSoftMin::softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  const Eigen::Index n = cost_.rows(), m = cost_.cols();
  out.resize(m);
  const double inv = 1.0 / eps;
  const Matrix& cost_t = transposed();
#pragma omp parallel for schedule(static) if (rows() * cols() >= kParallelMinPairs)
  for (Eigen::Index j = 0; j < m; ++j) {
    const double* c = &cost_t(j, 0);
    out[j] = -eps * streaming_logsumexp(n, [&](Eigen::Index i) { return h[i] - c[i] * inv; });
  }
}

void DenseSoftMin::for_each_row(const std::function<void(Eigen::Index, const double*)>& visit) const {
#pragma omp parallel for schedule(static) if (rows() * cols() >= kParallelMinPairs)
  for (Eigen::Index i = 0; i < cost_.rows(); ++i) visit(i, &cost_(i, 0));
}

double DenseSoftMin::cost_range() const {
  return cost_.size() == 0 ? 0.0 : cost_.maxCoeff() - cost_.minCoeff();
}

double DenseSoftMin::cost_magnitude() const {
  if (cost_.size() == 0) return 0.0;
  return cost_.allFinite() ? cost_.cwiseAbs().maxCoeff() : std::numeric_limits<double>::infinity();
}

// ---- online ---------------------------------------------------------------------------------
OnlineSoftMin::OnlineSoftMin(PointMatrix x, PointMatrix y, CostKind cost)
    : x_(std::move(x)), y_(std::move(y)), cost_(cost) {
  if (x_.cols() != y_.cols())
    throw InputError("", "y", "points of dimension " + std::to_string(y_.cols()) +
                                  " cannot be compared with points of dimension " + std::to_string(x_.cols()));
}

double OnlineSoftMin::cost_range() const {
  if (x_.rows() == 0 || y_.rows() == 0) return 0.0;
  if (cost_ == CostKind::dot)  // -<x, y> lies in [-|x| |y|, |x| |y|]
    return 2.0 * x_.rowwise().norm().maxCoeff() * y_.rowwise().norm().maxCoeff();
  const Eigen::RowVectorXd lo = x_.colwise().minCoeff().cwiseMin(y_.colwise().minCoeff());
  const Eigen::RowVectorXd hi = x_.colwise().maxCoeff().cwiseMax(y_.colwise().maxCoeff());
  const double diameter2 = (hi - lo).squaredNorm();
  return cost_ == CostKind::sqeuclidean ? diameter2 : std::sqrt(diameter2);
}

double OnlineSoftMin::cost_magnitude() const {
  if (!x_.allFinite() || !y_.allFinite()) return std::numeric_limits<double>::infinity();
  return cost_ == CostKind::dot ? 0.5 * cost_range() : cost_range();
}

void OnlineSoftMin::softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  const Eigen::Index n = x_.rows(), m = y_.rows(), p = x_.cols();
  out.resize(n);
  const double inv = 1.0 / eps;
#pragma omp parallel for schedule(static) if (rows() * cols() >= kParallelMinPairs)
  for (Eigen::Index i = 0; i < n; ++i) {
    const double* xi = &x_(i, 0);
    out[i] = -eps * streaming_logsumexp(
                        m, [&](Eigen::Index j) { return h[j] - pair_cost(cost_, xi, &y_(j, 0), p) * inv; });
  }
}

void OnlineSoftMin::softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  const Eigen::Index n = x_.rows(), m = y_.rows(), p = x_.cols();
  out.resize(m);
  const double inv = 1.0 / eps;
#pragma omp parallel for schedule(static) if (rows() * cols() >= kParallelMinPairs)
  for (Eigen::Index j = 0; j < m; ++j) {
    const double* yj = &y_(j, 0);
    out[j] = -eps * streaming_logsumexp(
                        n, [&](Eigen::Index i) { return h[i] - pair_cost(cost_, &x_(i, 0), yj, p) * inv; });
  }
}

const double* OnlineSoftMin::cost_row(Eigen::Index i, double* buffer) const {
  const Eigen::Index m = y_.rows(), p = x_.cols();
  for (Eigen::Index j = 0; j < m; ++j) buffer[j] = pair_cost(cost_, &x_(i, 0), &y_(j, 0), p);
  return buffer;
}

void OnlineSoftMin::for_each_row(const std::function<void(Eigen::Index, const double*)>& visit) const {
  const Eigen::Index n = x_.rows(), m = y_.rows(), p = x_.cols();
#pragma omp parallel if (rows() * cols() >= kParallelMinPairs)
  {
    std::vector<double> row(static_cast<std::size_t>(m));
#pragma omp for schedule(static)
    for (Eigen::Index i = 0; i < n; ++i) {
      for (Eigen::Index j = 0; j < m; ++j) row[static_cast<std::size_t>(j)] = pair_cost(cost_, &x_(i, 0), &y_(j, 0), p);
      visit(i, row.data());
    }
  }
}

}  // namespace tokenflow
