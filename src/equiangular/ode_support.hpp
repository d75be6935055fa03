// The pieces of the scalar reductions' integration on the library's stepper (src/dynamics/
// stepper.hpp, dopri5) shared by equiangular.cpp and schemes.cpp: the run spec, a hook that notes
// a step at dopri5's floor, and one that records the state at requested times.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "../integrator/stepper.hpp"

namespace tokenflow::reduction {

// Notes that dopri5 rejected a step at its floor (the run then ends short of T).
struct FloorFlag : stepping::StepHooks<Eigen::VectorXd> {
  bool floored = false;
  void at_floor(const Eigen::VectorXd&, const stepping::FloorEvent<Eigen::VectorXd>&) { floored = true; }
};

// Records the state at the requested times (dopri5 lands on them: they are the stepper's marks).
struct RecordAtTimes : FloorFlag {
  const std::vector<double>* times = nullptr;
  std::vector<Eigen::VectorXd>* states = nullptr;
  std::size_t next = 0;
  void record_through(double t, const Eigen::VectorXd& y) {
    // Marks closer than the stepper's sliver margin (1e-12 relative) share one landing.
    const double margin = 1e-12 * std::max(1.0, std::abs(t));
    while (next < times->size() && (*times)[next] <= t + margin) (*states)[next++] = y;
  }
  bool after_step(Eigen::VectorXd& y, const stepping::StepEvent<Eigen::VectorXd>& event) {
    record_through(event.t, y);
    return true;
  }
};

// dopri5 to time T at relative tolerance tol (the first trial step small; the controller takes over).
inline RunSpec dopri5_spec(double T, double tol) {
  RunSpec run;
  run.integrator = Integrator::dopri5;
  run.T = T;
  run.dt = std::min(T, 1e-3 * std::max(T, 1.0));
  run.tol = tol;
  check_run_spec(run);
  return run;
}

// The autonomous ODE y' = ode(y) from y at t = 0 by dopri5 at relative tolerance tol, its state
// at each of `times` (finite, >= 0, ascending, else std::invalid_argument "<who>: times must
// be ..."); the accepted steps into *steps. std::runtime_error when dopri5's step fell below its
// floor. Ode: what stepping::Stepper integrates (operator()(t, y, dy)).
template <class Ode>
std::vector<Eigen::VectorXd> dopri5_at_times(const Ode& ode, Eigen::VectorXd y, const std::vector<double>& times,
                                             double tol, const std::string& who, long* steps) {
  if (!std::is_sorted(times.begin(), times.end()) || (!times.empty() && !(times.front() >= 0.0)) ||
      (!times.empty() && !std::isfinite(times.back())))
    throw std::invalid_argument(who + ": times must be finite, >= 0 and ascending");
  std::vector<Eigen::VectorXd> at(times.size(), y);
  RecordAtTimes hooks;
  hooks.times = &times;
  hooks.states = &at;
  hooks.record_through(0.0, y);
  *steps = 0;
  if (!times.empty() && times.back() > 0.0) {
    const RunSpec run = dopri5_spec(times.back(), tol);
    stepping::Stepper<Eigen::VectorXd, const Ode> stepper(ode, run, y, {}, stepping::TimeCuts(times));
    stepper.run(y, hooks, {});
    if (hooks.floored) throw std::runtime_error(who + ": dopri5's step fell below its floor");
    hooks.record_through(times.back(), y);
    *steps = stepper.clock().steps;
  }
  return at;
}

}  // namespace tokenflow::reduction
