#pragma once
// Dense decompositions of small and medium matrices (d x d covariances, k x k histories), compiled
// once. Eigen's decompositions are templates: every translation unit that names one compiles all
// of it again, 5 to 20 s per unit with g++ -O3 (SelfAdjointEigenSolver about 5 s; EigenSolver, LU,
// LDLT and an inverse together about 12 s; measured on AMD EPYC Zen 3). These wrappers over
// MatrixXd put each decomposition in one object file (src/linalg/linalg.cpp), so the library, the
// CLI and the tests include this header instead of <Eigen/Eigenvalues> or <Eigen/LU>. They run
// Eigen's own algorithms on the same input, so results are those of calling Eigen directly.
//
// Shapes: S symmetric n x n (only its lower triangle is read, as Eigen does); A any m x n unless a
// function says square; B the right-hand sides, n x k. Inputs are non-empty (only spectral_norm
// accepts an empty matrix, and gives 0). Nothing here checks finiteness: callers validate their
// inputs first.
#include <Eigen/Core>

namespace tokenflow::linalg {

// S = vectors diag(values) vectors^T, values ascending, vectors orthonormal (Eigen's
// SelfAdjointEigenSolver: Householder tridiagonalization, then implicit symmetric QR).
struct SymmetricEigen {
  Eigen::VectorXd values;
  Eigen::MatrixXd vectors;
};
SymmetricEigen symmetric_eigen(const Eigen::Ref<const Eigen::MatrixXd>& S);
// The eigenvalues of S alone, ascending (cheaper: no vectors are accumulated).
Eigen::VectorXd symmetric_eigenvalues(const Eigen::Ref<const Eigen::MatrixXd>& S);

// The eigenvalues of a square, possibly non-symmetric A (real Schur form; Eigen's EigenSolver),
// in the order the solver returns them.
Eigen::VectorXcd eigenvalues(const Eigen::Ref<const Eigen::MatrixXd>& A);

// Singular values of A, descending (two-sided Jacobi SVD), and the largest of them (0 when empty).
Eigen::VectorXd singular_values(const Eigen::Ref<const Eigen::MatrixXd>& A);
double spectral_norm(const Eigen::Ref<const Eigen::MatrixXd>& A);
// A's SVD with full U and V: A = U diag(singular values) V^T.
struct Svd {
  Eigen::MatrixXd U;
  Eigen::VectorXd singular_values;
  Eigen::MatrixXd V;
};
Svd svd(const Eigen::Ref<const Eigen::MatrixXd>& A);

// X with A X = B for square invertible A (LU with partial pivoting), and A^{-1} by the same LU.
Eigen::MatrixXd lu_solve(const Eigen::Ref<const Eigen::MatrixXd>& A, const Eigen::Ref<const Eigen::MatrixXd>& B);
Eigen::MatrixXd inverse(const Eigen::Ref<const Eigen::MatrixXd>& A);
// X with A X = B by LU with full pivoting (rank-revealing; for nearly singular A).
Eigen::MatrixXd full_lu_solve(const Eigen::Ref<const Eigen::MatrixXd>& A, const Eigen::Ref<const Eigen::MatrixXd>& B);

// x with S x = b for symmetric S, positive or negative semi-definite (robust Cholesky
// P^T L D L^T P, Eigen's LDLT).
Eigen::VectorXd ldlt_solve(const Eigen::Ref<const Eigen::MatrixXd>& S, const Eigen::Ref<const Eigen::VectorXd>& b);
// x with S x = b by Cholesky (Eigen's blocked LLT) for symmetric positive definite S; false (x
// unset) when the factorization meets a pivot <= 0 (S not numerically positive definite).
bool cholesky_solve(const Eigen::Ref<const Eigen::MatrixXd>& S, const Eigen::Ref<const Eigen::VectorXd>& b,
                    Eigen::VectorXd& x);
// L lower triangular with S = L L^T, for symmetric positive definite S (Eigen's LLT).
Eigen::MatrixXd cholesky_lower(const Eigen::Ref<const Eigen::MatrixXd>& S);

// argmin_x |A x - b| for m x n A, m >= n, by column-pivoting Householder QR; a rank-deficient A
// gives a finite solution.
Eigen::VectorXd least_squares(const Eigen::Ref<const Eigen::MatrixXd>& A, const Eigen::Ref<const Eigen::VectorXd>& b);
// The minimum-norm least-squares solution argmin |x| over argmin |A x - b|, and the Moore-Penrose
// pseudo-inverse A^+ (complete orthogonal decomposition, rank by Eigen's default threshold).
Eigen::VectorXd minimum_norm_solve(const Eigen::Ref<const Eigen::MatrixXd>& A, const Eigen::Ref<const Eigen::VectorXd>& b);
Eigen::MatrixXd pseudo_inverse(const Eigen::Ref<const Eigen::MatrixXd>& A);
// The m x m orthogonal factor Q of A = Q R (Householder QR).
Eigen::MatrixXd householder_q(const Eigen::Ref<const Eigen::MatrixXd>& A);

}  // namespace tokenflow::linalg
