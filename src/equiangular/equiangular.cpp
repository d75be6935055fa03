// The equiangular reduction (include/tokenflow/equiangular.hpp): Eq. (E1), (E2), the ODE and the
// clustering-time functional on the library's stepper (src/integrator/stepper.hpp, dopri5).
#include "tokenflow/equiangular.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "ode_support.hpp"

namespace tokenflow {

namespace {

double simplex_rho(double n) { return -1.0 / (n - 1.0); }

void check_rho0(const EquiangularModel& model, double rho0) {
  // Rounding may put a simplex start a few ulps below -1/(n - 1): accept it as the simplex.
  if (!(rho0 < 1.0) || rho0 < simplex_rho(model.n) * (1.0 + 1e-15))
    throw std::invalid_argument("equiangular: rho0 = " + std::to_string(rho0) + " is outside [-1/(n - 1), 1)");
}

// Eq. (E2) with both u = 1 - rho and rho given, each to its own relative accuracy: the factor
// n - (n - 1) u = 1 + (n - 1) rho is formed from rho, since from u it cancels to n eps when rho is
// small (at n = 1e15 and rho ~ 1/n it would keep no digit).
double gap_rate(const EquiangularModel& model, double u, double rho) {
  const double n = model.n, damp = std::exp(-model.beta * u);
  return 2.0 * damp * (1.0 + (n - 1.0) * rho) / (1.0 + (n - 1.0) * damp);
}

// dv/dt = -G(e^v), v = log(1 - rho): a one-component state for the stepper.
struct LogGapOde {
  EquiangularModel model;
  void operator()(double /*t_layer*/, const Eigen::VectorXd& y, Eigen::VectorXd& dy) const {
    dy.resize(1);
    dy[0] = -gap_rate(model, std::exp(y[0]), -std::expm1(y[0]));
  }
};

// dt/dx along a path variable x of rho (below), and d/dxi [t / t0, x] = [dt/dx / t0, 1] as an
// autonomous ODE in xi = x - x0 for the stepper. The time is carried in units of t0 = dt/dx at
// x0 so that the stepper's error norm, tol (1 + |y|), is relative from the first step on (t0
// reaches 1e60 at n = 1e15, gamma = 4); each variable is chosen so that t / t0 stays of order one
// or more (a time much smaller than t0 would fall under the absolute part of the norm).
template <class TimeRate>
struct TimeOde {
  TimeRate rate;
  double t0 = 1.0;
  void operator()(double /*t_layer*/, const Eigen::VectorXd& y, Eigen::VectorXd& dy) const {
    dy.resize(2);
    dy[0] = rate(y[1]) / t0;
    dy[1] = 1.0;
  }
};

using reduction::dopri5_spec;
using reduction::FloorFlag;

// int_{x0}^{x1} (dt/dx) dx on the stepper (x1 > x0).
template <class TimeRate>
double integrate_time(const TimeRate& rate, double x0, double x1, double tol) {
  TimeOde<TimeRate> f{rate, rate(x0)};
  Eigen::VectorXd y(2);
  y << 0.0, x0;
  const RunSpec run = dopri5_spec(x1 - x0, tol);
  stepping::Stepper<Eigen::VectorXd, const TimeOde<TimeRate>> stepper(f, run, y, {});
  FloorFlag hooks;
  stepper.run(y, hooks, {});
  if (hooks.floored) throw std::runtime_error("equiangular: dopri5's step fell below its floor");
  return y[0] * f.t0;
}

// rho from rho0 to rho1 <= 1/2 in sigma = log(1 + (n - 1) rho): dt/dsigma =
// (e^{beta u} + n - 1) / (2 (n - 1) u), u = 1 - rho, rho = expm1(sigma) / (n - 1). From
// orthogonal tokens the first stretch (rho up to ~1/n) and the rest are both of order one in
// sigma, where in rho the first is 1/n wide.
double time_in_sigma(const EquiangularModel& model, double rho0, double rho1, double tol) {
  const double n = model.n, beta = model.beta;
  auto rate = [n, beta](double sigma) {
    const double u = 1.0 - std::expm1(sigma) / (n - 1.0);
    return (std::exp(beta * u) + n - 1.0) / (2.0 * (n - 1.0) * u);
  };
  return integrate_time(rate, std::log1p((n - 1.0) * rho0), std::log1p((n - 1.0) * rho1), tol);
}

// rho from rho0 >= 1/2 to rho1 < 1 in s = -log(1 - rho): dt/ds = 1 / G = (e^{beta u} + n - 1) /
// (2 (1 + (n - 1) rho)), u = e^{-s}, rho = -expm1(-s): the gap keeps its relative accuracy.
double time_in_log_gap(const EquiangularModel& model, double rho0, double rho1, double tol) {
  const double n = model.n, beta = model.beta;
  auto rate = [n, beta](double s) {
    return (std::exp(beta * std::exp(-s)) + n - 1.0) / (2.0 * (1.0 + (n - 1.0) * -std::expm1(-s)));
  };
  return integrate_time(rate, -std::log1p(-rho0), -std::log1p(-rho1), tol);
}

}  // namespace

void check_equiangular_model(const EquiangularModel& model) {
  if (!(std::isfinite(model.n) && model.n >= 2.0))
    throw std::invalid_argument("equiangular: n must be finite and >= 2 (got " + std::to_string(model.n) + ")");
  if (!(std::isfinite(model.beta) && model.beta >= 0.0))
    throw std::invalid_argument("equiangular: beta must be finite and >= 0 (got " + std::to_string(model.beta) + ")");
}

// Eq. (E1), divided through by e^beta: F = 2 e^{-beta u} u (n - (n - 1) u) / (1 + (n - 1) e^{-beta u}).
double equiangular_velocity(const EquiangularModel& model, double rho) {
  const double u = 1.0 - rho;
  return u * gap_rate(model, u, rho);
}

// Eq. (E2).
double equiangular_log_gap_rate(const EquiangularModel& model, double u) { return gap_rate(model, u, 1.0 - u); }

EquiangularPath solve_equiangular(const EquiangularModel& model, double rho0, const std::vector<double>& times,
                                  double tol) {
  check_equiangular_model(model);
  check_rho0(model, rho0);
  EquiangularPath path;
  path.times = times;
  const std::vector<Eigen::VectorXd> v_at = reduction::dopri5_at_times(
      LogGapOde{model}, Eigen::VectorXd::Constant(1, std::log1p(-rho0)), times, tol, "equiangular", &path.steps);
  for (const Eigen::VectorXd& v : v_at) {
    path.gap.push_back(std::exp(v[0]));
    path.rho.push_back(-std::expm1(v[0]));
  }
  return path;
}

double equiangular_clustering_time(const EquiangularModel& model, double rho0, double rho_target, double tol) {
  check_equiangular_model(model);
  check_rho0(model, rho0);
  if (!(rho_target >= rho0 && rho_target < 1.0))
    throw std::invalid_argument("equiangular: the target rho must lie in [rho0, 1)");
  if (rho_target == rho0) return 0.0;
  if (rho0 <= simplex_rho(model.n)) return std::numeric_limits<double>::infinity();
  // Below 1/2 in sigma, above in the log-gap (docs/equiangular.md).
  const double mid = std::max(rho0, std::min(rho_target, 0.5));
  double t = mid > rho0 ? time_in_sigma(model, rho0, mid, tol) : 0.0;
  if (rho_target > mid) t += time_in_log_gap(model, mid, rho_target, tol);
  return t;
}

EquiangularModel long_context_model(double n, double gamma) {
  EquiangularModel model{n, gamma * std::log(n)};
  check_equiangular_model(model);
  return model;
}

double long_context_exponent_theory(double gamma, double rho0) { return std::max(0.0, gamma * (1.0 - rho0) - 1.0); }

double long_context_critical_gamma(double rho0) {
  if (!(rho0 < 1.0)) throw std::invalid_argument("long context: rho0 must be < 1");
  return 1.0 / (1.0 - rho0);
}

Points<double> equiangular_points(long n, double rho0) {
  if (n < 2) throw std::invalid_argument("equiangular_points: n must be >= 2");
  check_rho0(EquiangularModel{static_cast<double>(n), 0.0}, rho0);
  const double a = std::sqrt(1.0 - rho0);
  const double b = rho0 / (a + std::sqrt(std::max(0.0, a * a + static_cast<double>(n) * rho0)));
  Points<double> x = Points<double>::Constant(n, n, b);
  for (long i = 0; i < n; ++i) x(i, i) += a;
  return x;
}

double equiangular_deviation(const Points<double>& x, double rho) {
  double worst = 0.0;
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index j = i + 1; j < x.rows(); ++j) worst = std::max(worst, std::abs(x.row(i).dot(x.row(j)) - rho));
  return worst;
}

double mean_pair_gap(const Points<double>& x) {
  const Eigen::Index n = x.rows();
  if (n < 2) throw std::invalid_argument("mean_pair_gap: needs two points");
  double sum = 0.0;
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = i + 1; j < n; ++j) {
      const double ni = x.row(i).norm(), nj = x.row(j).norm();
      sum += ((x.row(i) - x.row(j)).squaredNorm() - (ni - nj) * (ni - nj)) / (2.0 * ni * nj);
    }
  return sum / (0.5 * static_cast<double>(n) * static_cast<double>(n - 1));
}

}  // namespace tokenflow
