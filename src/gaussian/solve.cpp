// The moment ODE dm/dt = b + M m, dS/dt = M S + S M^T on the stepper (src/integrator/stepper.hpp:
// Dormand-Prince 5(4) with step control or fixed-step euler / rk4, layer cuts), with frames, events
// (blow-up, convergence) and the positive-semidefiniteness report.
//
// Blow-up time. The run stops at the first accepted state with trace S > blowup (or when the step
// size collapses next to a singularity). The reported time is refined by one Newton step on
// u(t) = 1 / lambda_max(S(t)), which vanishes at the singular time:
//   t* ~ t - u / u' = t + lambda / lambda',   lambda' = v^T (dS/dt) v   (v the top eigenvector).
// For softmax with V = W = I, S^{-1}(t) = S0^{-1} - t (A + A^T) is linear in t and u(t) is the
// smallest eigenvalue of S^{-1}(t), smooth near t*: the Newton error is O((t* - t)^2 u''/u'), and
// at trace S = 1e8 we have t* - t ~ 1e-8 t*, so the refinement error is far below the integration
// error (~ tol). For a blow-up lambda ~ c (t* - t)^{-p} the step lands at t + (t* - t) / p.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "../integrator/stepper.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/linalg.hpp"

namespace tokenflow {

namespace {

// The state y = [m; vec(S)] (S column-major), size d + d^2.
class MomentOde {
 public:
  MomentOde(const MomentField& field, Eigen::Index d) : field_(field), d_(d) {}

  Eigen::VectorXd pack(const Eigen::VectorXd& m, const Eigen::MatrixXd& S) const {
    Eigen::VectorXd y(d_ + d_ * d_);
    y.head(d_) = m;
    y.tail(d_ * d_) = Eigen::Map<const Eigen::VectorXd>(S.data(), d_ * d_);
    return y;
  }
  Eigen::VectorXd mean(const Eigen::VectorXd& y) const { return y.head(d_); }
  Eigen::MatrixXd cov(const Eigen::VectorXd& y) const {
    return Eigen::Map<const Eigen::MatrixXd>(y.data() + d_, d_, d_);
  }
  void symmetrize(Eigen::VectorXd& y) const {
    Eigen::Map<Eigen::MatrixXd> S(y.data() + d_, d_, d_);
    const Eigen::MatrixXd sym = 0.5 * (S + S.transpose());
    S = sym;
  }
  // dy = f(t, y) with the layer active at t_layer.
  void operator()(double t_layer, const Eigen::VectorXd& y, Eigen::VectorXd& dy) const {
    Eigen::VectorXd dm;
    Eigen::MatrixXd dS;
    field_.rates(t_layer, mean(y), cov(y), dm, dS);
    dy.resize(y.size());
    dy.head(d_) = dm;
    dy.tail(d_ * d_) = Eigen::Map<const Eigen::VectorXd>(dS.data(), d_ * d_);
  }

 private:
  const MomentField& field_;
  Eigen::Index d_;
};

// t + lambda / lambda' (see the header comment); t when lambda' is not positive.
double refined_blowup_time(double t, const Eigen::MatrixXd& S, const Eigen::MatrixXd& dS) {
  if (!S.allFinite() || !dS.allFinite()) return t;
  const linalg::SymmetricEigen eig = linalg::symmetric_eigen(0.5 * (S + S.transpose()));
  const Eigen::Index top = S.rows() - 1;
  const double lambda = eig.values[top];
  const Eigen::VectorXd v = eig.vectors.col(top);
  const double rate = v.dot(dS * v);
  if (!(lambda > 0.0 && rate > 0.0)) return t;
  const double step = lambda / rate;
  return std::isfinite(step) ? t + step : t;
}

// Throws InputError for settings, initial moments and dimensions solve_moments refuses (see
// gaussian.hpp).
void check_moment_run(const AttentionParams& params, const GaussianRunSpec& spec, const GaussianMoments& initial) {
  const RunSpec& run = spec.run;
  check_run_spec(run);
  if (!(run.rank_tol > 0.0)) throw InputError("", "run.rank_tol", "must be positive");
  if (!(spec.converge_tol > 0.0)) throw InputError("", "run.converge_tol", "must be positive");
  if (spec.grid_frames < 1) throw InputError("", "run.grid_frames", "must be at least 1");
  check_gaussian(initial);
  const Eigen::Index d = initial.mean.size();
  if (params.dim != d)
    throw InputError("", "attention", "parameters are for d = " + std::to_string(params.dim) +
                                          " but init.mean has dimension " + std::to_string(d));
}

// The initial state must be one where the ODE can be computed and that is not past the blow-up
// threshold already (a run would stop there before its first step): InputError otherwise.
void check_initial_state(const MomentOde& f, const GaussianMoments& initial, const RunSpec& run) {
  const double trace = initial.cov.trace();
  if (!(trace <= run.blowup))
    throw InputError("", "init.cov",
                     fmt::format("has trace {:g}, above run.blowup = {:g}: the run would stop as blown up "
                                 "before its first step",
                                 trace, run.blowup));
  Eigen::VectorXd y0 = f.pack(initial.mean, initial.cov), dy0;
  f(0.0, y0, dy0);
  if (dy0.allFinite()) return;
  // Moments whose squares are far from overflow (1e100^2 = 1e200 < 1.8e308) leave the attention
  // parameters (scale, Q, K, V, W) as the cause; otherwise the larger of the moments.
  const double mean_norm = initial.mean.norm();
  if (mean_norm <= 1e100 && std::abs(trace) <= 1e100)
    throw InputError("", "attention",
                     fmt::format("its parameters (scale, Q, K, V, W) make the moment ODE's rates at t = 0 "
                                 "overflow double precision for the moderate init.mean and init.cov (|m| = {:g}, "
                                 "trace S = {:g}); rescale them",
                                 mean_norm, trace));
  const bool mean_larger = initial.mean.squaredNorm() > std::abs(trace);
  throw InputError("", mean_larger ? "init.mean" : "init.cov",
                   fmt::format("is out of the range where the moment ODE is computable: its rates at t = 0 "
                               "overflow double precision (|m| = {:g}, trace S = {:g}); rescale it",
                               mean_norm, trace));
}

// The bookkeeping of a moment run between steps (stepper.hpp's hooks): symmetrization, the PSD
// report, blow-up (with the refined time), convergence, frames. time() is the time of y (a fixed
// step that jumps past a singularity rolls y back to the step's start).
class MomentRun : public stepping::StepHooks<Eigen::VectorXd> {
 public:
  using State = Eigen::VectorXd;

  MomentRun(const MomentOde& f, const GaussianRunSpec& spec, const AttentionParams& params, Eigen::Index d,
            GaussianResult& result)
      : f_(f), spec_(spec), d_(d), result_(result) {
    for (const auto& layer : params.layers)
      if (std::isfinite(layer.until)) last_boundary_ = std::max(last_boundary_, layer.until);
    const long steps = fixed_step_count(spec.run);
    every_ = spec.run.save_every > 0 ? spec.run.save_every : std::max<long>(1, steps / spec.grid_frames);
  }

  double time() const { return t_; }
  bool saved_last() const { return saved_last_; }

  // The initial state: frame, PSD check, the state a fixed step rolls back to.
  void start(const State& y) {
    save_frame(0.0, y);
    check_psd(0.0, y);
    previous_ = y;
  }

  // Converged in the last layer (a later layer would move S again): the run stops.
  bool stop_before(const State& y, double t, double t_end, const State* rate) {
    if (t < last_boundary_) return false;
    State dy;
    if (!rate) {
      f_(t + 0.5 * std::min(spec_.run.dt, t_end - t), y, dy);
      rate = &dy;
    }
    if (!stationary(y, *rate)) return false;
    result_.status = "converged";
    return true;
  }

  bool after_step(State& y, const stepping::StepEvent<State>& event) {
    f_.symmetrize(y);  // changes y by rounding only: the field keeps S symmetric
    t_ = event.t;
    saved_last_ = false;
    if (event.adaptive || y.allFinite()) check_psd(t_, y);
    if (exploded(y)) {
      const bool finite = y.allFinite();
      result_.status = "blowup";
      result_.blowup_time = blowup_time(y, event);
      // A fixed step that overflowed is rolled back to its start: a blow-up when the refined
      // singular time lies within the step, else the run failed.
      const double singular = *result_.blowup_time;
      if (!finite && !(singular > event.t_start && singular <= event.t)) {
        result_.status = "failed";
        result_.reason = fmt::format(
            "step {} (t = {:g} to {:g}): the moments after the step are not finite though the rates at its "
            "start are, and no singularity lies within the step (refined singular time {:g}); no result past "
            "t = {:g}",
            event.steps, event.t_start, event.t, singular, event.t_start);
        result_.blowup_time.reset();
      }
      return false;
    }
    const bool due = event.adaptive
                         ? (spec_.run.save_every > 0 && event.steps % spec_.run.save_every == 0) || event.at_mark
                         : event.steps % every_ == 0;
    if (due) {
      save_frame(t_, y);
      saved_last_ = true;
    }
    if (!event.adaptive) previous_ = y;
    return true;
  }

  // Rejected at the floor (run_spec.hpp, dopri5_step_floor): a blow-up when the singular time
  // t + lambda / lambda' (the refinement above) lies within kSingularReach floors, else a stall.
  void at_floor(const State& y, const stepping::FloorEvent<State>& event) {
    if (!std::isfinite(event.err)) {
      result_.status = "failed";
      result_.reason = fmt::format(
          "dopri5 at t = {:g}: the stages are not finite at every step size down to the floor {:g} though "
          "the moments at t = {:g} are (trace S = {:g}); no result past t = {:g}",
          event.t, event.floor, event.t, f_.cov(y).trace(), event.t);
      return;
    }
    const double singular = refined_blowup_time(event.t, f_.cov(y), f_.cov(event.rate));
    if (singular > event.t && singular - event.t <= kSingularReach * event.floor) {
      result_.status = "blowup";
      result_.blowup_time = singular;
      return;
    }
    result_.status = "stalled";
    result_.reason = fmt::format(
        "dopri5 stalled at t = {:g} (T = {:g}): a step of {:g} was rejected (error {:g} times "
        "run.tol = {:g}) and steps below the floor {:g} are not taken; no singularity within reach "
        "(trace S = {:g})",
        event.t, spec_.run.T, event.tried, event.err, spec_.run.tol, event.floor, f_.cov(y).trace());
  }

  // |dm/dt|_2 <= converge_tol (1 + |m|_2) and |dS/dt|_F <= converge_tol (1 + |S|_F), in the last layer.
  bool converged_at(double t, const State& y) const {
    if (t < last_boundary_) return false;
    State dy;
    f_(t, y, dy);
    return stationary(y, dy);
  }

  void save_frame(double time, const State& y) {
    result_.times.push_back(time);
    result_.means.push_back(f_.mean(y));
    result_.covs.push_back(f_.cov(y));
  }

 private:
  const MomentOde& f_;
  const GaussianRunSpec& spec_;
  Eigen::Index d_;
  GaussianResult& result_;
  double last_boundary_ = 0.0;  // convergence is final only from here on (the last layer)
  long every_ = 1;              // euler, rk4: a frame every `every_` steps
  double t_ = 0.0;
  bool saved_last_ = true;
  State previous_;  // euler, rk4: the state before the step

  bool stationary(const State& y, const State& dy) const {
    const double dm = dy.head(d_).norm(), dS = dy.tail(d_ * d_).norm();
    return dm <= spec_.converge_tol * (1.0 + f_.mean(y).norm()) && dS <= spec_.converge_tol * (1.0 + f_.cov(y).norm());
  }
  bool exploded(const State& y) const { return !(f_.cov(y).trace() <= spec_.run.blowup) || !y.allFinite(); }

  void check_psd(double time, const State& y) {
    const Eigen::VectorXd lambda =
        linalg::symmetric_eigenvalues(f_.cov(y));
    const double relative = lambda.minCoeff() / (1.0 + std::max(lambda.maxCoeff(), 0.0));
    if (relative < result_.psd_worst_relative_eigenvalue) result_.psd_worst_relative_eigenvalue = relative;
    if (relative < -result_.psd_allowance && !result_.left_psd_cone) {
      result_.left_psd_cone = true;
      result_.left_psd_cone_time = time;
    }
  }

  // dopri5: from the step's last stage (f in the step's layer; recomputed in the next layer when
  // the step ended on a boundary). euler, rk4: a fixed step may jump past the singularity, so the
  // refinement starts from the last finite state.
  double blowup_time(State& y, const stepping::StepEvent<State>& event) {
    State dy;
    if (event.adaptive) {
      dy = *event.last_stage;
      if (event.at_boundary) f_(t_, y, dy);
      return refined_blowup_time(t_, f_.cov(y), f_.cov(dy));
    }
    if (!y.allFinite()) {
      y = previous_;
      t_ = event.t_start;
    }
    f_(t_, y, dy);
    return refined_blowup_time(t_, f_.cov(y), f_.cov(dy));
  }
};

// After the last step: convergence at T, the final state and frame, and the checks that every
// reported horizon is T itself and every moment reported outside a blow-up is finite.
void finish_moment_run(const MomentOde& f, const RunSpec& run, MomentRun& hooks, const Eigen::VectorXd& y,
                       GaussianResult& result) {
  const double t = hooks.time();
  if (result.status == "horizon" && hooks.converged_at(t, y)) result.status = "converged";
  result.t_final = t;
  if (!hooks.saved_last()) hooks.save_frame(t, y);
  result.final.mean = f.mean(y);
  result.final.cov = f.cov(y);
  if (result.status == "horizon" && t != run.T) {
    result.status = "failed";
    result.reason = fmt::format("the integrator ended at t = {:.17g} before run.T = {:.17g}", t, run.T);
  }
  if (result.status != "blowup" && result.status != "failed") {
    bool finite = y.allFinite();
    for (std::size_t i = 0; i < result.times.size(); ++i)
      finite = finite && result.means[i].allFinite() && result.covs[i].allFinite();
    if (!finite) {
      result.reason = fmt::format("the moments are not finite at t = {:g} (status would have been {})", t,
                                  result.status);
      result.status = "failed";
    }
  }
}

// dopri5 with save_every = 0: the frame times t_j = j T / grid_frames, 0 < j < grid_frames.
stepping::TimeCuts frame_grid(const GaussianRunSpec& spec) {
  std::vector<double> grid;
  if (spec.run.integrator == Integrator::dopri5 && spec.run.save_every == 0)
    for (int j = 1; j < spec.grid_frames; ++j) grid.push_back(spec.run.T * double(j) / double(spec.grid_frames));
  return stepping::TimeCuts(std::move(grid));
}

}  // namespace

GaussianResult solve_moments(const AttentionParams& params, const GaussianRunSpec& spec, const GaussianMoments& initial,
                             const ProgressCallback& progress) {
  check_moment_run(params, spec, initial);
  const Eigen::Index d = initial.mean.size();
  const MomentField field(params);
  const MomentOde f(field, d);
  check_initial_state(f, initial, spec.run);

  GaussianResult result;
  result.status = "horizon";
  // S leaves the cone "by more than rounding" when lambda_min(S) < -allowance (1 + lambda_max(S)):
  // one step's error bound in the 2-norm is |dS|_F <= sqrt(d + d^2) tol (1 + |y|) <= (d + 1) tol
  // (1 + |y|) (Hairer's RMS norm); we allow ten of them, and never less than 1e-14 (rounding).
  result.psd_allowance = std::max(10.0 * double(d + 1) * spec.run.tol, 1e-14);

  Eigen::VectorXd y = f.pack(initial.mean, 0.5 * (initial.cov + initial.cov.transpose()));
  stepping::Stepper<Eigen::VectorXd, const MomentOde> stepper(f, spec.run, y, stepping::TimeCuts(params.layer_ends()),
                                                              frame_grid(spec));
  MomentRun hooks(f, spec, params, d, result);
  hooks.start(y);
  stepper.run(y, hooks, progress);
  result.steps = stepper.clock().steps;
  result.rejected_steps = stepper.clock().rejected;
  finish_moment_run(f, spec.run, hooks, y, result);
  return result;
}

}  // namespace tokenflow
