// The plan's adjoint system by the Schur complement onto the smaller side
// (tokenflow/plan_adjoint.hpp).
#include "tokenflow/plan_adjoint.hpp"

#include <limits>
#include <stdexcept>
#include <string>

#include "../kernel/parallel_for.hpp"
#include "tokenflow/linalg.hpp"

namespace tokenflow {

namespace {

void check_shapes(const PlanView& plan, const PlanView& weighted) {
  if (plan.rows() < 1 || plan.cols() < 1 || weighted.rows() != plan.rows() || weighted.cols() != plan.cols())
    throw std::invalid_argument("plan_adjoint: the plan (" + std::to_string(plan.rows()) + " x " +
                                std::to_string(plan.cols()) + ") and G o plan (" + std::to_string(weighted.rows()) +
                                " x " + std::to_string(weighted.cols()) + ") must be non-empty and of one shape");
}

// The system with the elimination on the rows (n >= m is the cheap case, but any shape works):
// w_cols solves S w_cols = P^T 1 - pi^T ((P 1) / a) with w_cols[m - 1] = 0, and
// w_rows = (P 1 - pi w_cols) / a.
void eliminate_rows(const PlanView& plan, const PlanView& weighted, Eigen::VectorXd& w_rows,
                    Eigen::VectorXd& w_cols) {
  const Eigen::Index m = plan.cols();
  if (!(plan.array() >= 0.0 && plan.array() < std::numeric_limits<double>::infinity()).all())
    throw std::invalid_argument("plan_adjoint: the plan's entries must be finite and >= 0");
  const Eigen::VectorXd a = plan.rowwise().sum(), b = plan.colwise().sum().transpose();
  if (a.minCoeff() <= 0.0 || b.minCoeff() <= 0.0)
    throw std::invalid_argument("plan_adjoint: the plan has a row or column of zero mass (solve on the support)");
  const Eigen::VectorXd row_load = weighted.rowwise().sum();            // P 1
  const Eigen::VectorXd col_load = weighted.colwise().sum().transpose();  // P^T 1
  const Eigen::VectorXd inv_a = a.cwiseInverse();
  w_cols = Eigen::VectorXd::Zero(m);
  if (m > 1) {
    // S = diag(b) - B^T B with B = diag(a)^(-1/2) pi: a symmetric rank update (lower triangle).
    const PlanMatrix scaled = inv_a.cwiseSqrt().asDiagonal() * plan;
    Eigen::MatrixXd S = Eigen::MatrixXd::Zero(m - 1, m - 1);
    S.selfadjointView<Eigen::Lower>().rankUpdate(scaled.leftCols(m - 1).transpose(), -1.0);
    S.diagonal() += b.head(m - 1);
    const Eigen::VectorXd rhs =
        (col_load - plan.transpose() * row_load.cwiseProduct(inv_a)).head(m - 1);
    Eigen::VectorXd head;
    if (!linalg::cholesky_solve(S, rhs, head))  // rounding left the block indefinite (a plan near a
      head = linalg::ldlt_solve(S, rhs);        // permutation): pivoted LDL^T
    w_cols.head(m - 1) = head;
  }
  w_rows = (row_load - plan * w_cols).cwiseProduct(inv_a);
}

}  // namespace

PlanAdjoint plan_adjoint(const PlanView& plan, const PlanView& weighted) {
  check_shapes(plan, weighted);
  PlanAdjoint out;
  if (plan.cols() <= plan.rows()) {
    // Owned copies: Eigen's vectorized reductions (the row sums) split a row by its address, so a
    // view of the caller's memory would make the bits depend on where that memory lies.
    const PlanMatrix plan_own = plan, weighted_own = weighted;
    eliminate_rows(plan_own, weighted_own, out.w1, out.w2);
  } else {  // eliminate the columns instead (the system is symmetric in the two sides)
    const PlanMatrix plan_t = plan.transpose(), weighted_t = weighted.transpose();  // owned, as above
    eliminate_rows(plan_t, weighted_t, out.w2, out.w1);
    const double shift = out.w2[out.w2.size() - 1];  // the gauge (w1 + c, w2 - c) with w2[m - 1] = 0
    out.w1.array() += shift;
    out.w2.array() -= shift;
    out.w2[out.w2.size() - 1] = 0.0;
  }
  return out;
}

namespace {

// solve(plans[k], weighted[k]) for every k, the problems spread over the threads; an
// invalid_argument names the batch function (`name`) and the problem.
template <class Solve>
auto each_plan(const char* name, const std::vector<PlanView>& plans, const std::vector<PlanView>& weighted,
               const Solve& solve) {
  if (plans.size() != weighted.size())
    throw std::invalid_argument(std::string(name) + ": " + std::to_string(plans.size()) + " plans, " +
                                std::to_string(weighted.size()) + " G o plan");
  std::vector<decltype(solve(plans[0], weighted[0]))> out(plans.size());
  // Always inside the parallel region, a batch of one included: Eigen's products then run on one
  // thread, so a problem's bits do not depend on the batch or the thread count.
  parallel_for(static_cast<long>(plans.size()), [&](long k) {
    const auto i = static_cast<std::size_t>(k);
    try {
      out[i] = solve(plans[i], weighted[i]);
    } catch (const std::invalid_argument& e) {
      std::string message = name;  // appended: GCC 12 warns on a + chain here
      message += ": problem ";
      message += std::to_string(k);
      message += ": ";
      message += e.what();
      throw std::invalid_argument(message);
    }
  });
  return out;
}

}  // namespace

std::vector<PlanAdjoint> plan_adjoint_batch(const std::vector<PlanView>& plans,
                                            const std::vector<PlanView>& weighted) {
  return each_plan("plan_adjoint_batch", plans, weighted,
                   [](const PlanView& p, const PlanView& w) { return plan_adjoint(p, w); });
}

std::vector<PlanMatrix> plan_cost_gradient_batch(const std::vector<PlanView>& plans,
                                                 const std::vector<PlanView>& weighted) {
  return each_plan("plan_cost_gradient_batch", plans, weighted,
                   [](const PlanView& p, const PlanView& w) { return plan_cost_gradient(p, w); });
}

}  // namespace tokenflow
