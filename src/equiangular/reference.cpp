// The plain reference of the equiangular reduction (include/tokenflow/equiangular.hpp): Eq. (E1)
// as written, and the pair rate of the particle flow itself with double loops.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tokenflow/equiangular.hpp"
#include "tokenflow/normalization_schemes.hpp"

namespace tokenflow {

double reference_equiangular_velocity(double n, double beta, double rho) {
  const double self = std::exp(beta), other = std::exp(beta * rho);
  return 2.0 * other * (1.0 - rho) * (1.0 + (n - 1.0) * rho) / (self + (n - 1.0) * other);
}

double reference_equiangular_pair_rate(long n, double beta, double rho) {
  const Points<double> x = equiangular_points(n, rho);
  const long d = static_cast<long>(x.cols());
  auto dot = [&](const std::vector<double>& v, long j) {
    double s = 0.0;
    for (long c = 0; c < d; ++c) s += v[c] * x(j, c);
    return s;
  };
  // P_{x_i}(sum_j w_ij x_j) for i = 0, 1.
  auto projected_field = [&](long i) {
    std::vector<double> logits(n), v(d, 0.0);
    double top = -INFINITY, z = 0.0;
    for (long j = 0; j < n; ++j) {
      double s = 0.0;
      for (long c = 0; c < d; ++c) s += x(i, c) * x(j, c);
      logits[j] = beta * s;
      top = std::max(top, logits[j]);
    }
    for (long j = 0; j < n; ++j) z += std::exp(logits[j] - top);
    for (long j = 0; j < n; ++j)
      for (long c = 0; c < d; ++c) v[c] += std::exp(logits[j] - top) / z * x(j, c);
    const double along = dot(v, i);
    for (long c = 0; c < d; ++c) v[c] -= along * x(i, c);
    return v;
  };
  return dot(projected_field(0), 1) + dot(projected_field(1), 0);
}

SchemePairRate reference_scheme_pair_rate(long n, double beta, Normalize scheme, double rho, double r0) {
  AttentionSpec spec;
  spec.scale = beta;
  spec.normalize = to_string(scheme);
  const AttentionParams params = make_attention(spec, static_cast<int>(n));
  Measure<double> mu;
  mu.points = r0 * equiangular_points(n, rho);
  mu.weights = Vec<double>::Constant(n, 1.0 / static_cast<double>(n));
  const Points<double> v = reference_velocity(params, mu, 0.0);
  const long d = static_cast<long>(mu.points.cols());
  // theta_i = x_i / r0; dtheta_i = (v_i - <v_i, theta_i> theta_i) / r0.
  auto theta = [&](long i, long c) { return mu.points(i, c) / r0; };
  auto dtheta = [&](long i, long c) {
    double radial = 0.0;
    for (long e = 0; e < d; ++e) radial += v(i, e) * theta(i, e);
    return (v(i, c) - radial * theta(i, c)) / r0;
  };
  SchemePairRate rate;
  for (long c = 0; c < d; ++c) {
    rate.rho_rate += dtheta(0, c) * theta(1, c) + theta(0, c) * dtheta(1, c);
    rate.radius_rate += theta(0, c) * v(0, c);
  }
  return rate;
}

}  // namespace tokenflow
