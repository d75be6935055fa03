// The reference Sinkhorn: a dense cost matrix, plain double loops, log-sum-exp written out.
// Same iteration as the operator loop (f from g, then g, then the row error), so iteration
// counts can be compared too.
#include <cmath>

#include "tokenflow/linalg.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow {

namespace {

// The plan pi_ij = a_i b_j exp((f_i + g_j - C_ij) / eps) of r's potentials into r.plan, with
// r.cost = <C, pi> and r.objective = sum_ij pi_ij (f_i + g_j) summed entry by entry, row-major.
void reference_plan(const Eigen::MatrixXd& C, const Eigen::VectorXd& a, const Eigen::VectorXd& b, double eps,
                    SinkhornResult& r) {
  r.plan.resize(C.rows(), C.cols());
  r.cost = r.objective = 0.0;
  for (Eigen::Index i = 0; i < C.rows(); ++i)
    for (Eigen::Index j = 0; j < C.cols(); ++j) {
      r.plan(i, j) = a[i] * b[j] * std::exp((r.f[i] + r.g[j] - C(i, j)) / eps);
      if (r.plan(i, j) != 0.0) r.cost += r.plan(i, j) * C(i, j);  // a forbidden pair (+inf) adds nothing
      r.objective += r.plan(i, j) * (r.f[i] + r.g[j]);
    }
}

}  // namespace

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
  reference_plan(C, a, b, eps, r);
  return r;
}

SinkhornResult reference_sinkhorn_unbalanced(const Eigen::MatrixXd& C, const Eigen::VectorXd& a,
                                             const Eigen::VectorXd& b, double eps, double rho, double tol,
                                             int max_iter) {
  const Eigen::Index n = C.rows(), m = C.cols();
  const double tau = rho / (rho + eps);
  SinkhornResult r;
  r.marginal_penalty = rho;
  r.f = Eigen::VectorXd::Zero(n);
  r.g = Eigen::VectorXd::Zero(m);
  // out_k = tau * (-eps log sum_l w_l exp((h_l - C_kl) / eps)) over l, log-sum-exp written out;
  // `rows`: k is a row of C, else a column.
  auto damped_softmin = [&](bool rows, const Eigen::VectorXd& w, const Eigen::VectorXd& h, Eigen::VectorXd& out) {
    for (Eigen::Index k = 0; k < out.size(); ++k) {
      double mx = -INFINITY;
      for (Eigen::Index l = 0; l < h.size(); ++l)
        mx = std::max(mx, std::log(w[l]) + (h[l] - (rows ? C(k, l) : C(l, k))) / eps);
      double s = 0.0;
      for (Eigen::Index l = 0; l < h.size(); ++l)
        s += std::exp(std::log(w[l]) + (h[l] - (rows ? C(k, l) : C(l, k))) / eps - mx);
      out[k] = -tau * eps * (mx + std::log(s));
    }
  };
  damped_softmin(true, b, r.g, r.f);
  for (int it = 0; it < max_iter; ++it) {
    damped_softmin(false, a, r.f, r.g);
    ++r.iterations;
    // The plan entry by entry, its row and column sums against a e^{-f/rho} and b e^{-g/rho}.
    Eigen::VectorXd rows = Eigen::VectorXd::Zero(n), cols = Eigen::VectorXd::Zero(m);
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j < m; ++j) {
        const double p = a[i] * b[j] * std::exp((r.f[i] + r.g[j] - C(i, j)) / eps);
        rows[i] += p;
        cols[j] += p;
      }
    r.marginal_error = 0.0;
    for (Eigen::Index i = 0; i < n; ++i) r.marginal_error += std::abs(rows[i] - a[i] * std::exp(-r.f[i] / rho));
    for (Eigen::Index j = 0; j < m; ++j) r.marginal_error += std::abs(cols[j] - b[j] * std::exp(-r.g[j] / rho));
    if (r.marginal_error < tol) {
      r.converged = true;
      break;
    }
    damped_softmin(true, b, r.g, r.f);
  }
  reference_plan(C, a, b, eps, r);
  // The unbalanced objective (ot.hpp): sum pi (f + g) - eps (mass - m(a) m(b)) + rho KL(pi 1 | a) +
  // rho KL(pi^T 1 | b), the KL terms written out (an empty bin, whose row is 0, adds 0).
  const Eigen::VectorXd rows = r.plan.rowwise().sum(), cols = r.plan.colwise().sum().transpose();
  r.plan_mass = rows.sum();
  auto kl = [](const Eigen::VectorXd& p, const Eigen::VectorXd& q) {
    double total = 0.0;
    for (Eigen::Index k = 0; k < p.size(); ++k)
      if (q[k] > 0.0) total += (p[k] > 0.0 ? p[k] * std::log(p[k] / q[k]) : 0.0) - p[k] + q[k];
    return total;
  };
  r.objective += -eps * (r.plan_mass - a.sum() * b.sum()) + rho * (kl(rows, a) + kl(cols, b));
  return r;
}

SinkhornResult reference_sinkhorn_symmetric(const Eigen::MatrixXd& C, const Eigen::VectorXd& a, double eps,
                                            double tol, int max_iter) {
  const Eigen::Index n = C.rows();
  SinkhornResult r;
  // T(f)_i = -eps log sum_j a_j exp((f_j - C_ij) / eps), log-sum-exp written out.
  auto soft_c_transform = [&](const Eigen::VectorXd& f, Eigen::VectorXd& t) {
    for (Eigen::Index i = 0; i < n; ++i) {
      double mx = -INFINITY;
      for (Eigen::Index j = 0; j < n; ++j) mx = std::max(mx, std::log(a[j]) + (f[j] - C(i, j)) / eps);
      double s = 0.0;
      for (Eigen::Index j = 0; j < n; ++j) s += std::exp(std::log(a[j]) + (f[j] - C(i, j)) / eps - mx);
      t[i] = -eps * (mx + std::log(s));
    }
  };
  r.f = Eigen::VectorXd::Zero(n);
  Eigen::VectorXd t(n);
  soft_c_transform(r.f, t);  // cold start at T(0)
  r.f = t;
  for (int it = 0; it < max_iter; ++it) {
    soft_c_transform(r.f, t);
    ++r.iterations;
    // Marginal error of the symmetric plan from the plan itself: rows and columns.
    r.marginal_error = 0.0;
    for (Eigen::Index i = 0; i < n; ++i) {
      double row = 0.0, col = 0.0;
      for (Eigen::Index j = 0; j < n; ++j) {
        row += a[i] * a[j] * std::exp((r.f[i] + r.f[j] - C(i, j)) / eps);
        col += a[j] * a[i] * std::exp((r.f[j] + r.f[i] - C(j, i)) / eps);
      }
      r.marginal_error += std::abs(row - a[i]) + std::abs(col - a[i]);
    }
    if (r.marginal_error < tol) {
      r.converged = true;
      break;
    }
    for (Eigen::Index i = 0; i < n; ++i) r.f[i] = 0.5 * (r.f[i] + t[i]);
  }
  r.g = r.f;
  reference_plan(C, a, a, eps, r);
  return r;
}

SinkhornResult reference_sinkhorn_newton(const Eigen::MatrixXd& C, const Eigen::VectorXd& a,
                                         const Eigen::VectorXd& b, double eps, double tol,
                                         SinkhornResult r, int max_steps) {
  const Eigen::Index n = C.rows(), m = C.cols();
  // The plan at (f, g) and the marginal residual res = (a - P 1, b - P^T 1); returns |res|_1.
  auto residual = [&](const Eigen::VectorXd& f, const Eigen::VectorXd& g, Eigen::MatrixXd& P,
                      Eigen::VectorXd& res) {
    P = reference_stabilized_kernel(C, a, b, f, g, eps);
    res.resize(n + m);
    double l1 = 0.0;
    for (Eigen::Index i = 0; i < n; ++i) {
      double row = 0.0;
      for (Eigen::Index j = 0; j < m; ++j) row += P(i, j);
      res[i] = a[i] - row;
      l1 += std::abs(res[i]);
    }
    for (Eigen::Index j = 0; j < m; ++j) {
      double col = 0.0;
      for (Eigen::Index i = 0; i < n; ++i) col += P(i, j);
      res[n + j] = b[j] - col;
      l1 += std::abs(res[n + j]);
    }
    return l1;
  };
  Eigen::MatrixXd P, P_try;
  Eigen::VectorXd res, res_try;
  double err = residual(r.f, r.g, P, res);
  for (int step = 0; step < max_steps && !(err < tol); ++step) {
    // The dual D(f, g) = <f, a> + <g, b> - eps sum_ij P_ij has gradient res and Hessian -H / eps,
    // H positive semi-definite with the null vector v = (1_n, -1_m) (the gauge). res is orthogonal
    // to v when a and b have the same mass, so the gauged H (reference_gauged_dual_hessian) gives
    // the same step and is invertible. Newton's step eps H^{-1} res, halved until the residual
    // decreases by a fraction of what the full step predicts (|res|_1 falls by t |res|_1 to first
    // order along it).
    const Eigen::VectorXd delta = eps * linalg::ldlt_solve(reference_gauged_dual_hessian(P), res);
    bool decreased = false;
    for (double t = 1.0; t > 1e-12 && !decreased; t *= 0.5) {
      const Eigen::VectorXd f = r.f + t * delta.head(n), g = r.g + t * delta.tail(m);
      const double e = residual(f, g, P_try, res_try);
      if (e <= (1.0 - 1e-4 * t) * err) {
        r.f = f;
        r.g = g;
        err = e;
        std::swap(P, P_try);
        std::swap(res, res_try);
        decreased = true;
      }
    }
    if (!decreased) break;  // at the rounding floor
    ++r.iterations;
  }
  r.marginal_error = err;
  r.converged = err < tol;
  reference_plan(C, a, b, eps, r);
  return r;
}

Eigen::MatrixXd reference_gauged_dual_hessian(const Eigen::MatrixXd& P) {
  const Eigen::Index n = P.rows(), m = P.cols();
  Eigen::MatrixXd H = Eigen::MatrixXd::Zero(n + m, n + m);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < m; ++j) {
      H(i, n + j) = H(n + j, i) = P(i, j);
      H(i, i) += P(i, j);
      H(n + j, n + j) += P(i, j);
    }
  if (n + m == 0) return H;
  const double scale = H.diagonal().mean() / static_cast<double>(n + m);
  for (Eigen::Index k = 0; k < n + m; ++k)
    for (Eigen::Index l = 0; l < n + m; ++l) H(k, l) += scale * ((k < n) == (l < n) ? 1.0 : -1.0);
  return H;
}

Eigen::MatrixXd reference_stabilized_kernel(const Eigen::MatrixXd& C, const Eigen::VectorXd& a,
                                            const Eigen::VectorXd& b, const Eigen::VectorXd& f,
                                            const Eigen::VectorXd& g, double eps) {
  Eigen::MatrixXd P(C.rows(), C.cols());
  for (Eigen::Index i = 0; i < C.rows(); ++i)
    for (Eigen::Index j = 0; j < C.cols(); ++j) P(i, j) = a[i] * b[j] * std::exp((f[i] + g[j] - C(i, j)) / eps);
  return P;
}

}  // namespace tokenflow
