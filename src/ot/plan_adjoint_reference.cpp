// reference_plan_adjoint (tokenflow/plan_adjoint.hpp): the full system in plain loops, the tests'
// oracle for the Schur complement.
#include "tokenflow/linalg.hpp"
#include "tokenflow/plan_adjoint.hpp"

namespace tokenflow {

PlanAdjoint reference_plan_adjoint(const PlanView& plan, const PlanView& weighted) {
  const Eigen::Index n = plan.rows(), m = plan.cols(), size = n + m - 1;  // w2[m - 1] = 0: dropped
  Eigen::MatrixXd H = Eigen::MatrixXd::Zero(size, size);
  Eigen::VectorXd rhs = Eigen::VectorXd::Zero(size);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j) {
      H(i, i) += plan(i, j);  // a_i
      rhs[i] += weighted(i, j);
      if (j == m - 1) continue;
      H(n + j, n + j) += plan(i, j);  // b_j
      H(i, n + j) = plan(i, j);
      H(n + j, i) = plan(i, j);
      rhs[n + j] += weighted(i, j);
    }
  const Eigen::VectorXd z = linalg::full_lu_solve(H, rhs);
  PlanAdjoint out{z.head(n), Eigen::VectorXd::Zero(m)};
  for (Eigen::Index j = 0; j + 1 < m; ++j) out.w2[j] = z[n + j];
  return out;
}

}  // namespace tokenflow
