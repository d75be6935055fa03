// The unbalanced plan's adjoint system (tokenflow/plan_adjoint.hpp, unbalanced_plan_adjoint): the
// Schur complement of H_kappa onto the smaller side, positive definite, by Cholesky.
#include <limits>
#include <stdexcept>
#include <string>

#include "tokenflow/linalg.hpp"
#include "tokenflow/plan_adjoint.hpp"

namespace tokenflow {

namespace {

// Eliminating the rows: w_cols solves (kappa diag(c) - pi^T diag(1 / (kappa r)) pi) w_cols =
// P^T 1 - pi^T ((P 1) / (kappa r)), and w_rows = (P 1 - pi w_cols) / (kappa r).
void eliminate_rows_unbalanced(const PlanMatrix& plan, const PlanMatrix& weighted, double kappa,
                               Eigen::VectorXd& w_rows, Eigen::VectorXd& w_cols) {
  const Eigen::Index m = plan.cols();
  const Eigen::VectorXd r = plan.rowwise().sum(), c = plan.colwise().sum().transpose();
  if (r.minCoeff() <= 0.0 || c.minCoeff() <= 0.0)
    throw std::invalid_argument("unbalanced_plan_adjoint: the plan has a row or column of zero mass (solve on the support)");
  const Eigen::VectorXd inv = (kappa * r).cwiseInverse();
  const Eigen::VectorXd row_load = weighted.rowwise().sum(), col_load = weighted.colwise().sum().transpose();
  const PlanMatrix scaled = inv.cwiseSqrt().asDiagonal() * plan;
  Eigen::MatrixXd S = Eigen::MatrixXd::Zero(m, m);
  S.selfadjointView<Eigen::Lower>().rankUpdate(scaled.transpose(), -1.0);
  S.diagonal() += kappa * c;
  const Eigen::VectorXd rhs = col_load - plan.transpose() * row_load.cwiseProduct(inv);
  if (!linalg::cholesky_solve(S, rhs, w_cols))  // S >= (kappa - 1 / kappa) diag(c) > 0 in exact arithmetic;
    w_cols = linalg::ldlt_solve(S, rhs);        // rounding at kappa near 1: pivoted LDL^T
  w_rows = (row_load - plan * w_cols).cwiseProduct(inv);
}

}  // namespace

PlanAdjoint unbalanced_plan_adjoint(const PlanView& plan, const PlanView& weighted, double kappa) {
  if (plan.rows() < 1 || plan.cols() < 1 || weighted.rows() != plan.rows() || weighted.cols() != plan.cols())
    throw std::invalid_argument("unbalanced_plan_adjoint: the plan and G o plan must be non-empty and of one shape");
  if (!(kappa > 1.0) || !(kappa < std::numeric_limits<double>::infinity()))
    throw std::invalid_argument("unbalanced_plan_adjoint: kappa = 1 + eps / rho must be finite and > 1");
  if (!(plan.array() >= 0.0 && plan.array() < std::numeric_limits<double>::infinity()).all())
    throw std::invalid_argument("unbalanced_plan_adjoint: the plan's entries must be finite and >= 0");
  PlanAdjoint out;
  if (plan.cols() <= plan.rows())  // owned copies, as plan_adjoint (the bits do not depend on addresses)
    eliminate_rows_unbalanced(PlanMatrix(plan), PlanMatrix(weighted), kappa, out.w1, out.w2);
  else
    eliminate_rows_unbalanced(PlanMatrix(plan.transpose()), PlanMatrix(weighted.transpose()), kappa, out.w2, out.w1);
  return out;
}

}  // namespace tokenflow
