// The Gaussian closure written out literally from docs/design.md section 1, head by head, with explicit
// inverses and matrix square roots through eigendecompositions. Slow and plain on purpose: the
// oracle that MomentField (moments.cpp) is tested against. Shares no code with moments.cpp.
#include <Eigen/Dense>
#include <cmath>
#include <stdexcept>

#include "tokenflow/gaussian.hpp"
#include "tokenflow/linalg.hpp"

namespace tokenflow {

namespace {

// X^{power} for a symmetric positive definite X (power = 1/2 or -1/2).
Eigen::MatrixXd spd_power(const Eigen::MatrixXd& X, double power) {
  const linalg::SymmetricEigen eig = linalg::symmetric_eigen(0.5 * (X + X.transpose()));
  Eigen::VectorXd values(X.rows());
  for (Eigen::Index i = 0; i < X.rows(); ++i) {
    const double v = eig.values[i];
    if (!(v > 0.0)) throw std::runtime_error("reference Gaussian closure: matrix not positive definite");
    values[i] = std::pow(v, power);
  }
  return eig.vectors * values.asDiagonal() * eig.vectors.transpose();
}

}  // namespace

AffineField reference_gaussian_field(const AttentionParams& params, double t, const Eigen::VectorXd& m,
                                     const Eigen::MatrixXd& S) {
  const Eigen::Index d = m.size();
  const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(d, d);
  AffineField f{Eigen::VectorXd::Zero(d), Eigen::MatrixXd::Zero(d, d)};
  const AttentionLayer& layer = params.layer_at(t);
  for (const HeadBlocks& h : layer.heads) {
    const Eigen::MatrixXd A = params.scale * h.K.transpose() * h.Q;  // A_h = scale K_h^T Q_h
    const Eigen::MatrixXd C = h.W * h.V;                              // C_h = W_h V_h
    // E_h[y | x] = e + E x for this head; Gamma(x) += C (e + E x).
    Eigen::VectorXd e(d);
    Eigen::MatrixXd E(d, d);
    switch (params.kind) {
      case AttentionKind::softmax:  // E_h[y|x] = m + S A_h x
        e = m;
        E = S * A;
        break;
      case AttentionKind::l2: {  // E_h[y|x] = (I + 2 g S K^T K)^{-1} (m + 2 g S K^T Q x)
        const double g = params.scale;
        const Eigen::MatrixXd R = linalg::inverse(I + 2.0 * g * S * h.K.transpose() * h.K);
        e = R * m;
        E = R * (2.0 * g * S * h.K.transpose() * h.Q);
        break;
      }
      case AttentionKind::linear:  // Gamma(x) = C (S + m m^T) A x: E[y y^T] A x
        e.setZero();
        E = (S + m * m.transpose()) * A;
        break;
      case AttentionKind::sinkhorn: {
        // E_h[y|x] = m + M_h (x - m), M_h = (A^T)^{-1} S^{-1} C_S with A -> A / epsilon,
        // C_S = 1/2 (S^{1/2} (4 S^{1/2} A^T S A S^{1/2} + I)^{1/2} S^{-1/2} - I).
        const Eigen::MatrixXd Ae = A / params.epsilon;
        const Eigen::MatrixXd Sh = spd_power(S, 0.5), Sih = spd_power(S, -0.5);
        const Eigen::MatrixXd inner = spd_power(4.0 * Sh * Ae.transpose() * S * Ae * Sh + I, 0.5);
        const Eigen::MatrixXd CS = 0.5 * (Sh * inner * Sih - I);
        const Eigen::MatrixXd Mh = linalg::inverse(Ae.transpose()) * linalg::inverse(S) * CS;
        e = m - Mh * m;
        E = Mh;
        break;
      }
      case AttentionKind::sigmoid:
        throw std::runtime_error("reference Gaussian closure: sigmoid has none");
    }
    f.offset += C * e;
    f.slope += C * E;
  }
  return f;
}

void reference_moment_rates(const AttentionParams& params, double t, const Eigen::VectorXd& m,
                            const Eigen::MatrixXd& S, Eigen::VectorXd& dm, Eigen::MatrixXd& dS) {
  // An affine field pushes N(m, S) to N(m + dt (b + M m), (I + dt M) S (I + dt M)^T) + O(dt^2).
  const AffineField f = reference_gaussian_field(params, t, m, S);
  dm = f.offset + f.slope * m;
  dS = f.slope * S + S * f.slope.transpose();
}

}  // namespace tokenflow
