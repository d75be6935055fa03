// The plain reference of include/tokenflow/metastability.hpp: the particle field in R^2 as
// docs/design.md writes it (softmax weights, Gamma_i = sum_j w_ij x_j, tangent projection), with
// double loops, the interaction energy over pairs, and the normalized steps of Eq. (M5) on that field.
// It shares no code with metastability.cpp or normalized_steps.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tokenflow/metastability.hpp"

namespace tokenflow {

namespace {

// The field in R^2 at token i: softmax weights a_j exp(beta <x_i, x_j>) / Z, Gamma_i = sum_j w_ij x_j,
// and its tangent projection Gamma_i - <Gamma_i, x_i> x_i.
void reference_tangent_field(const std::vector<double>& px, const std::vector<double>& py,
                             const std::vector<double>& weights, double beta, std::size_t i, double v[2]) {
  const std::size_t n = px.size();
  std::vector<double> logits(n);
  double top = -INFINITY;
  for (std::size_t j = 0; j < n; ++j) {
    logits[j] = beta * (px[i] * px[j] + py[i] * py[j]);
    top = std::max(top, logits[j]);
  }
  double z = 0.0, gamma[2] = {0.0, 0.0};
  for (std::size_t j = 0; j < n; ++j) z += weights[j] * std::exp(logits[j] - top);
  for (std::size_t j = 0; j < n; ++j) {
    const double w = weights[j] * std::exp(logits[j] - top) / z;
    gamma[0] += w * px[j];
    gamma[1] += w * py[j];
  }
  const double along = gamma[0] * px[i] + gamma[1] * py[i];
  v[0] = gamma[0] - along * px[i];
  v[1] = gamma[1] - along * py[i];
}

}  // namespace

std::vector<double> reference_circle_velocity(const std::vector<double>& angles, const std::vector<double>& weights,
                                              double beta) {
  const std::size_t n = angles.size();
  std::vector<double> px(n), py(n), out(n);
  for (std::size_t i = 0; i < n; ++i) {
    px[i] = std::cos(angles[i]);
    py[i] = std::sin(angles[i]);
  }
  for (std::size_t i = 0; i < n; ++i) {
    double v[2];
    reference_tangent_field(px, py, weights, beta, i, v);
    out[i] = -py[i] * v[0] + px[i] * v[1];  // the component along (-sin t_i, cos t_i)
  }
  return out;
}

NormalizedStepPath reference_normalized_steps(std::vector<double> angles, std::vector<double> weights,
                                              const NormalizedStepOptions& o) {
  const double h = o.step > 0.0 ? o.step : 1e-5 * std::log(o.beta);
  std::vector<double> px, py, count(angles.size(), 1.0);
  for (double t : angles) {
    px.push_back(std::cos(t));
    py.push_back(std::sin(t));
  }
  NormalizedStepPath path;
  path.status = "steps";
  for (long step = 0;; ++step) {
    // Merge pairs closer than merge_distance (in the order i < j, j into i) at their weighted mean.
    for (std::size_t i = 0; i < px.size(); ++i)
      for (std::size_t j = i + 1; j < px.size();) {
        const double angle = std::atan2(px[i] * py[j] - py[i] * px[j], px[i] * px[j] + py[i] * py[j]);
        if (std::abs(angle) >= o.merge_distance) {
          ++j;
          continue;
        }
        const double mx = weights[i] * px[i] + weights[j] * px[j], my = weights[i] * py[i] + weights[j] * py[j];
        px[i] = mx / std::hypot(mx, my);
        py[i] = my / std::hypot(mx, my);
        weights[i] += weights[j];
        count[i] += count[j];
        for (auto* v : {&px, &py, &weights, &count}) v->erase(v->begin() + static_cast<long>(j));
      }
    if (px.size() == 1) path.status = "one_cluster";
    if (px.size() == 1 || step == o.steps) {
      path.steps = step;
      break;
    }
    const std::size_t n = px.size();
    std::vector<double> vx(n), vy(n);
    double norm2 = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      double v[2];
      reference_tangent_field(px, py, weights, o.beta, i, v);
      vx[i] = v[0];
      vy[i] = v[1];
      norm2 += count[i] * (v[0] * v[0] + v[1] * v[1]);
    }
    for (std::size_t i = 0; i < n; ++i) {
      const double yx = px[i] + h * vx[i] / std::sqrt(norm2), yy = py[i] + h * vy[i] / std::sqrt(norm2);
      px[i] = yx / std::hypot(yx, yy);
      py[i] = yy / std::hypot(yx, yy);
    }
  }
  double total = 0.0;
  for (double w : weights) total += w;
  for (std::size_t i = 0; i < px.size(); ++i) {
    path.final_angles.push_back(std::atan2(py[i], px[i]));
    path.final_weights.push_back(weights[i] / total);
  }
  return path;
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
