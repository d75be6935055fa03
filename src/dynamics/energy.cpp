// The interaction energy as a Lyapunov function: structure detection and the monotonicity check.
#include "tokenflow/energy.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>

#include "tokenflow/error.hpp"
#include "tokenflow/linalg.hpp"

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
      a_norm = std::max(a_norm, linalg::spectral_norm(A));
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

namespace {

void check_energy_rates_params(const AttentionParams& p, const AttentionLayer& layer) {
  if (p.kind != AttentionKind::softmax)
    throw InputError("", "attention.kind", std::string("the interaction energy's rates are those of softmax attention (got ") +
                                               to_string(p.kind) + ")");
  if (layer.heads.size() != 1)
    throw InputError("", "attention.heads",
                     "the metric slope is defined for one head (each head weights the metric by its own Z_i)");
  if (p.mask != Mask::none) throw InputError("", "attention.mask", "the interaction energy has no mask; use mask = \"none\"");
  if (p.sink > 0.0) throw InputError("", "attention.sink", "the interaction energy has no attention sink; use sink = 0");
  if (p.normalize != Normalize::none)
    throw InputError("", "attention.normalize", "the rates are those of the flow in R^d; use normalize = \"none\"");
}

}  // namespace

EnergyRates energy_rates(const AttentionParams& p, const Measure<double>& mu, double t) {
  const AttentionLayer& layer = p.layer_at(t);
  check_energy_rates_params(p, layer);
  const HeadBlocks& b = layer.heads[0];
  const Eigen::MatrixXd A = p.scale * b.K.transpose() * b.Q;  // s(x, y) = y^T A x
  const Eigen::MatrixXd C = b.W * b.V;
  if (!(A.norm() > 0.0)) throw InputError("", "attention.K", "A = scale K^T Q is zero: the energy is constant");
  if (!(C.norm() > 0.0)) throw InputError("", "attention.V", "C = W V is zero: the flow does not move");
  const Eigen::MatrixXd& X = mu.points;  // n x d
  const Eigen::VectorXd& a = mu.weights;
  const Eigen::MatrixXd S = X * A.transpose() * X.transpose();  // S_ij = s_ij = x_j^T A x_i
  const double shift = S.maxCoeff();
  // P_ij = a_i a_j exp(s_ij - shift): every sum below is exp(shift) times a sum of P's.
  const Eigen::MatrixXd P = a.asDiagonal() * (S.array() - shift).exp().matrix() * a.asDiagonal();
  const Eigen::VectorXd rows = P.rowwise().sum(), cols = P.colwise().sum().transpose();  // a_i Z_i, a_i Z'_i (shifted)
  // grad_i E / exp(shift) = 1/2 (A^T sum_j P_ij x_j + A sum_k P_ki x_k), Eq. (1)'s gradient.
  const Eigen::MatrixXd grad = 0.5 * (P * X * A + P.transpose() * X * A.transpose());  // rows: grad_i^T
  const Eigen::MatrixXd ybar = (P * X).array().colwise() / rows.array();
  const Eigen::MatrixXd gamma = ybar * C.transpose();  // rows: Gamma_i^T = (C ybar_i)^T
  const double c = C.norm() / A.norm();
  const double scale = std::exp(shift);
  EnergyRates r;
  r.energy = 0.5 * P.sum() * scale;
  r.rate = (grad.array() * gamma.array()).sum() * scale;                               // Eq. (1)
  r.slope_squared = c * (grad.rowwise().squaredNorm().array() / rows.array()).sum() * scale;  // Eq. (2)
  return r;
}

}  // namespace tokenflow
