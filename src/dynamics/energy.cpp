// The interaction energy as a Lyapunov function: structure detection and the monotonicity check.
#include "tokenflow/energy.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>

namespace tokenflow {

bool has_energy_gradient_structure(const AttentionParams& p) {
  if (p.kind != AttentionKind::softmax || p.heads != 1 || p.layers.size() != 1 || p.mask != Mask::none ||
      p.sink > 0.0)
    return false;
  const HeadBlocks& b = p.layers[0].heads[0];
  const Eigen::MatrixXd A = p.scale * b.K.transpose() * b.Q;
  const Eigen::MatrixXd C = b.W * b.V;
  const double size = A.norm();
  if (!(size > 0.0) || (A - A.transpose()).norm() > 1e-9 * size) return false;
  // C = c A: the least-squares c, then the residual.
  const double c = (C.array() * A.array()).sum() / (size * size);
  return c > 0.0 && (C - c * A).norm() <= 1e-9 * std::max(C.norm(), 1e-300);
}

EnergyMonotonicity energy_monotonicity(const std::vector<FrameDiagnostics>& frames, const AttentionParams& p,
                                       Eigen::Index n, bool single_precision) {
  // Allowance (relative): the energy is a sum over rows of sums over columns of positive terms,
  // each sum of n terms in double with relative error <= (n - 1) eps, so <= 2 n eps in all; the
  // logits s_ij carry a relative rounding ~ 4 eps_T (eps_T of the positions' precision), i.e. an
  // absolute error 4 eps_T |A|_2 R^2 (R the largest norm) that exp turns into a relative one.
  // In exact arithmetic E never decreases, and the integrator's error is of higher order than
  // the increase along a gradient flow (the increase is dt c sum a_i Z_i |A ybar_i|^2, the error
  // of a stable step is O(dt^{p+1}) times the same squared gradient), so what remains is rounding.
  constexpr double eps64 = std::numeric_limits<double>::epsilon();
  const double epsT = single_precision ? double(std::numeric_limits<float>::epsilon()) : eps64;
  double a_norm = 0.0;
  for (const auto& layer : p.layers)
    for (const auto& b : layer.heads) {
      const Eigen::MatrixXd A = p.scale * b.K.transpose() * b.Q;
      a_norm = std::max(a_norm, Eigen::JacobiSVD<Eigen::MatrixXd>(A).singularValues()(0));
    }
  double radius = 0.0;
  for (const auto& f : frames) radius = std::max(radius, f.max_norm);
  EnergyMonotonicity m;
  m.allowance = 2.0 * double(n) * eps64 + 4.0 * epsT * (1.0 + a_norm * radius * radius);
  m.largest_relative_decrease = -std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k + 1 < frames.size(); ++k) {
    const double e0 = frames[k].energy, e1 = frames[k + 1].energy;
    if (std::isnan(e0) || std::isnan(e1)) {
      m.monotone = false;
      m.largest_relative_decrease = std::numeric_limits<double>::quiet_NaN();
      return m;
    }
    if (std::isinf(e0)) continue;  // overflowed: nothing to compare
    m.largest_relative_decrease = std::max(m.largest_relative_decrease, (e0 - e1) / std::abs(e0));
  }
  if (frames.size() < 2) m.largest_relative_decrease = 0.0;
  m.monotone = m.largest_relative_decrease <= m.allowance;
  return m;
}

}  // namespace tokenflow
