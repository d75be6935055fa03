// The reference Sinkhorn: a dense cost matrix, plain double loops, log-sum-exp written out.
// Same iteration as the operator loop (f from g, then g, then the row error), so iteration
// counts can be compared too.
#include <cmath>

#include "tokenflow/ot.hpp"

namespace tokenflow {

SinkhornResult reference_sinkhorn(const Eigen::MatrixXd& C, const Eigen::VectorXd& a,
                                  const Eigen::VectorXd& b, double eps, double tol, int max_iter) {
  const Eigen::Index n = C.rows(), m = C.cols();
  SinkhornResult r;
  r.f = Eigen::VectorXd::Zero(n);
  r.g = Eigen::VectorXd::Zero(m);
  auto update_f = [&](Eigen::VectorXd& f) {
    for (Eigen::Index i = 0; i < n; ++i) {
      double mx = -INFINITY;
      for (Eigen::Index j = 0; j < m; ++j) mx = std::max(mx, std::log(b[j]) + (r.g[j] - C(i, j)) / eps);
      double s = 0.0;
      for (Eigen::Index j = 0; j < m; ++j) s += std::exp(std::log(b[j]) + (r.g[j] - C(i, j)) / eps - mx);
      f[i] = -eps * (mx + std::log(s));
    }
  };
  update_f(r.f);
  Eigen::VectorXd f_new(n);
  for (int it = 0; it < max_iter; ++it) {
    for (Eigen::Index j = 0; j < m; ++j) {
      double mx = -INFINITY;
      for (Eigen::Index i = 0; i < n; ++i) mx = std::max(mx, std::log(a[i]) + (r.f[i] - C(i, j)) / eps);
      double s = 0.0;
      for (Eigen::Index i = 0; i < n; ++i) s += std::exp(std::log(a[i]) + (r.f[i] - C(i, j)) / eps - mx);
      r.g[j] = -eps * (mx + std::log(s));
    }
    ++r.iterations;
    // Row marginal error of the plan, computed from the plan itself.
    r.marginal_error = 0.0;
    for (Eigen::Index i = 0; i < n; ++i) {
      double row = 0.0;
      for (Eigen::Index j = 0; j < m; ++j) row += a[i] * b[j] * std::exp((r.f[i] + r.g[j] - C(i, j)) / eps);
      r.marginal_error += std::abs(row - a[i]);
    }
    if (r.marginal_error < tol) {
      r.converged = true;
      break;
    }
    update_f(f_new);
    r.f = f_new;
  }
  r.plan.resize(n, m);
  r.cost = r.objective = 0.0;
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j) {
      r.plan(i, j) = a[i] * b[j] * std::exp((r.f[i] + r.g[j] - C(i, j)) / eps);
      r.cost += r.plan(i, j) * C(i, j);
      r.objective += r.plan(i, j) * (r.f[i] + r.g[j]);
    }
  return r;
}

}  // namespace tokenflow
