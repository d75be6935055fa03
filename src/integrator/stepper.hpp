// The time stepper of the particle flow (simulate.cpp) and of the Gaussian moment ODE
// (src/gaussian/solve.cpp): fixed-step euler and rk4, Dormand-Prince 5(4) with step-size control,
// steps cut at layer boundaries, progress reports and stop requests. Internal to the library.
//
// Stepper<State, Rhs> integrates dy/dt = f(y) from clock().t to run.T:
//   State  a dense Eigen matrix or vector with dynamic size (Points<T>, n x d row-major, for the
//          particles; Eigen::VectorXd [m; vec S] for the moments). Stages are computed in
//          State::Scalar (the coefficients rounded to it), dopri5's error norm in double.
//   Rhs    rhs(double t_layer, const State& y, State& dy) writes f(y) (dy of y's shape) with the
//          parameters of the layer whose interval contains t_layer; f is autonomous within a layer,
//          so every stage of a (sub)step passes the (sub)step's midpoint.
//   Hooks  derives from StepHooks<State> and redefines what it needs: the problem's bookkeeping
//          (projection, blow-up test, frames, checkpoints, statuses) between steps.
// Workspaces are allocated in the constructor; a step allocates nothing (Rhs aside).
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

#include "tokenflow/error.hpp"
#include "tokenflow/run_spec.hpp"

namespace tokenflow::stepping {

// Dormand & Prince (1980), RK5(4)7M, as tabulated in Hairer, Norsett, Wanner, Solving ODEs I,
// Table II.5.2. e = b (5th order) - b* (4th order).
namespace dp {
constexpr double a21 = 1.0 / 5;
constexpr double a31 = 3.0 / 40, a32 = 9.0 / 40;
constexpr double a41 = 44.0 / 45, a42 = -56.0 / 15, a43 = 32.0 / 9;
constexpr double a51 = 19372.0 / 6561, a52 = -25360.0 / 2187, a53 = 64448.0 / 6561, a54 = -212.0 / 729;
constexpr double a61 = 9017.0 / 3168, a62 = -355.0 / 33, a63 = 46732.0 / 5247, a64 = 49.0 / 176,
                 a65 = -5103.0 / 18656;
constexpr double b1 = 35.0 / 384, b3 = 500.0 / 1113, b4 = 125.0 / 192, b5 = -2187.0 / 6784, b6 = 11.0 / 84;
constexpr double e1 = 71.0 / 57600, e3 = -71.0 / 16695, e4 = 71.0 / 1920, e5 = -17253.0 / 339200,
                 e6 = 22.0 / 525, e7 = -1.0 / 40;
}  // namespace dp

// Times that steps must not cross (layer boundaries) or that dopri5's steps land on (frame
// times), ascending.
class TimeCuts {
 public:
  TimeCuts() = default;
  explicit TimeCuts(std::vector<double> times) : times_(std::move(times)) {}
  // The first time u with a + margin < u < b - margin, margin = 1e-12 max(1, |b|) (so that
  // rounding never makes a sliver step); b when there is none.
  double next(double a, double b) const {
    const double margin = 1e-12 * std::max(1.0, std::abs(b));
    for (double u : times_)
      if (u > a + margin && u < b - margin) return u;
    return b;
  }

 private:
  std::vector<double> times_;
};

// Where the integration stands: with the first stage (dopri5), all a resume needs.
struct StepClock {
  double t = 0.0;                 // time of the current state
  double h = 0.0;                 // dopri5: the next trial step
  long steps = 0;                 // accepted steps
  long rejected = 0;              // dopri5: rejected attempts
  bool have_first_stage = false;  // dopri5: first_stage() holds f(y) in the next step's layer
};

// An accepted step from t_start to t; y is the new state, before the hooks change it.
template <class State>
struct StepEvent {
  double t_start = 0.0, t = 0.0;
  long steps = 0;                     // accepted steps, this one included
  bool adaptive = false;              // dopri5
  bool at_boundary = false;           // dopri5: t is a layer boundary (the next step is in another layer)
  bool at_mark = false;               // dopri5: t is one of the marks
  const State* last_stage = nullptr;  // dopri5: f(y) in the step's layer; nullptr for euler, rk4
};

// dopri5 rejected a step at its floor (dopri5_step_floor): the run ends there.
template <class State>
struct FloorEvent {
  double t = 0.0, tried = 0.0, err = 0.0, floor = 0.0;  // the step tried and its scaled error
  const State& rate;                                      // f(y) at t
};

// The hooks a problem may redefine (these defaults do nothing and never stop).
template <class State>
struct StepHooks {
  // Before each fixed step (t to t_end) or dopri5 attempt from (t, y); `rate` is f(y) in the
  // step's layer when the stepper has it (dopri5), else nullptr. True ends the run before the step.
  bool stop_before(const State& /*y*/, double /*t*/, double /*t_end*/, const State* /*rate*/) { return false; }
  // After each accepted step; may change y in place (projection). False ends the run (blow-up).
  bool after_step(State& /*y*/, const StepEvent<State>& /*event*/) { return true; }
  // After after_step and the progress report, at the state the next step starts from; `stop`:
  // the progress callback asked to stop (Cancelled is thrown when this returns).
  void at_rest(const State& /*y*/, bool /*stop*/) {}
  // dopri5 rejected a step at the floor; the run ends after this (the hook sets the status).
  void at_floor(const State& /*y*/, const FloorEvent<State>& /*event*/) {}
};

template <class State, class Rhs>
class Stepper {
 public:
  using Scalar = typename State::Scalar;

  // `shape`: a state of the run's shape. `boundaries`: steps never cross them (for euler and rk4
  // a step is cut into substeps there). `marks`: dopri5's steps land on them. `reuse_last_stage`:
  // dopri5 reuses f(y_new) as the next first stage (FSAL), false when after_step changes y by more
  // than rounding. The clock starts at t = 0 with the trial step h = min(dt, T).
  Stepper(Rhs& rhs, const RunSpec& run, const State& shape, TimeCuts boundaries, TimeCuts marks = {},
          bool reuse_last_stage = true)
      : rhs_(rhs), run_(run), boundaries_(std::move(boundaries)), marks_(std::move(marks)),
        reuse_last_stage_(reuse_last_stage) {
    const bool dopri = run.integrator == Integrator::dopri5;
    const std::size_t stages = dopri ? 7 : (run.integrator == Integrator::rk4 ? 4 : 1);
    k_.assign(stages, State(shape.rows(), shape.cols()));
    tmp_.resize(shape.rows(), shape.cols());
    if (dopri) {
      next_.resize(shape.rows(), shape.cols());
      err_.resize(shape.rows(), shape.cols());
    }
    clock_.h = std::min(run.dt, run.T);
  }

  StepClock& clock() { return clock_; }
  const StepClock& clock() const { return clock_; }
  // dopri5: f(y) when clock().have_first_stage (a checkpoint saves it, a resume restores it).
  State& first_stage() { return k_[0]; }
  const State& first_stage() const { return k_[0]; }

  // Integrates y in place from clock().t to run.T, or until a hook ends the run. After each
  // accepted step: hooks.after_step, progress(Progress{t, T, steps}), hooks.at_rest; throws
  // Cancelled when progress returned false.
  template <class Hooks>
  void run(State& y, Hooks& hooks, const ProgressCallback& progress) {
    if (run_.integrator == Integrator::dopri5)
      run_dopri(y, hooks, progress);
    else
      run_fixed(y, hooks, progress);
  }

 private:
  Rhs& rhs_;
  const RunSpec& run_;
  TimeCuts boundaries_, marks_;
  bool reuse_last_stage_;
  StepClock clock_;
  std::vector<State> k_;  // stages
  State tmp_, next_, err_;

  template <class Hooks>
  bool finish_step(State& y, Hooks& hooks, const StepEvent<State>& event, const ProgressCallback& progress) {
    if (!hooks.after_step(y, event)) return false;
    const bool stop = progress && !progress(Progress{clock_.t, run_.T, clock_.steps});
    hooks.at_rest(y, stop);
    if (stop) throw Cancelled();
    return true;
  }

  // Step k runs from k dt (not an accumulated sum) to (k + 1) dt, the last one to T exactly; a
  // step that crosses a layer boundary is split there (every stage sees one layer's parameters).
  template <class Hooks>
  void run_fixed(State& y, Hooks& hooks, const ProgressCallback& progress) {
    const long steps = fixed_step_count(run_);
    for (long k = clock_.steps; k < steps; ++k) {
      const double t0 = static_cast<double>(k) * run_.dt;
      const double t1 = k + 1 == steps ? run_.T : t0 + run_.dt;
      if (hooks.stop_before(y, t0, t1, nullptr)) return;
      for (double a = t0; a < t1;) {
        const double b = boundaries_.next(a, t1);
        fixed_step(0.5 * (a + b), b - a, y);  // the midpoint names the layer robustly
        a = b;
      }
      clock_.t = t1;
      ++clock_.steps;
      StepEvent<State> event;
      event.t_start = t0;
      event.t = t1;
      event.steps = clock_.steps;
      if (!finish_step(y, hooks, event, progress)) return;
    }
  }

  // One euler or rk4 step of size h inside one layer (selected by t_layer), y in place.
  void fixed_step(double t_layer, double h, State& y) {
    const Scalar th = static_cast<Scalar>(h);
    rhs_(t_layer, y, k_[0]);
    if (run_.integrator == Integrator::euler) {
      y.noalias() += th * k_[0];
      return;
    }
    tmp_ = y + (th / 2) * k_[0];
    rhs_(t_layer, tmp_, k_[1]);
    tmp_ = y + (th / 2) * k_[1];
    rhs_(t_layer, tmp_, k_[2]);
    tmp_ = y + th * k_[2];
    rhs_(t_layer, tmp_, k_[3]);
    y.noalias() += (th / 6) * (k_[0] + Scalar(2) * k_[1] + Scalar(2) * k_[2] + k_[3]);
  }

  // Steps never cross a layer boundary (the field is discontinuous there) and land on the marks.
  template <class Hooks>
  void run_dopri(State& y, Hooks& hooks, const ProgressCallback& progress) {
    while (clock_.t < run_.T) {
      const double to_boundary = boundaries_.next(clock_.t, run_.T), to_mark = marks_.next(clock_.t, run_.T);
      const double limit = std::min(to_boundary, to_mark);
      const double floor = dopri5_step_floor(clock_.t, run_);
      clock_.h = std::max(clock_.h, floor);  // no step below the floor is tried (a final sliver to limit may be)
      const bool last = clock_.h >= limit - clock_.t;
      if (last) clock_.h = limit - clock_.t;
      const double t_layer = clock_.t + 0.5 * clock_.h;
      if (!clock_.have_first_stage) rhs_(t_layer, y, k_[0]);
      if (hooks.stop_before(y, clock_.t, clock_.t + clock_.h, &k_[0])) return;
      const double err = dopri_attempt(t_layer, clock_.h, y);
      const double factor = std::clamp(0.9 * std::pow(std::max(err, 1e-10), -0.2), 0.2, 5.0);
      if (err <= 1.0 && std::isfinite(err)) {
        StepEvent<State> event;
        event.t_start = clock_.t;
        event.t = last ? limit : clock_.t + clock_.h;
        event.at_boundary = last && limit == to_boundary && to_boundary < run_.T;
        event.at_mark = last && limit == to_mark && to_mark < run_.T;
        accept(y, event, factor);
        if (!finish_step(y, hooks, event, progress)) return;
      } else if (!reject(y, hooks, err, factor, floor)) {
        return;
      }
    }
  }

  // Takes the proposal: FSAL (the last stage is f(y_new), valid for the next step unless it is in
  // another layer or after_step may change y), the clock, the controller's next trial step.
  void accept(State& y, StepEvent<State>& event, double factor) {
    y.swap(next_);
    k_[0].swap(k_.back());
    clock_.have_first_stage = reuse_last_stage_ && !event.at_boundary;
    clock_.t = event.t;
    ++clock_.steps;
    clock_.h *= factor;
    event.steps = clock_.steps;
    event.adaptive = true;
    event.last_stage = &k_[0];
  }

  // Counts the rejection and shrinks the step; false (after hooks.at_floor) when the step falls
  // below the floor.
  template <class Hooks>
  bool reject(const State& y, Hooks& hooks, double err, double factor, double floor) {
    ++clock_.rejected;
    clock_.have_first_stage = true;  // f(y) at the start of the step is still valid
    const double tried = clock_.h;
    clock_.h *= std::isfinite(err) ? factor : 0.2;
    if (clock_.h >= floor) return true;
    hooks.at_floor(y, FloorEvent<State>{clock_.t, tried, err, floor, k_[0]});
    return false;
  }

  // One Dormand-Prince attempt from y with step h inside one layer (selected by t_layer): writes
  // the 5th-order solution to next_ and returns the scaled error norm (accept when <= 1).
  // k_[0] must hold f(y).
  double dopri_attempt(double t_layer, double h, const State& y) {
    using namespace dp;
    auto& k = k_;
    const Scalar H = static_cast<Scalar>(h);
    tmp_ = y + H * Scalar(a21) * k[0];
    rhs_(t_layer, tmp_, k[1]);
    tmp_ = y + H * (Scalar(a31) * k[0] + Scalar(a32) * k[1]);
    rhs_(t_layer, tmp_, k[2]);
    tmp_ = y + H * (Scalar(a41) * k[0] + Scalar(a42) * k[1] + Scalar(a43) * k[2]);
    rhs_(t_layer, tmp_, k[3]);
    tmp_ = y + H * (Scalar(a51) * k[0] + Scalar(a52) * k[1] + Scalar(a53) * k[2] + Scalar(a54) * k[3]);
    rhs_(t_layer, tmp_, k[4]);
    tmp_ = y + H * (Scalar(a61) * k[0] + Scalar(a62) * k[1] + Scalar(a63) * k[2] + Scalar(a64) * k[3] +
                    Scalar(a65) * k[4]);
    rhs_(t_layer, tmp_, k[5]);
    next_ = y + H * (Scalar(b1) * k[0] + Scalar(b3) * k[2] + Scalar(b4) * k[3] + Scalar(b5) * k[4] +
                     Scalar(b6) * k[5]);
    rhs_(t_layer, next_, k[6]);
    err_ = H * (Scalar(e1) * k[0] + Scalar(e3) * k[2] + Scalar(e4) * k[3] + Scalar(e5) * k[4] +
                Scalar(e6) * k[5] + Scalar(e7) * k[6]);
    return error_norm(y);
  }

  // Hairer's norm: RMS of err / (atol + rtol max(|y|, |y_new|)), with atol = rtol = tol, in the
  // storage order of State (row by row for the row-major points).
  double error_norm(const State& y) const {
    double sum = 0.0;
    for (Eigen::Index i = 0; i < y.size(); ++i) {
      const double sc = run_.tol * (1.0 + std::max(std::abs(static_cast<double>(y.data()[i])),
                                                   std::abs(static_cast<double>(next_.data()[i]))));
      const double r = static_cast<double>(err_.data()[i]) / sc;
      sum += r * r;
    }
    return std::sqrt(sum / static_cast<double>(y.size()));
  }
};

}  // namespace tokenflow::stepping
