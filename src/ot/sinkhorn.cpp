// The log-domain Sinkhorn loop, written once against a SoftMin operator.
#include <algorithm>
#include <cmath>

#include "tokenflow/error.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {

namespace {

// Row marginal error of the plan (f, g) whose columns are exact: with f_new = softmin_rows(g),
// (pi 1)_i = a_i exp((f_i - f_new_i) / eps), so the error costs no extra pass over C.
double row_error(const Eigen::VectorXd& a, const Eigen::VectorXd& f, const Eigen::VectorXd& f_new, double eps) {
  double err = 0.0;
  for (Eigen::Index i = 0; i < a.size(); ++i) err += a[i] * std::abs(std::expm1((f[i] - f_new[i]) / eps));
  return err;
}

}  // namespace

SinkhornResult sinkhorn(const SoftMin& op, const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                        const SinkhornOptions& options) {
  const Eigen::Index n = op.rows(), m = op.cols();
  if (a.size() != n) throw InputError("", "a", "has " + std::to_string(a.size()) + " entries for " + std::to_string(n) + " points");
  if (b.size() != m) throw InputError("", "b", "has " + std::to_string(b.size()) + " entries for " + std::to_string(m) + " points");
  if (!(options.epsilon > 0.0)) throw InputError("", "epsilon", "must be positive");
  if (!(options.tol > 0.0)) throw InputError("", "tol", "must be positive");
  if (options.max_iter < 1) throw InputError("", "max_iter", "must be at least 1");
  const Eigen::VectorXd log_a = a.array().log(), log_b = b.array().log();

  SinkhornResult r;
  r.f = options.f_init.size() == n ? options.f_init : Eigen::VectorXd::Zero(n);
  r.g = options.g_init.size() == m ? options.g_init : Eigen::VectorXd::Zero(m);

  // Epsilon schedule: geometric from epsilon_start down to epsilon (Schmitzer 2019, Sec. 3.2).
  std::vector<double> schedule;
  if (options.epsilon_start > options.epsilon) {
    for (double e = options.epsilon_start; e > options.epsilon; e /= std::max(1.0001, options.epsilon_decay))
      schedule.push_back(e);
  }
  schedule.push_back(options.epsilon);

  Eigen::VectorXd h_rows(n), h_cols(m), f_new(n);
  for (std::size_t stage = 0; stage < schedule.size(); ++stage) {
    const double eps = schedule[stage];
    const bool last = stage + 1 == schedule.size();
    const double stage_tol = last ? options.tol : std::max(options.tol, std::sqrt(options.tol));
    // f from g first (a warm or zero g), so that every iteration below is "g then check rows".
    h_cols = log_b + r.g / eps;
    op.softmin_rows(eps, h_cols, r.f);
    for (int it = 0; it < options.max_iter; ++it) {
      h_rows = log_a + r.f / eps;
      op.softmin_cols(eps, h_rows, r.g);  // Eq. (23) of Feydy et al.: columns now exact
      h_cols = log_b + r.g / eps;
      op.softmin_rows(eps, h_cols, f_new);
      ++r.iterations;
      r.marginal_error = row_error(a, r.f, f_new, eps);
      if (!std::isfinite(r.marginal_error))
        throw std::runtime_error("sinkhorn: non-finite potentials (cost or weights out of range)");
      if (options.progress && r.iterations % std::max(1, options.progress_every) == 0 &&
          !options.progress(r.iterations, r.marginal_error))
        throw Cancelled();
      if (r.marginal_error < stage_tol) {
        if (last) r.converged = true;
        break;
      }
      r.f.swap(f_new);
    }
  }

  // Cost, objective and (optionally) the plan in one pass over C.
  const double eps = options.epsilon;
  if (options.want_plan) r.plan.resize(n, m);
  Eigen::VectorXd row_cost(n), row_objective(n);
  op.for_each_row([&](Eigen::Index i, const double* c) {
    double cost = 0.0, objective = 0.0;
    for (Eigen::Index j = 0; j < m; ++j) {
      const double pi = std::exp(log_a[i] + log_b[j] + (r.f[i] + r.g[j] - c[j]) / eps);
      cost += pi * c[j];
      objective += pi * (r.f[i] + r.g[j]);
      if (options.want_plan) r.plan(i, j) = pi;
    }
    row_cost[i] = cost;
    row_objective[i] = objective;
  });
  r.cost = row_cost.sum();
  // <C, pi> + eps KL(pi | a b^T) = sum_ij pi_ij (f_i + g_j), since log(pi_ij / a_i b_j) =
  // (f_i + g_j - C_ij) / eps and pi has mass 1 (its columns are exact).
  r.objective = row_objective.sum();
  return r;
}

}  // namespace tokenflow
