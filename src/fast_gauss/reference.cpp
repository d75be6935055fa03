// The reference weighted Gaussian average: double loops in float64, the largest exponent of each
// row subtracted before exp (no underflow of the sums). Shares no code with fast_gauss.cpp.
#include <cmath>
#include <limits>
#include <stdexcept>

#include "tokenflow/fast_gauss.hpp"

namespace tokenflow {

GaussMatrix reference_gauss_average(const GaussMatrix& targets, const GaussMatrix& sources,
                                    const Eigen::VectorXd& log_weights, const GaussMatrix& values, double s) {
  const Eigen::Index m = targets.rows(), n = sources.rows(), k = targets.cols(), c = values.cols();
  if (sources.cols() != k || log_weights.size() != n || values.rows() != n)
    throw std::invalid_argument("reference_gauss_average: shapes do not match");
  GaussMatrix out = GaussMatrix::Zero(m, c);
  Eigen::VectorXd exponent(n);
  for (Eigen::Index i = 0; i < m; ++i) {
    double largest = -std::numeric_limits<double>::infinity();
    for (Eigen::Index j = 0; j < n; ++j) {
      double r2 = 0.0;
      for (Eigen::Index e = 0; e < k; ++e) r2 += (targets(i, e) - sources(j, e)) * (targets(i, e) - sources(j, e));
      exponent[j] = log_weights[j] - s * r2;
      if (exponent[j] > largest) largest = exponent[j];
    }
    double total = 0.0;
    for (Eigen::Index j = 0; j < n; ++j) {
      const double w = std::exp(exponent[j] - largest);
      total += w;
      for (Eigen::Index e = 0; e < c; ++e) out(i, e) += w * values(j, e);
    }
    for (Eigen::Index e = 0; e < c; ++e) out(i, e) /= total;
  }
  return out;
}

}  // namespace tokenflow
