// Soft-min operators: dense (C held) and online (C recomputed from the points in tiles: the tiled
// sweep of src/kernel/sweep.hpp for sqeuclidean and dot costs, a streaming log-sum-exp for
// euclidean).
//   rows: out_i = -eps log sum_j exp(h_j - C_ij / eps)
//   cols: out_j = -eps log sum_i exp(h_i - C_ij / eps)
// Each log-sum-exp is taken with a running maximum over tiles, so it neither overflows nor
// underflows for any eps. Parallel over outputs; each output's sum has a fixed order.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include <omp.h>

#include "../kernel/sweep.hpp"
#include "../simd/exp.hpp"
#include "../simd/sum.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/ot.hpp"
#include "parallel_pairs.hpp"

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

// ---- online, in the tiled sweep ---------------------------------------------------------------
// out_i = -eps log sum_j exp(h_j - C_ij / eps) for C_ij = c(q_i, k_j), q (n x p) against k (m x p),
// as the log-partition of the normalized tiled sweep (src/kernel/sweep.hpp: tiles,
// register blocks, the fused simd::exp_poly, a running maximum per row), with the cost and h
// folded into the kernel's logit through one extra coordinate (H = max_j h_j, so H - h_j >= 0):
//   sqeuclidean  squared-distance form, q'_i = (q_i / sqrt(eps), 0), k'_j = (k_j / sqrt(eps), sqrt(H - h_j)):
//                -|q'_i - k'_j|^2 = h_j - H - |q_i - k_j|^2 / eps
//   dot          inner-product form, q'_i = (q_i / eps, 1), k'_j = (k_j, h_j - H):
//                <q'_i, k'_j> = h_j - H + <q_i, k_j> / eps
// so out_i = -eps (H + log_partition_i). The squared distance is formed from the differences (no
// cancellation of |q|^2 + |k|^2 - 2 <q, k>), so a logit carries a few roundings of its own size:
// with T = double, (p + 4) u (|q_i - k_j|^2 / eps + H - h_j) plus those of the centred, scaled
// coordinates (3 u |q_ic - k_jc| (|q_ic - z_c| + |k_jc - z_c|) / eps, z the centre below);
// tests/cpp/test_ot_online.cpp checks the bound against plain double loops. A key with h_j = -inf (an empty bin) adds an exact zero and is left
// out; when all are, out = +inf (the log-sum-exp of no terms).
// Each row's sum runs over the key tiles in a fixed order (the kernel's determinism), so an
// output depends on its own point, k and h only: the same bits for any thread count and for a
// block of the rows alone (DistributedSoftMin).
template <class T>
void tiled_softmin(const OnlineSoftMin::PointMatrix& q, const OnlineSoftMin::PointMatrix& k, CostKind cost,
                   double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) {
  const Eigen::Index n = q.rows();
  const int p = static_cast<int>(q.cols()), dim = p + 1;
  out.resize(n);
  std::vector<Eigen::Index> terms;  // the keys with h_j > -inf (the others add exact zeros)
  terms.reserve(static_cast<std::size_t>(k.rows()));
  for (Eigen::Index j = 0; j < k.rows(); ++j)
    if (h[j] > kNegInf) terms.push_back(j);
  const auto m = static_cast<Eigen::Index>(terms.size());
  if (n == 0) return;
  if (m == 0) {  // no term in any sum
    out.setConstant(std::numeric_limits<double>::infinity());
    return;
  }
  double top = kNegInf;
  for (const Eigen::Index j : terms) top = std::max(top, h[j]);
  const bool distance = cost == CostKind::sqeuclidean;
  const double scale = distance ? 1.0 / std::sqrt(eps) : 1.0 / eps;
  // sqeuclidean: both clouds moved by the midpoint of the keys' bounding box (the cost does not
  // change), so the scaled coordinates are not rounded at the size of a far-away origin. From the
  // keys alone, which every block of the rows shares.
  Eigen::RowVectorXd center = Eigen::RowVectorXd::Zero(p);
  if (distance)
    for (int c = 0; c < p; ++c) {
      double lo = std::numeric_limits<double>::infinity(), hi = -lo;
      for (const Eigen::Index j : terms) {
        lo = std::min(lo, k(j, c));
        hi = std::max(hi, k(j, c));
      }
      center[c] = lo + 0.5 * (hi - lo);
    }
  std::vector<T> queries(static_cast<std::size_t>(detail::padded_queries<T>(n) * dim), T(0));
  std::vector<T> keys(static_cast<std::size_t>(detail::key_stride<T>(m) * dim), T(0));
  std::vector<T> ones(static_cast<std::size_t>(detail::key_stride<T>(m)), T(1));
  for (Eigen::Index i = 0; i < n; ++i) {
    for (int c = 0; c < p; ++c)
      queries[static_cast<std::size_t>(i * dim + c)] = static_cast<T>((q(i, c) - center[c]) * scale);
    queries[static_cast<std::size_t>(i * dim + p)] = distance ? T(0) : T(1);
  }
  for (Eigen::Index t = 0; t < m; ++t) {
    const Eigen::Index j = terms[static_cast<std::size_t>(t)];
    for (int c = 0; c < p; ++c)
      keys[static_cast<std::size_t>(detail::packed_key<T>(dim, t, c))] =
          static_cast<T>(distance ? (k(j, c) - center[c]) * scale : k(j, c));
    const double gap = top - h[j];  // >= 0
    keys[static_cast<std::size_t>(detail::packed_key<T>(dim, t, p))] = static_cast<T>(distance ? std::sqrt(gap) : -gap);
  }
  detail::SweepTokens<T> tok;
  tok.n = n;
  tok.keys = m;
  tok.k = dim;
  tok.q = queries.data();
  tok.kt = keys.data();
  tok.a = ones.data();
  const int threads = parallel_pairs(static_cast<double>(n * m)) ? std::max(1, omp_get_max_threads()) : 1;
  std::vector<detail::SweepScratch<T>> scratch(static_cast<std::size_t>(threads), detail::SweepScratch<T>(0));
  auto finish = [&](Eigen::Index i0, int rows, const double*, int, const double* log_partition) {
    for (int r = 0; r < rows; ++r) out[i0 + r] = -eps * (top + log_partition[r]);
  };
  if (distance)
    detail::sweep(detail::ScaledDistanceLogits<T>{T(1)}, tok, scratch, nullptr, finish);
  else
    detail::sweep(detail::InnerProductLogits<T>{}, tok, scratch, nullptr, finish);
}

}  // namespace

// ---- dense ----------------------------------------------------------------------------------
double allowed_cost_magnitude(const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& cost) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double top = 0.0;
  for (Eigen::Index k = 0; k < cost.size(); ++k) {
    const double c = cost.data()[k];
    if (std::isnan(c) || c == -kInf) return kInf;
    if (c < kInf) top = std::max(top, std::abs(c));
  }
  return top;
}

bool has_forbidden_pairs(const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& cost) {
  return (cost.array() == std::numeric_limits<double>::infinity()).any();
}

DenseSoftMin::DenseSoftMin(Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> cost,
                           bool forbidden_pairs)
    : cost_(std::move(cost)), forbidden_pairs_(forbidden_pairs) {}

const DenseSoftMin::Matrix& DenseSoftMin::transposed() const {
  std::call_once(transposed_once_, [this] {
    // C^T in 64 x 64 tiles (a plain transposing copy of a large matrix misses the cache on every
    // write: 0.5 s at 4000^2); a copy, so the entries are exactly C's.
    constexpr Eigen::Index kBlock = 64;
    const Eigen::Index n = cost_.rows(), m = cost_.cols();
    cost_t_.resize(m, n);
#pragma omp parallel for schedule(dynamic, pair_chunk(static_cast<double>(kBlock * m))) \
    if (parallel_pairs(static_cast<double>(n * m)))
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
#pragma omp parallel for schedule(dynamic, pair_chunk(static_cast<double>(m))) \
    if (parallel_pairs(static_cast<double>(rows() * cols())))
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
#pragma omp parallel for schedule(dynamic, pair_chunk(static_cast<double>(n))) \
    if (parallel_pairs(static_cast<double>(rows() * cols())))
  for (Eigen::Index j = 0; j < m; ++j) {
    const double* c = &cost_t(j, 0);
    out[j] = -eps * streaming_logsumexp(n, [&](Eigen::Index i) { return h[i] - c[i] * inv; });
  }
}

void DenseSoftMin::for_each_row(const std::function<void(Eigen::Index, const double*)>& visit) const {
#pragma omp parallel for schedule(dynamic, pair_chunk(static_cast<double>(cols()))) \
    if (parallel_pairs(static_cast<double>(rows() * cols())))
  for (Eigen::Index i = 0; i < cost_.rows(); ++i) visit(i, &cost_(i, 0));
}

// With forbidden pairs, +inf entries are those (ot.hpp): the range and the magnitude are those of
// the other entries. A NaN or -inf entry, or any non-finite one without forbidden pairs, makes the
// magnitude infinite (check_cost_range refuses it).
double DenseSoftMin::cost_range() const {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (!forbidden_pairs_) return cost_.size() == 0 ? 0.0 : cost_.maxCoeff() - cost_.minCoeff();
  double lo = kInf, hi = -kInf;
  for (Eigen::Index k = 0; k < cost_.size(); ++k) {
    const double c = cost_.data()[k];
    if (c < kInf) lo = std::min(lo, c), hi = std::max(hi, c);
  }
  return hi >= lo ? hi - lo : 0.0;
}

double DenseSoftMin::cost_magnitude() const {
  if (!forbidden_pairs_ && cost_.size() > 0 && !cost_.allFinite()) return std::numeric_limits<double>::infinity();
  return allowed_cost_magnitude(cost_);
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

namespace {

// out_i = -eps log sum_j exp(h_j - c(q_i, k_j) / eps) by a streaming log-sum-exp in float64, for a
// cost with no tiled form (euclidean; symmetric, so the columns are the same call with the roles
// swapped).
void streaming_softmin(const OnlineSoftMin::PointMatrix& q, const OnlineSoftMin::PointMatrix& k, CostKind cost,
                       double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) {
  const Eigen::Index n = q.rows(), m = k.rows(), p = q.cols();
  out.resize(n);
  const double inv = 1.0 / eps;
#pragma omp parallel for schedule(dynamic, pair_chunk(static_cast<double>(m))) if (parallel_pairs(static_cast<double>(n * m)))
  for (Eigen::Index i = 0; i < n; ++i) {
    const double* qi = &q(i, 0);
    out[i] = -eps * streaming_logsumexp(m, [&](Eigen::Index j) { return h[j] - pair_cost(cost, qi, &k(j, 0), p) * inv; });
  }
}

}  // namespace

void OnlineSoftMin::softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  if (cost_ != CostKind::euclidean)
    tiled_softmin<double>(x_, y_, cost_, eps, h, out);
  else
    streaming_softmin(x_, y_, cost_, eps, h, out);
}

// tiled_softmin's bound with T = float (u = 2^-24), for logits at most L in size: a logit carries
// (p + 4) u L, the centred coordinates' rounding 3 u sum_c |x_c - y_c| (|x_c - z_c| + |y_c - z_c|)
// / eps <= 6 u L (every point lies in the clouds' bounding box, so each factor is at most its
// side), and the subtraction of the running maximum 2 u L: (p + 12) u L. A sum adds at most
// kKeyTile float terms before it goes to double (sweep.hpp), each term's simd::exp_poly within a
// few ulp: (kKeyTile + 8) u more.
double OnlineSoftMin::coarse_error(double logit_size) const {
  if (cost_ == CostKind::euclidean) return 0.0;  // no float32 path: a streaming float64 sum
  const double u = std::ldexp(1.0, -24);
  return static_cast<double>(x_.cols() + 12) * u * logit_size + (detail::SweepShape<float>::kKeyTile + 8) * u;
}

namespace {

// Whether the float32 sweep's inputs stay in float range: with the dot cost the queries are scaled
// by 1 / eps and the keys are not, so a small logit bound (max|x| max|y| / eps) does not keep each
// factor in range by itself. (The sqeuclidean coordinates are at most sqrt(L), bounded with L.)
bool float_sweep_fits(CostKind cost, const OnlineSoftMin::PointMatrix& q, const OnlineSoftMin::PointMatrix& k,
                      double eps) {
  if (cost != CostKind::dot || q.size() == 0 || k.size() == 0) return true;
  constexpr double kFloatRange = 1e30;
  return q.cwiseAbs().maxCoeff() / eps <= kFloatRange && k.cwiseAbs().maxCoeff() <= kFloatRange;
}

}  // namespace

void OnlineSoftMin::softmin_rows_coarse(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  if (cost_ == CostKind::euclidean || !float_sweep_fits(cost_, x_, y_, eps)) return softmin_rows(eps, h, out);
  tiled_softmin<float>(x_, y_, cost_, eps, h, out);
}

void OnlineSoftMin::softmin_cols_coarse(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  if (cost_ == CostKind::euclidean || !float_sweep_fits(cost_, y_, x_, eps)) return softmin_cols(eps, h, out);
  tiled_softmin<float>(y_, x_, cost_, eps, h, out);
}

// C^T: the same cost with the roles swapped (every cost here is symmetric in its two points).
void OnlineSoftMin::softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  if (cost_ != CostKind::euclidean)
    tiled_softmin<double>(y_, x_, cost_, eps, h, out);
  else
    streaming_softmin(y_, x_, cost_, eps, h, out);
}

// pair_cost's arithmetic (the same order, so the same bits), with the cost's branch and the call
// taken out of the loop over j: the final pass over the plan (measure_plan) spent 14 % of a short
// online solve in pair_cost calls.
const double* OnlineSoftMin::cost_row(Eigen::Index i, double* buffer) const {
  const Eigen::Index m = y_.rows(), p = x_.cols();
  const double* x = &x_(i, 0);
  const auto row = [&](auto term) {
    for (Eigen::Index j = 0; j < m; ++j) {
      const double* y = &y_(j, 0);
      double s = 0.0;
      for (Eigen::Index c = 0; c < p; ++c) s += term(x[c], y[c]);
      buffer[j] = s;
    }
  };
  switch (cost_) {
    case CostKind::dot:
      row([](double a, double b) { return a * b; });
      for (Eigen::Index j = 0; j < m; ++j) buffer[j] = -buffer[j];
      break;
    case CostKind::sqeuclidean:
      row([](double a, double b) { return (a - b) * (a - b); });
      break;
    case CostKind::euclidean:
      row([](double a, double b) { return (a - b) * (a - b); });
      for (Eigen::Index j = 0; j < m; ++j) buffer[j] = std::sqrt(buffer[j]);
      break;
  }
  return buffer;
}

void OnlineSoftMin::for_each_row(const std::function<void(Eigen::Index, const double*)>& visit) const {
  const Eigen::Index n = x_.rows(), m = y_.rows(), p = x_.cols();
#pragma omp parallel if (parallel_pairs(static_cast<double>(rows() * cols())))
  {
    std::vector<double> row(static_cast<std::size_t>(m));
#pragma omp for schedule(dynamic, pair_chunk(static_cast<double>(m)))
    for (Eigen::Index i = 0; i < n; ++i) {
      for (Eigen::Index j = 0; j < m; ++j) row[static_cast<std::size_t>(j)] = pair_cost(cost_, &x_(i, 0), &y_(j, 0), p);
      visit(i, row.data());
    }
  }
}

}  // namespace tokenflow
