// The converged Sinkhorn layer and its implicit backward (tokenflow/layers.hpp), and the
// reference backward by the full system.
#include <Eigen/Core>
#include <cmath>

#include "tokenflow/layers.hpp"
#include "tokenflow/linalg.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/plan_adjoint.hpp"

namespace tokenflow::nn {

namespace {
using RowMatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// d loss / d lambda = -(sum_i alpha_i r_i phi_i + sum_j beta_j c_j gamma_j) (layers.hpp).
double relaxation_gradient(const RowMatrixD& P, const PlanAdjoint& w, const double* potentials) {
  const auto n = P.rows(), m = P.cols();
  const Eigen::Map<const Eigen::VectorXd> phi(potentials, n), gamma(potentials + n, m);
  const Eigen::VectorXd r = P.rowwise().sum(), c = P.colwise().sum().transpose();
  return -(w.w1.cwiseProduct(r).dot(phi) + w.w2.cwiseProduct(c).dot(gamma));
}
}  // namespace

template <class T>
ConvergedSinkhornStats sinkhorn_converged_forward(T* log_plan, const T* cost, const T* log_a,
                                                  const T* log_b, const SinkhornOptions& options,
                                                  int n, int m, double* potentials) {
  const Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> C(cost, n, m);
  const Eigen::VectorXd la = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(log_a, n).template cast<double>();
  const Eigen::VectorXd lb = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>(log_b, m).template cast<double>();
  const DenseSoftMin op(C.template cast<double>());
  const Eigen::VectorXd a = la.array().exp(), b = lb.array().exp();
  // The weights are exp(log a): normalized by the caller up to rounding; sinkhorn wants sum 1 (an
  // unbalanced layer takes them as they are).
  const bool balanced = std::isinf(options.marginal_penalty);
  const SinkhornResult r = balanced ? sinkhorn(op, a / a.sum(), b / b.sum(), options) : sinkhorn(op, a, b, options);
  const double inv = 1.0 / options.epsilon;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j)
      log_plan[static_cast<std::ptrdiff_t>(i) * m + j] =
          static_cast<T>(la[i] + lb[j] + (r.f[i] + r.g[j] - op.cost()(i, j)) * inv);
  if (potentials) {
    Eigen::Map<Eigen::VectorXd> phi(potentials, n), gamma(potentials + n, m);
    phi = r.f * inv;
    gamma = r.g * inv;
    if (balanced) {  // the gauge <a, phi> = <b, gamma> (both weights normalized)
      const double shift = 0.5 * (gamma.dot(b) / b.sum() - phi.dot(a) / a.sum());
      phi.array() += shift;
      gamma.array() -= shift;
    }
  }
  return {r.iterations, r.marginal_error, r.converged};
}

template <class T>
void sinkhorn_implicit_backward(T* dcost, const T* dlog_plan, const T* log_plan, double epsilon, int n, int m,
                                double rho, double* drelaxation, const double* potentials) {
  const RowMatrixD P =
      Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(log_plan, n, m)
          .template cast<double>()
          .array()
          .exp()
          .matrix();
  const RowMatrixD G =
      Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(dlog_plan, n, m)
          .template cast<double>();
  // G is d loss / d log_plan = (d loss / d plan) o plan: the adjoint system's P (plan_adjoint.hpp).
  const double inv = 1.0 / epsilon;
  if (std::isinf(rho)) {  // balanced: the flow without the potentials, which trained plans make huge
    const PlanMatrix D = plan_cost_gradient(P, G);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < m; ++j) dcost[static_cast<std::ptrdiff_t>(i) * m + j] += static_cast<T>(D(i, j) * inv);
    if (drelaxation) *drelaxation += relaxation_gradient(P, plan_adjoint(P, G), potentials);
    return;
  }
  const PlanAdjoint w = unbalanced_plan_adjoint(P, G, 1.0 + epsilon / rho);
  if (drelaxation) *drelaxation += relaxation_gradient(P, w, potentials);
  const Eigen::VectorXd &alpha = w.w1, &beta = w.w2;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j)
      dcost[static_cast<std::ptrdiff_t>(i) * m + j] +=
          static_cast<T>((P(i, j) * (alpha[i] + beta[j]) - G(i, j)) * inv);
}

template ConvergedSinkhornStats sinkhorn_converged_forward<float>(float*, const float*,
                                                                  const float*, const float*,
                                                                  const SinkhornOptions&, int, int, double*);
template ConvergedSinkhornStats sinkhorn_converged_forward<double>(double*, const double*,
                                                                   const double*, const double*,
                                                                   const SinkhornOptions&, int,
                                                                   int, double*);
template void sinkhorn_implicit_backward<float>(float*, const float*, const float*, double, int, int, double,
                                                double*, const double*);
template void sinkhorn_implicit_backward<double>(double*, const double*, const double*, double, int, int, double,
                                                 double*, const double*);

namespace reference {

void sinkhorn_implicit_backward(double* dcost, const double* dlog_plan, const double* log_plan, double epsilon,
                                int n, int m, double rho) {
  // Plain loops for P, the row and column sums and the (n + m) system (unbalanced: its diagonal
  // times kappa = 1 + eps / rho, layers.hpp).
  const double kappa = std::isinf(rho) ? 1.0 : 1.0 + epsilon / rho;
  Eigen::MatrixXd P(n, m), H = Eigen::MatrixXd::Zero(n + m, n + m);
  Eigen::VectorXd rhs = Eigen::VectorXd::Zero(n + m);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) {
      P(i, j) = std::exp(log_plan[i * m + j]);
      H(i, i) += kappa * P(i, j);          // kappa r_i
      H(n + j, n + j) += kappa * P(i, j);  // kappa b_j
      H(i, n + j) = P(i, j);
      H(n + j, i) = P(i, j);
      rhs[i] += dlog_plan[i * m + j];
      rhs[n + j] += dlog_plan[i * m + j];
    }
  const Eigen::VectorXd z = linalg::minimum_norm_solve(H, rhs);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j)
      dcost[i * m + j] += (P(i, j) * (z[i] + z[n + j]) - dlog_plan[i * m + j]) / epsilon;
}

}  // namespace reference

}  // namespace tokenflow::nn
