// linalg.hpp: each decomposition on fresh random matrices, checked by what it must satisfy
// (reconstruction, orthonormality, residuals, Penrose's conditions), not against Eigen's own output.
// Tolerances: the decompositions are backward stable, so a reconstruction or a residual is a few
// units of roundoff times n times the size of what it reconstructs; 64 n u leaves room for the
// constant of each algorithm (Householder and Jacobi sweeps, QR iterations) without hiding a wrong
// result, which is off by O(1).
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <complex>
#include <random>

#include "test_util.hpp"
#include "tokenflow/linalg.hpp"

namespace tokenflow {
namespace {

using testing::fresh_seed;
using testing::kUnit64;
using testing::random_matrix;

double allowance(Eigen::Index n) { return 64.0 * double(n) * kUnit64; }

Eigen::MatrixXd random_symmetric(std::mt19937_64& rng, Eigen::Index n) {
  const Eigen::MatrixXd G = random_matrix(rng, n, n, 1.0);
  return 0.5 * (G + G.transpose());
}

TEST(Linalg, SymmetricEigenReconstructsWithOrthonormalVectorsAndAscendingValues) {
  std::mt19937_64 rng(fresh_seed());
  for (Eigen::Index n : {1, 2, 3, 7, 24}) {
    const Eigen::MatrixXd S = random_symmetric(rng, n);
    const linalg::SymmetricEigen e = linalg::symmetric_eigen(S);
    const Eigen::MatrixXd I = Eigen::MatrixXd::Identity(n, n);
    EXPECT_LE((e.vectors * e.values.asDiagonal() * e.vectors.transpose() - S).norm(), allowance(n) * S.norm()) << n;
    EXPECT_LE((e.vectors.transpose() * e.vectors - I).norm(), allowance(n)) << n;
    for (Eigen::Index i = 1; i < n; ++i) EXPECT_LE(e.values[i - 1], e.values[i]);
    // The values alone are the same eigenvalues (same tridiagonalization and QR iteration).
    EXPECT_LE((linalg::symmetric_eigenvalues(S) - e.values).cwiseAbs().maxCoeff(), allowance(n) * S.norm()) << n;
  }
}

TEST(Linalg, GeneralEigenvaluesHaveTheTraceAndSatisfyTheirEquation) {
  std::mt19937_64 rng(fresh_seed());
  for (Eigen::Index n : {1, 2, 5, 12}) {
    const Eigen::MatrixXd A = random_matrix(rng, n, n, 1.0);
    const Eigen::VectorXcd lambda = linalg::eigenvalues(A);
    ASSERT_EQ(lambda.size(), n);
    // The computed eigenvalues are exact for A + E with |E| <= c n u |A| (backward stability): their
    // sum is trace(A + E), within sqrt(n) |E|_F of trace(A); and each makes A + E - lambda I
    // singular, so sigma_min(A - lambda I) <= |E|_2, plus the SVD's own rounding of the shifted
    // matrix, whatever the eigenvalue's condition number.
    EXPECT_LE(std::abs(lambda.sum() - std::complex<double>(A.trace(), 0.0)),
              std::sqrt(double(n)) * allowance(n) * A.norm()) << n;
    for (Eigen::Index k = 0; k < n; ++k) {
      const Eigen::MatrixXcd shifted = A.cast<std::complex<double>>() -
                                       lambda[k] * Eigen::MatrixXcd::Identity(n, n);
      // Real and imaginary parts as one real 2n x 2n matrix [[Re, -Im], [Im, Re]], which is
      // singular exactly when the complex matrix is.
      Eigen::MatrixXd real(2 * n, 2 * n);
      real << shifted.real(), -shifted.imag(), shifted.imag(), shifted.real();
      const Eigen::VectorXd s = linalg::singular_values(real);
      EXPECT_LE(s[s.size() - 1], allowance(n) * A.norm() + allowance(2 * n) * real.norm()) << n << " " << k;
    }
  }
  // A real rotation has the conjugate pair e^{+-i theta}.
  const double theta = 0.7;
  Eigen::MatrixXd R(2, 2);
  R << std::cos(theta), -std::sin(theta), std::sin(theta), std::cos(theta);
  const Eigen::VectorXcd pair = linalg::eigenvalues(R);
  EXPECT_NEAR(std::abs(pair[0].imag()), std::sin(theta), allowance(2));
  EXPECT_NEAR(pair[0].real(), std::cos(theta), allowance(2));
}

TEST(Linalg, SvdReconstructsAndTheSpectralNormBoundsEveryDirection) {
  std::mt19937_64 rng(fresh_seed());
  for (auto [m, n] : {std::pair<Eigen::Index, Eigen::Index>{1, 1}, {3, 3}, {6, 4}, {4, 9}}) {
    const Eigen::MatrixXd A = random_matrix(rng, m, n, 1.0);
    const linalg::Svd s = linalg::svd(A);
    const Eigen::Index k = std::min(m, n);
    Eigen::MatrixXd Sigma = Eigen::MatrixXd::Zero(m, n);
    Sigma.topLeftCorner(k, k) = s.singular_values.asDiagonal();
    EXPECT_LE((s.U * Sigma * s.V.transpose() - A).norm(), allowance(m + n) * A.norm());
    EXPECT_LE((s.U.transpose() * s.U - Eigen::MatrixXd::Identity(m, m)).norm(), allowance(m + n));
    EXPECT_LE((s.V.transpose() * s.V - Eigen::MatrixXd::Identity(n, n)).norm(), allowance(m + n));
    EXPECT_LE((linalg::singular_values(A) - s.singular_values).cwiseAbs().maxCoeff(), allowance(m + n) * A.norm());
    for (Eigen::Index i = 1; i < k; ++i) EXPECT_GE(s.singular_values[i - 1], s.singular_values[i]);
    const double norm = linalg::spectral_norm(A);
    EXPECT_EQ(norm, linalg::singular_values(A)(0));
    // |A v| <= |A|_2 |v| for any v, with equality at the top right singular vector.
    const Eigen::VectorXd v = random_matrix(rng, n, 1, 1.0);
    EXPECT_LE((A * v).norm(), norm * v.norm() * (1 + allowance(m + n)));
    EXPECT_NEAR((A * s.V.col(0)).norm(), norm, allowance(m + n) * norm);
  }
  EXPECT_EQ(linalg::spectral_norm(Eigen::MatrixXd(0, 0)), 0.0);
}

TEST(Linalg, SolvesLeaveBackwardStableResiduals) {
  std::mt19937_64 rng(fresh_seed());
  for (Eigen::Index n : {1, 3, 10}) {
    const Eigen::MatrixXd A = random_matrix(rng, n, n, 1.0) + 4.0 * Eigen::MatrixXd::Identity(n, n);
    const Eigen::MatrixXd B = random_matrix(rng, n, 3, 1.0);
    // Residual of a backward-stable solve: |A X - B| <= c n u |A| |X|.
    const Eigen::MatrixXd X = linalg::lu_solve(A, B);
    EXPECT_LE((A * X - B).norm(), allowance(n) * A.norm() * X.norm()) << n;
    const Eigen::MatrixXd Xf = linalg::full_lu_solve(A, B);
    EXPECT_LE((A * Xf - B).norm(), allowance(n) * A.norm() * Xf.norm()) << n;
    const Eigen::MatrixXd Ainv = linalg::inverse(A);
    EXPECT_LE((A * Ainv - Eigen::MatrixXd::Identity(n, n)).norm(), allowance(n) * A.norm() * Ainv.norm()) << n;
    // LDLT on a positive and a negative definite matrix (its diagonal pivoting is backward stable
    // for definite matrices, which is what linalg.hpp promises it for; on indefinite ones it is not).
    const Eigen::MatrixXd G = random_matrix(rng, n, n, 1.0);
    const Eigen::MatrixXd P = G * G.transpose() + Eigen::MatrixXd::Identity(n, n);
    for (const Eigen::MatrixXd& S : {P, Eigen::MatrixXd(-P)}) {
      const Eigen::VectorXd b = random_matrix(rng, n, 1, 1.0);
      const Eigen::VectorXd x = linalg::ldlt_solve(S, b);
      EXPECT_LE((S * x - b).norm(), allowance(n) * S.norm() * x.norm()) << n;
    }
    const Eigen::MatrixXd SPD = G * G.transpose() + Eigen::MatrixXd::Identity(n, n);
    const Eigen::MatrixXd L = linalg::cholesky_lower(SPD);
    EXPECT_LE((L * L.transpose() - SPD).norm(), allowance(n) * SPD.norm()) << n;
    EXPECT_EQ(L.triangularView<Eigen::StrictlyUpper>().toDenseMatrix().cwiseAbs().maxCoeff(), 0.0);
  }
}

TEST(Linalg, LeastSquaresAndPseudoInverseMeetTheirConditions) {
  std::mt19937_64 rng(fresh_seed());
  const Eigen::Index m = 12, n = 4;
  const Eigen::MatrixXd A = random_matrix(rng, m, n, 1.0);
  const Eigen::VectorXd b = random_matrix(rng, m, 1, 1.0);
  // Normal equations: the residual is orthogonal to A's columns.
  const Eigen::VectorXd x = linalg::least_squares(A, b);
  EXPECT_LE((A.transpose() * (A * x - b)).norm(), allowance(m) * A.norm() * (A.norm() * x.norm() + b.norm()));
  // A rank-deficient A (an exactly zero column, so that the rank is 3 whatever the rounding): a
  // finite solution with the residual orthogonal to the columns.
  Eigen::MatrixXd D = A;
  D.col(3).setZero();
  const Eigen::VectorXd xd = linalg::least_squares(D, b);
  ASSERT_TRUE(xd.allFinite());
  EXPECT_LE((D.transpose() * (D * xd - b)).norm(), allowance(m) * D.norm() * (D.norm() * xd.norm() + b.norm()));
  // On D's range its conditioning is kappa = sigma_1 / sigma_3 (the fourth singular value is 0).
  // A least-squares solution's sensitivity to rounding is kappa |x| plus kappa^2 |r| / |D| (the
  // residual r is at most |b|): both terms are in the bounds below.
  const Eigen::VectorXd sigma = linalg::singular_values(D);
  const double kappa = sigma[0] / sigma[2];
  const double sensitivity = kappa + kappa * kappa * b.norm() / (D.norm() * std::max(xd.norm(), 1e-300));
  // Minimum norm: of the solutions of the deficient problem, the one orthogonal to D's kernel
  // (e_4), and the pseudo-inverse gives it as well.
  const Eigen::VectorXd z = linalg::minimum_norm_solve(D, b);
  EXPECT_LE(std::abs(z[3]), allowance(m) * sensitivity * z.norm());
  EXPECT_LE((z.head(3) - xd.head(3)).norm(), allowance(m) * sensitivity * z.norm());
  const Eigen::MatrixXd P = linalg::pseudo_inverse(D);
  EXPECT_LE((P * b - z).norm(), allowance(m) * sensitivity * z.norm());
  // Penrose: D P D = D and P D P = P (P's error is kappa^2 u |P| relative, D P D's kappa u |D|).
  EXPECT_LE((D * P * D - D).norm(), allowance(m) * kappa * kappa * D.norm());
  EXPECT_LE((P * D * P - P).norm(), allowance(m) * kappa * kappa * P.norm());
  // Householder Q: orthogonal, and Q^T A is upper triangular.
  const Eigen::MatrixXd Q = linalg::householder_q(A);
  ASSERT_EQ(Q.rows(), m);
  ASSERT_EQ(Q.cols(), m);
  EXPECT_LE((Q.transpose() * Q - Eigen::MatrixXd::Identity(m, m)).norm(), allowance(m));
  const Eigen::MatrixXd R = Q.transpose() * A;
  EXPECT_LE(R.triangularView<Eigen::StrictlyLower>().toDenseMatrix().norm(), allowance(m) * A.norm());
}

}  // namespace
}  // namespace tokenflow
