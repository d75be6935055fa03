// tokenflow/gradient_check.hpp: a finite-difference gradient checker (a library feature, in the
// spirit of Ceres' GradientChecker), used on every backward pass of tokenflow/layers.hpp and on
// the whole Sinkhorn Transformer.
//
// Contract. f: R^p -> R evaluated in float64 with a relative evaluation error of at most
// `function_error` (|fl(f) - f| <= function_error * f_scale, where f_scale is the magnitude of the
// terms f sums; the caller derives it from the arithmetic, e.g. (operations on the longest path) x
// 2^-53). For each coordinate i (or a random subset of them) the checker forms central differences
// with steps h and 2h,
//   D_h = (f(x + h e_i) - f(x - h e_i)) / 2h,   D_2h likewise,
// where h = cbrt(function_error) * max(1, |x_i|) balances truncation (~h^2 f''') against rounding
// (~function_error f_scale / h). The error of D_h is then bounded by the two measured parts
//   truncation:  |D_h - D_2h| / 3 (Richardson: the h^2 term of D_2h is 4 times that of D_h)
//   rounding:    function_error * f_scale / h (each of the two evaluations off by at most
//                function_error * f_scale)
// and the check is |analytic_i - D_h| <= 2 (truncation + rounding), the factor 2 covering the
// O(h^4) terms the Richardson estimate leaves out. Nothing in the tolerance is tuned: it is the
// measured error bound of the finite difference itself.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <functional>
#include <string>

namespace tokenflow {

struct GradientCheckOptions {
  double function_error = 1e-13;  // relative evaluation error of f (see above)
  double f_scale = 0.0;           // magnitude of f's terms; 0: |f(x)| + 1
  int max_coordinates = 0;        // check at most this many coordinates (0: all), chosen at random
  std::uint64_t seed = 0;         // for the choice of coordinates
};

struct GradientCheckResult {
  bool ok = true;
  Eigen::Index coordinates_checked = 0;
  double worst_ratio = 0.0;  // max_i |analytic_i - D_h| / tolerance_i (<= 1 passes)
  Eigen::Index worst_index = -1;
  double worst_analytic = 0.0, worst_numeric = 0.0, worst_tolerance = 0.0;
  std::string report() const;  // one line for test failures
};

// Compares `analytic` (the gradient of f at x, size p) with central differences of f.
GradientCheckResult check_gradient(const std::function<double(const Eigen::VectorXd&)>& f,
                                   const Eigen::VectorXd& x, const Eigen::VectorXd& analytic,
                                   const GradientCheckOptions& options = {});

}  // namespace tokenflow
