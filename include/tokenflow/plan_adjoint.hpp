// tokenflow/plan_adjoint.hpp: the adjoint system of an entropic plan's implicit gradient (the
// backward pass of tokenflow.torch's plans and of the Sinkhorn Transformer's final layer).
//
// For a converged plan pi (n x m) of entropic OT and P = G o pi (G = dL/dpi, "o" entrywise),
// (w1, w2) solves (Eq. (4) of python/tokenflow/torch.py's derivation)
//   a o w1 + pi w2 = P 1,   b o w2 + pi^T w1 = P^T 1,   a = pi 1, b = pi^T 1,
// that is H [w1; w2] = [P 1; P^T 1] with H = [[diag(a), pi], [pi^T, diag(b)]]. Then
//   dL/dC_ij = (pi_ij (w1_i + w2_j) - P_ij) / eps,   dL/da = w1,   dL/db = w2.
// H is positive semidefinite with the one null vector (1, -1) (the gauge (f + c, g - c)); the
// solution returned is the one with w2_{m-1} = 0.
//
// How: the Schur complement onto the smaller side. With m <= n, eliminating w1 = (P 1 - pi w2) / a
// leaves the m x m system S w2 = P^T 1 - pi^T ((P 1) / a), S = diag(b) - pi^T diag(1 / a) pi
// (symmetric positive semidefinite, null vector 1: S 1 = b - pi^T 1 = 0). With w2_{m-1} = 0 it is
// S's leading (m - 1) block, positive definite (a null vector of it, padded with 0, would be one
// of S with last entry 0), factored by Cholesky (a pivoted LDL^T where rounding leaves it
// indefinite). Cost: n m^2 / 2 multiply-adds for pi^T diag(1 / a) pi (a blocked rank update) and
// m^3 / 6 for the factor, against (n + m)^3 / 3 for the full system; memory O(m^2 + n m). With
// n < m the roles swap (eliminate w2, solve for w1 on the n side), then (w1 + c, w2 - c) moves the
// gauge to w2_{m-1} = 0.
//
// Accuracy: S and the leading block of H have the same small eigenvalues up to a factor of 2
// (both are set by 1 - sigma_2 of the plan's normalized kernel), so the solution's forward error
// is that of a backward-stable solve of H's block: O(u cond). tests/cpp/test_plan_adjoint.cpp
// checks it against reference_plan_adjoint with that bound. On near-permutation plans (entries
// down to 1e-100 and below, as trained models make) cond is astronomical: the potentials grow to
// 1e15-1e50 while dL/dC is their small differences, and digits cancel (measured by
// bench/adjoint_accuracy.py; docs/sinkhorn-transformer.md, Limits).
#pragma once

#include <Eigen/Core>
#include <vector>

namespace tokenflow {

using PlanMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using PlanView = Eigen::Ref<const PlanMatrix>;  // a row-major matrix or a view of one (no copy)

struct PlanAdjoint {
  Eigen::VectorXd w1;  // n
  Eigen::VectorXd w2;  // m, w2[m - 1] = 0
};

// plan: pi (n x m, n, m >= 1, entries >= 0, every row and column sum > 0); weighted: P = G o pi
// (n x m). Throws std::invalid_argument on other shapes, a negative or non-finite entry of pi, or
// a zero row or column sum.
PlanAdjoint plan_adjoint(const PlanView& plan, const PlanView& weighted);

// plan_adjoint(plans[k], weighted[k]) for every k, the problems spread over the OpenMP threads
// (one problem at a time per thread, each computed as alone: the same bits for any thread count
// and wherever the inputs lie in memory: plan_adjoint works on its own aligned copies).
// The first exception is rethrown once all have stopped (an invalid_argument naming its problem).
std::vector<PlanAdjoint> plan_adjoint_batch(const std::vector<PlanView>& plans,
                                            const std::vector<PlanView>& weighted);

// D = pi o (w1 + w2^T) - P of plan_adjoint's system (dL/dC = D / eps), accurate on every plan: from
// plan_adjoint's potentials when D's row and column sums are 0 to rounding (an accurate D's are),
// else by plan_cost_gradient_by_tree. The Sinkhorn Transformer's implicit layer and
// tokenflow.torch's cost gradient use it. Throws as plan_adjoint.
PlanMatrix plan_cost_gradient(const PlanView& plan, const PlanView& weighted);

// D without the potentials: the adjoint's flow solved in the fundamental-cut basis of a maximum
// spanning tree of the plan (src/ot/plan_cost_gradient.cpp). Accurate where the potentials lose
// the digits, on near-permutation plans (entries down to 1e-170 and below: they reach 1e15-1e50
// there; bench/adjoint_accuracy.py); costs (n + m)^3 / 3 plus the sum over entries of their tree
// path's length squared. Throws as plan_adjoint.
PlanMatrix plan_cost_gradient_by_tree(const PlanView& plan, const PlanView& weighted);

// plan_cost_gradient of every problem, spread over the threads as plan_adjoint_batch.
std::vector<PlanMatrix> plan_cost_gradient_batch(const std::vector<PlanView>& plans,
                                                 const std::vector<PlanView>& weighted);

// Unbalanced transport (ot.hpp Eq. (U1), marginal penalty rho): the adjoint system of the fixed
// point pi 1 = a e^{-f/rho}, pi^T 1 = b e^{-g/rho} has its diagonal blocks multiplied by kappa = 1 +
// eps / rho > 1: H_kappa = [[kappa diag(r), pi], [pi^T, kappa diag(c)]], r = pi 1, c = pi^T 1
// (python/tokenflow/torch.py, (6)). It is positive definite (H is positive semidefinite with the
// null vector (1, -1), on which (kappa - 1) diag(r, c) is positive): no gauge, w2[m - 1] free. Solved
// through the Schur complement onto the smaller side, kappa diag(c) - pi^T diag(1 / (kappa r)) pi >=
// (kappa - 1 / kappa) diag(c), by Cholesky (src/ot/plan_adjoint_unbalanced.cpp). Throws as plan_adjoint,
// and std::invalid_argument unless kappa > 1.
PlanAdjoint unbalanced_plan_adjoint(const PlanView& plan, const PlanView& weighted, double kappa);

// The reference: the full (n + m - 1) system H without its last row and column, dense LU with
// full pivoting, in plain loops (src/ot/plan_adjoint_reference.cpp); the tests' oracle.
PlanAdjoint reference_plan_adjoint(const PlanView& plan, const PlanView& weighted);

}  // namespace tokenflow
