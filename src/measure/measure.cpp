// Weighted empirical measures: construction checks, sampling, moments.
#include "tokenflow/measure.hpp"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "tokenflow/error.hpp"
#include "tokenflow/linalg.hpp"

namespace tokenflow {

std::uint64_t Random::next_u64() {
  // splitmix64 (Steele, Lea, Flood 2014): small state, good enough for sampling initial data.
  return mix(state_ += 0x9E3779B97F4A7C15ull);
}

double Random::uniform() {
  // 53 random bits, shifted into (0, 1) so that log(u) is finite.
  return (static_cast<double>(next_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double Random::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = uniform(), u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double phi = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(phi);
  has_spare_ = true;
  return r * std::cos(phi);
}

Eigen::VectorXd normalized_weights(const Eigen::VectorXd& w) {
  const double total = w.sum();
  if (std::isfinite(total)) return total > 0.0 ? Eigen::VectorXd(w / total) : w;
  // The sum overflowed: entries scaled into [0, 1] first, whose sum is at most n.
  const Eigen::VectorXd scaled = w / w.maxCoeff();
  return scaled / scaled.sum();
}

template <class T>
Measure<T> make_measure(Points<T> points, Vec<T> weights, Vec<T> positions) {
  const Eigen::Index n = points.rows();
  if (n < 1 || points.cols() < 1) throw InputError("", "points", "need at least one point of dimension >= 1");
  if (!points.allFinite()) {
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index c = 0; c < points.cols(); ++c)
        if (!std::isfinite(static_cast<double>(points(i, c))))
          throw InputError("", "points", "non-finite value at row " + std::to_string(i) +
                                             ", column " + std::to_string(c));
  }
  Measure<T> mu;
  mu.points = std::move(points);
  if (weights.size() == 0) {
    mu.weights = Vec<T>::Constant(n, T(1) / T(n));
  } else {
    if (weights.size() != n)
      throw InputError("", "weights", "has " + std::to_string(weights.size()) +
                                          " entries for " + std::to_string(n) + " points");
    for (Eigen::Index i = 0; i < n; ++i) {
      const double w = static_cast<double>(weights[i]);
      if (!std::isfinite(w) || w <= 0.0)
        throw InputError("", "weights", fmt::format("entry {} is {:g}; weights must be finite and positive", i, w));
    }
    mu.weights = normalized_weights(weights.template cast<double>()).template cast<T>();
  }
  if (positions.size() != 0) {
    if (positions.size() != n)
      throw InputError("", "positions", "has " + std::to_string(positions.size()) +
                                            " entries for " + std::to_string(n) + " points");
    for (Eigen::Index i = 0; i < n; ++i) {
      const double p = static_cast<double>(positions[i]);
      if (!std::isfinite(p) || p < 0.0 || p > 1.0)
        throw InputError("", "positions",
                         fmt::format("entry {} is {:g}; positions must lie in [0, 1]", i, p));
    }
    mu.positions = std::move(positions);
  }
  return mu;
}

template <class T>
Vec<T> default_positions(Eigen::Index n) {
  Vec<T> p(n);
  for (Eigen::Index i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<double>(i) / static_cast<double>(n));
  return p;
}

Points<double> sample_gaussian(Eigen::Index n, const Eigen::VectorXd& mean,
                               const Eigen::MatrixXd& cov, std::uint64_t seed,
                               const std::string& cov_key) {
  const Eigen::Index d = mean.size();
  if (cov.rows() != d || cov.cols() != d)
    throw InputError("", cov_key, "is " + std::to_string(cov.rows()) + " x " +
                                      std::to_string(cov.cols()) + " but the mean has dimension " +
                                      std::to_string(d));
  if (!cov.allFinite()) throw InputError("", cov_key, "has a non-finite entry");
  const double scale = std::max(1.0, cov.cwiseAbs().maxCoeff());
  if ((cov - cov.transpose()).cwiseAbs().maxCoeff() > 1e-12 * scale)
    throw InputError("", cov_key, "is not symmetric");
  // A square root through the eigendecomposition accepts semidefinite (rank-deficient)
  // covariances, which the clustering experiments need; Cholesky would refuse them.
  const linalg::SymmetricEigen eig = linalg::symmetric_eigen(cov);
  const Eigen::VectorXd& lambda = eig.values;
  // Rounding in the eigensolver is ~ d * eps * |S|; anything more negative is a real error.
  if (lambda.minCoeff() < -1e-12 * std::max(1.0, lambda.cwiseAbs().maxCoeff()) * double(d))
    throw InputError("", cov_key, fmt::format("is not positive semidefinite (smallest eigenvalue {:g})",
                                              lambda.minCoeff()));
  const Eigen::MatrixXd root =
      eig.vectors * lambda.cwiseMax(0.0).cwiseSqrt().asDiagonal();
  Random rng(seed);
  Points<double> x(n, d);
  Eigen::VectorXd z(d);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index c = 0; c < d; ++c) z[c] = rng.normal();
    x.row(i) = (mean + root * z).transpose();
  }
  return x;
}

Points<double> sample_sphere(Eigen::Index n, Eigen::Index d, std::uint64_t seed) {
  if (d < 1) throw InputError("", "init.d", "must be at least 1");
  Random rng(seed);
  Points<double> x(n, d);
  for (Eigen::Index i = 0; i < n; ++i) {
    double norm2 = 0.0;
    do {  // a normal vector has norm 0 with probability 0; redraw to be safe
      for (Eigen::Index c = 0; c < d; ++c) x(i, c) = rng.normal();
      norm2 = x.row(i).squaredNorm();
    } while (norm2 == 0.0);
    x.row(i) /= std::sqrt(norm2);
  }
  return x;
}

template <class T>
Eigen::VectorXd weighted_mean(const Measure<T>& mu) {
  Eigen::VectorXd m = Eigen::VectorXd::Zero(mu.d());
  for (Eigen::Index i = 0; i < mu.n(); ++i)
    m += static_cast<double>(mu.weights[i]) * mu.points.row(i).template cast<double>().transpose();
  return m;
}

template <class T>
Eigen::MatrixXd weighted_covariance(const Measure<T>& mu) {
  const Eigen::VectorXd m = weighted_mean(mu);
  Eigen::MatrixXd S = Eigen::MatrixXd::Zero(mu.d(), mu.d());
  for (Eigen::Index i = 0; i < mu.n(); ++i) {
    const Eigen::VectorXd y = mu.points.row(i).template cast<double>().transpose() - m;
    S.noalias() += static_cast<double>(mu.weights[i]) * y * y.transpose();
  }
  return 0.5 * (S + S.transpose());
}

#define TOKENFLOW_INSTANTIATE(T)                                                 \
  template Measure<T> make_measure<T>(Points<T>, Vec<T>, Vec<T>);                \
  template Vec<T> default_positions<T>(Eigen::Index);                            \
  template Eigen::VectorXd weighted_mean<T>(const Measure<T>&);                  \
  template Eigen::MatrixXd weighted_covariance<T>(const Measure<T>&);
TOKENFLOW_INSTANTIATE(float)
TOKENFLOW_INSTANTIATE(double)
#undef TOKENFLOW_INSTANTIATE

}  // namespace tokenflow
