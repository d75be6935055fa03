// The one translation unit that compiles Eigen's decompositions (linalg.hpp says why).
#include "tokenflow/linalg.hpp"

#include <Eigen/Cholesky>
#include <Eigen/Eigenvalues>
#include <Eigen/LU>
#include <Eigen/QR>
#include <Eigen/SVD>

namespace tokenflow::linalg {

SymmetricEigen symmetric_eigen(const Eigen::Ref<const Eigen::MatrixXd>& S) {
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(S);
  return {eig.eigenvalues(), eig.eigenvectors()};
}

Eigen::VectorXd symmetric_eigenvalues(const Eigen::Ref<const Eigen::MatrixXd>& S) {
  return Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(S, Eigen::EigenvaluesOnly).eigenvalues();
}

Eigen::VectorXcd eigenvalues(const Eigen::Ref<const Eigen::MatrixXd>& A) {
  return Eigen::EigenSolver<Eigen::MatrixXd>(A, false).eigenvalues();
}

Eigen::VectorXd singular_values(const Eigen::Ref<const Eigen::MatrixXd>& A) {
  return Eigen::JacobiSVD<Eigen::MatrixXd>(A).singularValues();
}

double spectral_norm(const Eigen::Ref<const Eigen::MatrixXd>& A) {
  if (A.size() == 0) return 0.0;
  return singular_values(A)(0);
}

Svd svd(const Eigen::Ref<const Eigen::MatrixXd>& A) {
  const Eigen::JacobiSVD<Eigen::MatrixXd> s(A, Eigen::ComputeFullU | Eigen::ComputeFullV);
  return {s.matrixU(), s.singularValues(), s.matrixV()};
}

Eigen::MatrixXd lu_solve(const Eigen::Ref<const Eigen::MatrixXd>& A, const Eigen::Ref<const Eigen::MatrixXd>& B) {
  return A.partialPivLu().solve(B);
}

Eigen::MatrixXd inverse(const Eigen::Ref<const Eigen::MatrixXd>& A) { return A.partialPivLu().inverse(); }

Eigen::MatrixXd full_lu_solve(const Eigen::Ref<const Eigen::MatrixXd>& A, const Eigen::Ref<const Eigen::MatrixXd>& B) {
  return A.fullPivLu().solve(B);
}

Eigen::VectorXd ldlt_solve(const Eigen::Ref<const Eigen::MatrixXd>& S, const Eigen::Ref<const Eigen::VectorXd>& b) {
  return S.ldlt().solve(b);
}

bool cholesky_solve(const Eigen::Ref<const Eigen::MatrixXd>& S, const Eigen::Ref<const Eigen::VectorXd>& b,
                    Eigen::VectorXd& x) {
  const Eigen::LLT<Eigen::MatrixXd, Eigen::Lower> llt(S);
  if (llt.info() != Eigen::Success) return false;
  x = llt.solve(b);
  return true;
}

Eigen::MatrixXd cholesky_lower(const Eigen::Ref<const Eigen::MatrixXd>& S) { return S.llt().matrixL(); }

Eigen::VectorXd least_squares(const Eigen::Ref<const Eigen::MatrixXd>& A, const Eigen::Ref<const Eigen::VectorXd>& b) {
  return A.colPivHouseholderQr().solve(b);
}

Eigen::VectorXd minimum_norm_solve(const Eigen::Ref<const Eigen::MatrixXd>& A, const Eigen::Ref<const Eigen::VectorXd>& b) {
  return A.completeOrthogonalDecomposition().solve(b);
}

Eigen::MatrixXd pseudo_inverse(const Eigen::Ref<const Eigen::MatrixXd>& A) {
  return A.completeOrthogonalDecomposition().pseudoInverse();
}

Eigen::MatrixXd householder_q(const Eigen::Ref<const Eigen::MatrixXd>& A) {
  return Eigen::HouseholderQR<Eigen::MatrixXd>(A).householderQ();
}

}  // namespace tokenflow::linalg
