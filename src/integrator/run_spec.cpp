// Run settings: names of the integrators, the checks of a RunSpec, fixed step counts and dopri5's
// step floor (run_spec.hpp).
#include "tokenflow/run_spec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tokenflow/error.hpp"

namespace tokenflow {

const char* to_string(SphereStep step) {
  return step == SphereStep::retraction ? "retraction" : "projected";
}

const char* to_string(ClusterScale scale) { return scale == ClusterScale::absolute ? "absolute" : "spread"; }

const char* to_string(Integrator integrator) {
  switch (integrator) {
    case Integrator::euler: return "euler";
    case Integrator::rk4: return "rk4";
    case Integrator::dopri5: return "dopri5";
  }
  return "?";
}

void check_run_spec(const RunSpec& run) {
  if (!(run.T >= 0.0) || !std::isfinite(run.T)) throw InputError("", "run.T", "must be finite and >= 0");
  if (!(run.dt > 0.0) || !std::isfinite(run.dt)) throw InputError("", "run.dt", "must be positive and finite");
  if (run.integrator != Integrator::dopri5 && run.T > 0.0 && run.dt < run.T * kMinStepFraction)
    throw InputError("", "run.dt",
                     fmt::format("{:g} is too small for run.T = {:g}: {:g} steps (more than 2^40 = {:g}) never "
                                 "finish, and t + dt stops advancing t past 2^52 steps; use dt >= {:g}",
                                 run.dt, run.T, run.T / run.dt, 0x1p40, run.T * kMinStepFraction));
  if (!(run.tol > 0.0)) throw InputError("", "run.tol", "must be positive");
  if (run.integrator == Integrator::dopri5 && !(run.tol > kMinDopriTol))
    throw InputError("", "run.tol",
                     fmt::format("{:g} is below what double precision can meet: dopri5 needs tol > 10 machine "
                                 "epsilons = {:g} (below it the error estimate is rounding)",
                                 run.tol, kMinDopriTol));
  if (!(run.blowup > 0.0)) throw InputError("", "run.blowup", "must be positive");
  if (run.save_every < 0) throw InputError("", "run.save_every", "must be >= 0");
}

long fixed_step_count(const RunSpec& run) {
  if (!(run.T > 0.0)) return 0;
  return std::max(1L, static_cast<long>(std::ceil(run.T / run.dt - 1e-9)));
}

double dopri5_step_floor(double t, const RunSpec& run) {
  return kDopriFloorFraction * std::max(std::abs(t), std::min(run.dt, run.T));
}

}  // namespace tokenflow
