// The plain reference of include/tokenflow/metastability.hpp: the particle field in R^2 as
// docs/design.md writes it (softmax weights, Gamma_i = sum_j w_ij x_j, tangent projection), with
// double loops, and the interaction energy over pairs. It shares no code with metastability.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tokenflow/metastability.hpp"

namespace tokenflow {

std::vector<double> reference_circle_velocity(const std::vector<double>& angles, const std::vector<double>& weights,
                                              double beta) {
  const std::size_t n = angles.size();
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double xi[2] = {std::cos(angles[i]), std::sin(angles[i])};
    std::vector<double> logits(n);
    double top = -INFINITY;
    for (std::size_t j = 0; j < n; ++j) {
      logits[j] = beta * (xi[0] * std::cos(angles[j]) + xi[1] * std::sin(angles[j]));
      top = std::max(top, logits[j]);
    }
    double z = 0.0, gamma[2] = {0.0, 0.0};
    for (std::size_t j = 0; j < n; ++j) z += weights[j] * std::exp(logits[j] - top);
    for (std::size_t j = 0; j < n; ++j) {
      const double w = weights[j] * std::exp(logits[j] - top) / z;
      gamma[0] += w * std::cos(angles[j]);
      gamma[1] += w * std::sin(angles[j]);
    }
    const double along = gamma[0] * xi[0] + gamma[1] * xi[1];
    const double v[2] = {gamma[0] - along * xi[0], gamma[1] - along * xi[1]};
    out[i] = -xi[1] * v[0] + xi[0] * v[1];  // the component along (-sin t_i, cos t_i)
  }
  return out;
}

double reference_circle_energy(const std::vector<double>& angles, const std::vector<double>& weights, double beta) {
  double total = 0.0;
  for (double w : weights) total += w;
  double e = 0.0;
  for (std::size_t i = 0; i < angles.size(); ++i)
    for (std::size_t j = 0; j < angles.size(); ++j)
      e += weights[i] / total * weights[j] / total * std::exp(beta * std::cos(angles[i] - angles[j]));
  return 2.0 * std::exp(-beta) * 0.5 * e;
}

}  // namespace tokenflow
