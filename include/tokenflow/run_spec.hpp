// tokenflow/run_spec.hpp: the time-stepping settings of a run and its progress callback, shared by
// the particle flow (dynamics.hpp) and the Gaussian moment ODE (gaussian.hpp).
//
// One explicit Euler step of size dt is one residual attention layer, x + dt Gamma(x). rk4 is the
// classical fourth-order method; dopri5 is Dormand-Prince 5(4) with step-size control (relative
// tolerance `tol`). Parameters may change with time ([[layers]], piecewise constant): a step that
// crosses a layer boundary is split there, so every stage of a (sub)step uses the layer whose
// interval contains that (sub)step, and the integrator follows the piecewise flow to its order.
#pragma once

#include <functional>

namespace tokenflow {

enum class Integrator { euler, rk4, dopri5 };
const char* to_string(Integrator integrator);

// On the sphere (attention.normalize = sphere), what a step integrates and how it returns to the
// sphere. projected: the velocity projected on the tangent space, P_x Gamma = Gamma - <Gamma, x> x
// (the dynamics on the sphere), each step's result normalized; retraction: the raw velocity Gamma,
// each step's result normalized, x <- (x + dt Gamma) / |x + dt Gamma| for Euler (the update of
// Geshkovski, Letrouit, Polyanskiy and Rigollet's code). The two agree to first order in dt: one
// Euler step differs by O(dt^2).
enum class SphereStep { projected, retraction };
const char* to_string(SphereStep step);
// What run.cluster_tol is measured in: the cloud's RMS radius about its mean (spread), so that
// the count does not depend on the cloud's scale, or the coordinates' own units (absolute).
enum class ClusterScale { spread, absolute };
const char* to_string(ClusterScale scale);

struct RunSpec {
  double T = 1.0;
  double dt = 0.01;  // step (euler, rk4) or first trial step (dopri5)
  Integrator integrator = Integrator::rk4;
  int save_every = 0;       // a frame every k steps (0: initial and final only)
  double blowup = 1e8;      // stop with status "blowup" when max_i |x_i| exceeds it
  double tol = 1e-10;       // dopri5 relative tolerance
  double rank_tol = 1e-3;   // rank: eigenvalues above rank_tol * largest
  int checkpoint_every = 0;
  double cluster_tol = 1e-2;  // two points are in one cluster when a chain of points closer
                              // than cluster_tol (times the RMS radius, by default) joins them
  ClusterScale cluster_scale = ClusterScale::spread;
  SphereStep sphere_step = SphereStep::projected;  // attention.normalize = sphere only
};

// ---- what a run's time stepping can carry (checked before the first step) -----------------------
// A fixed step below T 2^-40 means more than 2^40 (1.1e12) steps: no run finishes that many, and
// past 2^52 steps t + dt no longer advances t at all (dt below the spacing of doubles near T).
constexpr double kMinStepFraction = 0x1p-40;
// dopri5's relative tolerance must exceed 10 machine epsilons (the bound of Hairer's DOPRI5 code,
// "tolerances are too small"): below it the error estimate is rounding, not truncation.
constexpr double kMinDopriTol = 10.0 * 2.220446049250313e-16;
// Throws InputError naming run.T (finite, >= 0), run.dt (positive, finite; for euler and rk4 at
// least T kMinStepFraction), run.tol (dopri5: above kMinDopriTol), run.blowup (positive),
// run.save_every (>= 0).
void check_run_spec(const RunSpec& run);
// The number of fixed steps of euler and rk4: step k starts at k dt and the last one ends at T
// (at least one step when T > 0; a last step shorter than dt by less than 1e-9 dt is not taken).
long fixed_step_count(const RunSpec& run);
// dopri5's smallest step at time t: 2^-46 max(|t|, h0) = 64 machine epsilons of t, h0 = min(dt, T)
// the first trial step (the scale of the run's time near t = 0). Below it t + h resolves the step
// to worse than 1/64 of itself (Hairer's DOPRI5 stops at 10 epsilons: "step size too small"), so
// the step sequence is rounding, not control. A step rejected at the floor ends the run as
// "stalled", or as "blowup" when the solution grows so fast that a singularity lies within
// kSingularReach floors of t (dopri5's steps near a singularity at t* are about tol^(1/5) (t* - t)
// >= 1.2e-3 (t* - t) for tol >= kMinDopriTol, so at the floor t* - t <= ~1e3 floors, and the
// growth time |x| / (d|x|/dt) estimates (t* - t) / p for |x| ~ (t* - t)^-p, p >= 1/2).
// A stable but stiff field whose steps stay above the floor is not a stall: such a run takes
// T / h steps (the progress bar shows them; Ctrl-C stops it).
constexpr double kDopriFloorFraction = 0x1p-46;
double dopri5_step_floor(double t, const RunSpec& run);
constexpr double kSingularReach = 1e4;

struct Progress {
  double t = 0.0, T = 0.0;
  long steps = 0;
};
// Returns false to stop the run: it stops after the current step, writes that step through the
// checkpoint callback when it has one (a resume continues bit for bit), then throws Cancelled.
using ProgressCallback = std::function<bool(const Progress&)>;

}  // namespace tokenflow
