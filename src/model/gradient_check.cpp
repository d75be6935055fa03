// Finite-difference gradient checking with a measured error bound (tokenflow/gradient_check.hpp).
#include "tokenflow/gradient_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tokenflow/measure.hpp"

namespace tokenflow {

std::string GradientCheckResult::report() const {
  return fmt::format(
      "{} coordinates checked; worst ratio {:.3g} at index {} (analytic {:.17g}, finite difference "
      "{:.17g}, tolerance {:.3g})",
      coordinates_checked, worst_ratio, worst_index, worst_analytic, worst_numeric,
      worst_tolerance);
}

GradientCheckResult check_gradient(const std::function<double(const Eigen::VectorXd&)>& f,
                                   const Eigen::VectorXd& x, const Eigen::VectorXd& analytic,
                                   const GradientCheckOptions& options) {
  GradientCheckResult r;
  const Eigen::Index p = x.size();
  if (analytic.size() != p) {
    r.ok = false;
    return r;
  }
  std::vector<Eigen::Index> coords(static_cast<std::size_t>(p));
  std::iota(coords.begin(), coords.end(), Eigen::Index{0});
  if (options.max_coordinates > 0 && options.max_coordinates < p) {
    Random rng(options.seed);
    // Partial Fisher-Yates: the first max_coordinates entries are a uniform random subset.
    for (std::size_t i = 0; i < static_cast<std::size_t>(options.max_coordinates); ++i) {
      const auto j = i + static_cast<std::size_t>(rng.next_u64() % (coords.size() - i));
      std::swap(coords[i], coords[j]);
    }
    coords.resize(static_cast<std::size_t>(options.max_coordinates));
  }
  const double f0 = f(x);
  const double f_scale = options.f_scale > 0.0 ? options.f_scale : std::abs(f0) + 1.0;
  const double step = std::cbrt(options.function_error);
  Eigen::VectorXd xp = x;
  auto eval = [&](Eigen::Index i, double delta) {
    xp[i] = x[i] + delta;
    const double v = f(xp);
    xp[i] = x[i];
    return v;
  };
  for (Eigen::Index i : coords) {
    // The step is rounded to a representable difference so that x +- h is exact.
    const double h0 = step * std::max(1.0, std::abs(x[i]));
    const double h = (x[i] + h0) - x[i];
    const double d1 = (eval(i, h) - eval(i, -h)) / (2.0 * h);
    const double d2 = (eval(i, 2.0 * h) - eval(i, -2.0 * h)) / (4.0 * h);
    const double truncation = std::abs(d1 - d2) / 3.0;
    const double rounding = options.function_error * f_scale / h;
    const double tolerance = 2.0 * (truncation + rounding);
    double ratio = std::abs(analytic[i] - d1) / tolerance;
    if (std::isnan(ratio)) ratio = INFINITY;  // a NaN gradient or function value fails
    ++r.coordinates_checked;
    if (r.worst_index < 0 || ratio > r.worst_ratio) {
      r.worst_ratio = ratio;
      r.worst_index = i;
      r.worst_analytic = analytic[i];
      r.worst_numeric = d1;
      r.worst_tolerance = tolerance;
    }
  }
  r.ok = r.worst_ratio <= 1.0;
  return r;
}

}  // namespace tokenflow
