// The grid soft-min operator (ot.hpp, GridSoftMin): the squared Euclidean cost in k <= 3
// dimensions, each soft-min one Gauss transform (fast_gauss.hpp, gauss_average).
//
// A row soft-min is out_i = -eps log sum_j exp(h_j - |x_i - y_j|^2 / eps) = |x_i|^2 - eps log S_i,
//   S_i = sum_j exp(lambda_j + <q_i, y_j>),   lambda_j = h_j - |y_j|^2 / eps,   q_i = 2 x_i / eps.
// In Sinkhorn h_j = log b_j + g_j / eps, and lambda_j is close to a concave quadratic of y_j
// (between Gaussians exactly: g - |y|^2 is minus a convex Brenier potential, quadratic), spread
// over thousands of units across the cloud at small eps. Summed in the plain Gauss form
// (kernel exp(-|x - y|^2 / eps), weights exp(h_j)), such weights put each row's heaviest terms
// far from its target, where the grid's certificate (a Gaussian envelope) cannot certify the
// row: measured, every row of every soft-min was summed exactly at eps = 0.05 on 2 10^4 points.
// So each call fits lambda_j ~ c + <b, y_j> - 1/2 y_j^T B y_j by least squares (B's eigenvalues
// clamped to [kFloor, 1 / kFloor] times 2 / eps, so B = R^T R is positive definite), and with y~_j
// = R y_j, z_i = R^-T (q_i + b):
//   lambda_j + <q_i, y_j> = r_j + c + |z_i|^2 / 2 - |z_i - y~_j|^2 / 2,   r_j = lambda_j - fit_j,
// so S_i = exp(c + |z_i|^2 / 2) sum_j exp(r_j - |z_i - y~_j|^2 / 2): gauss_average with targets
// z, sources y~, log-weights r and s = 1/2, whose weights are now flat where the fit holds and
// whose heaviest terms sit at the target. This is the identity above, not an approximation: the
// fit only decides how fast the grid certifies rows, and gauss_average's contract (L_i within
// relative error tol of log S_i's sum) holds for any fit. Points are centred on the mean of both
// clouds first (the cost is translation invariant), so |x_i|^2 - eps log S_i cancels less.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "tokenflow/error.hpp"
#include "tokenflow/fast_gauss.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/ot.hpp"
#include "parallel_pairs.hpp"

namespace tokenflow {

struct GridSoftMin::Counters {
  std::atomic<long long> exact{0}, total{0};
};

namespace {

using PointMatrix = GridSoftMin::PointMatrix;

// The least-squares fit's normal equations are formed over chunks of this many points.
constexpr Eigen::Index kFitChunk = 8192;
// B's eigenvalues are kept in [kFloor, 1 / kFloor] times those of the plain form's, 2 / eps.
constexpr double kFloor = 1e-4;

PointMatrix checked_points(const PointMatrix& x, const PointMatrix& y) {
  if (x.cols() != y.cols())
    throw InputError("", "y",
                     "points of dimension " + std::to_string(y.cols()) +
                         " cannot be compared with points of dimension " +
                         std::to_string(x.cols()));
  if (x.cols() < 1 || x.cols() > 3)
    throw InputError("", "operator",
                     "grid needs points of dimension 1 to 3; these have dimension " +
                         std::to_string(x.cols()) + " (use online or dense)");
  return x;
}

// Terms of out_i = |t_i|^2 - eps (L_i + offset_i) are kept below this times the plain form's scale.
constexpr double kTermBound = 16.0;

double finite_abs_max(const Eigen::VectorXd& v) {
  double top = 0.0;
  for (double x : v)
    if (std::isfinite(x)) top = std::max(top, std::abs(x));
  return top;
}

// S = max_i |t_i|^2 + eps max_j |h_j| (t = q eps / 2, h_j = lambda_j + |y_j|^2 / eps).
double plain_scale(const PointMatrix& q, const PointMatrix& y, const Eigen::VectorXd& lambda,
                   double eps) {
  const double t2 = (eps / 2.0) * (eps / 2.0) * q.rowwise().squaredNorm().maxCoeff();
  const Eigen::VectorXd h = lambda + y.rowwise().squaredNorm() / eps;
  return t2 + eps * finite_abs_max(h);
}

// The Gauss form of S_i = sum_j exp(lambda_j + <q_i, y_j>) (the file's comment): targets z,
// sources y~ = R y, log-weights r and the per-target offset c + |z_i|^2 / 2.
struct GaussForm {
  GaussMatrix targets, sources;
  Eigen::VectorXd log_weights, offset;
};

// The plain form: B = 2 I / eps, b = 0, so z = sqrt(2 / eps) t, y~ = sqrt(2 / eps) y, r = h and
// eps |z|^2 / 2 = |t|^2 (for targets t = q eps / 2).
GaussForm plain_form(const PointMatrix& q, const PointMatrix& y, const Eigen::VectorXd& lambda,
                     double eps) {
  const double root = std::sqrt(2.0 / eps);
  GaussForm form;
  form.sources = root * y;
  form.targets = (eps / 2.0 * root) * q;
  form.log_weights = lambda.array() + 0.5 * form.sources.rowwise().squaredNorm().array();
  form.offset = 0.5 * form.targets.rowwise().squaredNorm();
  return form;
}

GaussForm gauss_form(const PointMatrix& q, const PointMatrix& y, const Eigen::VectorXd& lambda,
                     double eps) {
  const Eigen::Index n = y.rows();
  const int k = static_cast<int>(y.cols());
  const int terms = 1 + k + k * (k + 1) / 2;
  // Least squares on the finite lambda_j (an empty bin's -inf is no constraint), features scaled
  // by the cloud's spread for conditioning.
  const Eigen::RowVectorXd scale = (y.cwiseAbs().colwise().maxCoeff().array().max(1e-300)).matrix();
  // The normal equations chunk by chunk (a GEMM each, in parallel), the chunks' sums added in
  // order: the same fit on any number of threads.
  const Eigen::Index chunks = (n + kFitChunk - 1) / kFitChunk;
  std::vector<Eigen::MatrixXd> chunk_normal(static_cast<std::size_t>(chunks));
  std::vector<Eigen::VectorXd> chunk_rhs(static_cast<std::size_t>(chunks));
  // terms^2 multiply-adds a point (a pair: about 16, parallel_pairs.hpp).
#pragma omp parallel for schedule(dynamic, 1) if (parallel_pairs(static_cast<double>(n * terms * terms) / 16.0))
  for (Eigen::Index c = 0; c < chunks; ++c) {
    const Eigen::Index first = c * kFitChunk, last = std::min(n, first + kFitChunk);
    Eigen::MatrixXd phi(last - first, terms);
    Eigen::VectorXd target(last - first);
    Eigen::Index rows = 0;
    for (Eigen::Index j = first; j < last; ++j) {
      if (!std::isfinite(lambda[j])) continue;
      int t = 0;
      phi(rows, t++) = 1.0;
      for (int a = 0; a < k; ++a) phi(rows, t++) = y(j, a) / scale[a];
      for (int a = 0; a < k; ++a)
        for (int b = a; b < k; ++b) phi(rows, t++) = (y(j, a) / scale[a]) * (y(j, b) / scale[b]);
      target[rows++] = lambda[j];
    }
    chunk_normal[static_cast<std::size_t>(c)] = phi.topRows(rows).transpose() * phi.topRows(rows);
    chunk_rhs[static_cast<std::size_t>(c)] = phi.topRows(rows).transpose() * target.head(rows);
  }
  Eigen::MatrixXd normal = Eigen::MatrixXd::Zero(terms, terms);
  Eigen::VectorXd rhs = Eigen::VectorXd::Zero(terms);
  for (Eigen::Index c = 0; c < chunks; ++c) {
    normal += chunk_normal[static_cast<std::size_t>(c)];
    rhs += chunk_rhs[static_cast<std::size_t>(c)];
  }
  normal.triangularView<Eigen::StrictlyUpper>() = normal.transpose();  // exactly symmetric
  const Eigen::VectorXd coef = linalg::minimum_norm_solve(normal, rhs);
  if (!coef.allFinite()) return plain_form(q, y, lambda, eps);
  // lambda ~ c + <b, y> - 1/2 y^T B y in the original units.
  Eigen::VectorXd b(k);
  Eigen::MatrixXd B(k, k);
  int t = 1;
  for (int a = 0; a < k; ++a) b[a] = coef[t++] / scale[a];
  for (int a = 0; a < k; ++a)
    for (int c = a; c < k; ++c) {
      const double v = coef[t++] / (scale[a] * scale[c]);
      B(a, c) = B(c, a) = a == c ? -2.0 * v : -v;
    }
  // The plain Gauss form (kernel exp(-|x - y|^2 / eps), weights exp(h)) is B = 2 I / eps; the
  // fitted B's eigenvalues are kept within kFloor^-1 of it either way, so that a fit of weights
  // far from quadratic (any h may be given) cannot stretch the grid's box without bound.
  const linalg::SymmetricEigen eig = linalg::symmetric_eigen(B);
  const double plain = 2.0 / eps;
  const Eigen::VectorXd values = eig.values.cwiseMax(kFloor * plain).cwiseMin(plain / kFloor);
  // B = R^T R with R = D^1/2 V^T, and R^-T = D^-1/2 V^T.
  const Eigen::MatrixXd R = values.cwiseSqrt().asDiagonal() * eig.vectors.transpose();
  const Eigen::MatrixXd R_inv_t =
      values.cwiseSqrt().cwiseInverse().asDiagonal() * eig.vectors.transpose();
  GaussForm form;
  form.sources = y * R.transpose();
  form.targets = (q.rowwise() + b.transpose()) * R_inv_t.transpose();
  // r_j = lambda_j - <b, y_j> + 1/2 |R y_j|^2 (with the clamped B, so the identity is exact; r
  // keeps the fit's constant c, which gauss_average's shift by the largest weight absorbs).
  form.log_weights =
      lambda.array() - (y * b).array() + 0.5 * form.sources.rowwise().squaredNorm().array();
  form.offset = 0.5 * form.targets.rowwise().squaredNorm();
  // out = |t|^2 - eps (L + offset) rounds at the size of its terms. The plain form's are those of
  // the soft-min's inputs, S = max |t|^2 + eps max |h|; a fit of weights far from quadratic may
  // make eps offset much larger, and is then not used: every term stays below kTermBound S.
  const double inputs = plain_scale(q, y, lambda, eps);
  const double largest_r = finite_abs_max(form.log_weights);
  if (!(eps * form.offset.maxCoeff() <= kTermBound * inputs &&
        eps * largest_r <= kTermBound * inputs))
    return plain_form(q, y, lambda, eps);
  return form;
}

}  // namespace

GridSoftMin::GridSoftMin(PointMatrix x, PointMatrix y, double relative_tol,
                         double max_cost_per_pair)
    : x_(checked_points(x, y)),
      y_(y),
      tol_(relative_tol),
      max_cost_per_pair_(max_cost_per_pair),
      pairs_(std::move(x), std::move(y), CostKind::sqeuclidean),
      counters_(std::make_unique<Counters>()) {
  if (!(relative_tol > 0.0 && relative_tol <= 1e-2))
    throw InputError("", "operator", "the grid's relative tolerance must lie in (0, 1e-2]");
  if (x_.rows() + y_.rows() > 0) {
    const Eigen::RowVectorXd centre =
        (x_.colwise().sum() + y_.colwise().sum()) / static_cast<double>(x_.rows() + y_.rows());
    x_.rowwise() -= centre;
    y_.rowwise() -= centre;
  }
  x_norm2_ = x_.rowwise().squaredNorm();
  y_norm2_ = y_.rowwise().squaredNorm();
}

GridSoftMin::~GridSoftMin() = default;

// out_i = |t_i|^2 - eps log sum_j exp(h_j - |s_j|^2 / eps + 2 <t_i, s_j> / eps) for targets t,
// sources s; with `values` (sources x c), also the averages under each row's weights.
void GridSoftMin::transform(const PointMatrix& targets, const Eigen::VectorXd& target_norm2,
                            const PointMatrix& sources, const Eigen::VectorXd& source_norm2,
                            double eps, const Eigen::VectorXd& h, const GaussMatrix& values,
                            GaussMatrix& means, Eigen::VectorXd& out) const {
  if (targets.rows() == 0 || sources.rows() == 0) {  // an empty sum: -eps log 0 = +inf
    out = Eigen::VectorXd::Constant(targets.rows(), std::numeric_limits<double>::infinity());
    means = GaussMatrix::Zero(targets.rows(), values.cols());
    return;
  }
  const Eigen::VectorXd lambda = h - source_norm2 / eps;
  const GaussForm form = gauss_form((2.0 / eps) * targets, sources, lambda, eps);
  GaussAverageOptions options;
  options.tol = tol_;
  options.max_cost_per_pair = max_cost_per_pair_;
  Eigen::VectorXd log_sums;
  const GaussAverageStats stats = gauss_average(form.targets, form.sources, form.log_weights,
                                                values, 0.5, options, means, &log_sums);
  out = target_norm2 - eps * (log_sums + form.offset);
  counters_->exact += static_cast<long long>(stats.rows_exact);
  counters_->total += static_cast<long long>(targets.rows());
}

void GridSoftMin::softmin_rows(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  GaussMatrix none(y_.rows(), 0), means;
  transform(x_, x_norm2_, y_, y_norm2_, eps, h, none, means, out);
}

void GridSoftMin::softmin_cols(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  GaussMatrix none(x_.rows(), 0), means;
  transform(y_, y_norm2_, x_, x_norm2_, eps, h, none, means, out);
}

void GridSoftMin::softmin_rows_and_means(double eps, const Eigen::VectorXd& h,
                                         const PointMatrix& values, PointMatrix& means,
                                         Eigen::VectorXd& out) const {
  if (values.rows() != y_.rows())
    throw std::invalid_argument("softmin_rows_and_means: values need one row per column point");
  transform(x_, x_norm2_, y_, y_norm2_, eps, h, values, means, out);
}

void GridSoftMin::row_mean_cost(double eps, const Eigen::VectorXd& h, Eigen::VectorXd& out) const {
  const Eigen::Index m = y_.rows(), k = y_.cols();
  GaussMatrix values(m, k + 1), means;
  values.leftCols(k) = y_;
  values.col(k) = y_norm2_;
  Eigen::VectorXd unused;
  transform(x_, x_norm2_, y_, y_norm2_, eps, h, values, means, unused);
  // E |x_i - y|^2 = |x_i|^2 - 2 <x_i, E y> + E |y|^2 under row i's weights.
  out = x_norm2_ - 2.0 * (x_.cwiseProduct(means.leftCols(k))).rowwise().sum() + means.col(k);
}

void GridSoftMin::for_each_row(
    const std::function<void(Eigen::Index, const double*)>& visit) const {
  pairs_.for_each_row(visit);
}

const double* GridSoftMin::cost_row(Eigen::Index i, double* buffer) const {
  return pairs_.cost_row(i, buffer);
}

double GridSoftMin::cost_range() const {
  return pairs_.cost_range();
}

double GridSoftMin::cost_magnitude() const {
  return pairs_.cost_magnitude();
}

long long GridSoftMin::rows_exact() const {
  return counters_->exact.load();
}
long long GridSoftMin::rows_total() const {
  return counters_->total.load();
}

}  // namespace tokenflow
