// The equiangular reduction (include/tokenflow/equiangular.hpp): Eq. (E1), (E2), the ODE and the
// clustering-time functional on the library's stepper (src/dynamics/stepper.hpp, dopri5).
#include "tokenflow/equiangular.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "../dynamics/stepper.hpp"

namespace tokenflow {

namespace {

double simplex_rho(double n) { return -1.0 / (n - 1.0); }

void check_rho0(const EquiangularModel& model, double rho0) {
  // Rounding may put a simplex start a few ulps below -1/(n - 1): accept it as the simplex.
  if (!(rho0 < 1.0) || rho0 < simplex_rho(model.n) * (1.0 + 1e-15))
    throw std::invalid_argument("equiangular: rho0 = " + std::to_string(rho0) + " is outside [-1/(n - 1), 1)");
}

// dv/dt = -G(e^v), v = log(1 - rho): a one-component state for the stepper.
struct LogGapOde {
  EquiangularModel model;
  void operator()(double /*t_layer*/, const Eigen::VectorXd& y, Eigen::VectorXd& dy) const {
    dy.resize(1);
    dy[0] = -equiangular_log_gap_rate(model, std::exp(y[0]));
  }
};

// d/ds [t, v] = [1 / G(e^v), -1] (s = v0 - v): the clustering time as an autonomous ODE in s.
// 1 / G(u) = (e^{beta u} + n - 1) / (2 (n - (n - 1) u)) needs no exponential of a negative number.
struct InverseRateOde {
  EquiangularModel model;
  void operator()(double /*t_layer*/, const Eigen::VectorXd& y, Eigen::VectorXd& dy) const {
    const double u = std::exp(y[1]), n = model.n;
    dy.resize(2);
    dy[0] = (std::exp(model.beta * u) + n - 1.0) / (2.0 * (n - (n - 1.0) * u));
    dy[1] = -1.0;
  }
};

// Notes that dopri5 rejected a step at its floor (the run then ends short of T).
struct FloorFlag : stepping::StepHooks<Eigen::VectorXd> {
  bool floored = false;
  void at_floor(const Eigen::VectorXd&, const stepping::FloorEvent<Eigen::VectorXd>&) { floored = true; }
};

// Records the state at the requested times (dopri5 lands on them: they are the stepper's marks).
struct RecordAtTimes : FloorFlag {
  const std::vector<double>* times = nullptr;
  std::vector<double>* v_at = nullptr;
  std::size_t next = 0;
  void record_through(double t, const Eigen::VectorXd& y) {
    // Marks closer than the stepper's sliver margin (1e-12 relative) share one landing.
    const double margin = 1e-12 * std::max(1.0, std::abs(t));
    while (next < times->size() && (*times)[next] <= t + margin) (*v_at)[next++] = y[0];
  }
  bool after_step(Eigen::VectorXd& y, const stepping::StepEvent<Eigen::VectorXd>& event) {
    record_through(event.t, y);
    return true;
  }
};

RunSpec dopri5_spec(double T, double tol) {
  RunSpec run;
  run.integrator = Integrator::dopri5;
  run.T = T;
  run.dt = std::min(T, 1e-3 * std::max(T, 1.0));  // the first trial step; the controller takes over
  run.tol = tol;
  check_run_spec(run);
  return run;
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
  return u * equiangular_log_gap_rate(model, u);
}

// Eq. (E2).
double equiangular_log_gap_rate(const EquiangularModel& model, double u) {
  const double n = model.n, damp = std::exp(-model.beta * u);
  return 2.0 * damp * (n - (n - 1.0) * u) / (1.0 + (n - 1.0) * damp);
}

EquiangularPath solve_equiangular(const EquiangularModel& model, double rho0, const std::vector<double>& times,
                                  double tol) {
  check_equiangular_model(model);
  check_rho0(model, rho0);
  if (!std::is_sorted(times.begin(), times.end()) || (!times.empty() && !(times.front() >= 0.0)) ||
      (!times.empty() && !std::isfinite(times.back())))
    throw std::invalid_argument("equiangular: times must be finite, >= 0 and ascending");
  EquiangularPath path;
  path.times = times;
  std::vector<double> v_at(times.size(), 0.0);
  Eigen::VectorXd y(1);
  y[0] = std::log1p(-rho0);
  RecordAtTimes hooks;
  hooks.times = &times;
  hooks.v_at = &v_at;
  hooks.record_through(0.0, y);
  if (!times.empty() && times.back() > 0.0) {
    LogGapOde f{model};
    const RunSpec run = dopri5_spec(times.back(), tol);
    stepping::Stepper<Eigen::VectorXd, const LogGapOde> stepper(f, run, y, {}, stepping::TimeCuts(times));
    stepper.run(y, hooks, {});
    if (hooks.floored) throw std::runtime_error("equiangular: dopri5's step fell below its floor");
    hooks.record_through(times.back(), y);
    path.steps = stepper.clock().steps;
  }
  for (double v : v_at) {
    path.gap.push_back(std::exp(v));
    path.rho.push_back(-std::expm1(v));
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
  const double v0 = std::log1p(-rho0), s_end = v0 - std::log1p(-rho_target);
  Eigen::VectorXd y(2);
  y << 0.0, v0;
  InverseRateOde f{model};
  const RunSpec run = dopri5_spec(s_end, tol);
  stepping::Stepper<Eigen::VectorXd, const InverseRateOde> stepper(f, run, y, {});
  FloorFlag hooks;
  stepper.run(y, hooks, {});
  if (hooks.floored) throw std::runtime_error("equiangular: dopri5's step fell below its floor");
  return y[0];
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
