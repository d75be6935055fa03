// The particle flow: the stepper (stepper.hpp: euler, rk4, dopri5, layer cuts) on the attention
// field, with blow-up detection, frames, diagnostics and checkpoints. All workspaces are allocated
// before the first step.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "../integrator/stepper.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/ot_solve.hpp"

namespace tokenflow {

namespace {
// The largest logit bound over the heads and layers at points x: |s(x_i, x_j)| <= |scale| |Q_h x_i|
// |K_h x_j| for the inner-product kinds, |scale| (|Q_h x_i| + |K_h x_j|)^2 for l2; +inf when it
// overflows or is NaN.
template <class T>
double largest_logit_bound(const AttentionParams& attention, const Points<T>& points) {
  const Eigen::MatrixXd x = points.template cast<double>();
  double largest = 0.0;
  for (const AttentionLayer& layer : attention.layers)
    for (const HeadBlocks& head : layer.heads) {
      const double q = (x * head.Q.transpose()).rowwise().norm().maxCoeff();
      const double k = (x * head.K.transpose()).rowwise().norm().maxCoeff();
      const double bound = attention.kind == AttentionKind::l2 ? std::abs(attention.scale) * (q + k) * (q + k)
                                                               : std::abs(attention.scale) * q * k;
      largest = std::isnan(bound) ? INFINITY : std::max(largest, bound);
    }
  return largest;
}
}  // namespace

template <class T>
void check_sinkhorn_attention_range(const AttentionParams& attention, const Measure<T>& initial) {
  if (attention.kind != AttentionKind::sinkhorn) return;
  const double largest = largest_logit_bound(attention, initial.points);
  if (!std::isfinite(largest))
    throw InputError("", "attention.Q",
                     "with these points, the Sinkhorn attention's logits scale <Q x_i, K x_j> overflow double "
                     "precision (rescale Q, K or the points)");
  check_epsilon_resolves(largest, attention.epsilon, "attention.epsilon",
                         fmt::format("logits up to {:g} at these points", largest));
}

template void check_sinkhorn_attention_range<float>(const AttentionParams&, const Measure<float>&);
template void check_sinkhorn_attention_range<double>(const AttentionParams&, const Measure<double>&);

namespace {

template <class T>
void project_to_sphere(Points<T>& x) {
  x.rowwise().normalize();
}

// The growth time |x_i| / (d|x_i|/dt) = |x_i|^2 / <x_i, v_i> of the point of largest norm (v = the
// velocity at x): (t* - t) / p when |x| ~ (t* - t)^-p; +inf when that point does not grow, NaN
// when x or v is not finite.
template <class T>
double growth_time(const Points<T>& x, const Points<T>& v) {
  Eigen::Index i = 0;
  const double norm = static_cast<double>(x.rowwise().squaredNorm().maxCoeff(&i));
  const double rate = static_cast<double>(x.row(i).dot(v.row(i)));
  if (!std::isfinite(norm) || !std::isfinite(rate)) return std::numeric_limits<double>::quiet_NaN();
  return rate > 0.0 ? norm / rate : std::numeric_limits<double>::infinity();
}

// The particles' right-hand side for the stepper: v = Gamma_mu(x) with the layer active at t.
template <class T>
struct Velocity {
  AttentionField<T>& field;
  void operator()(double t, const Points<T>& x, Points<T>& v) const { field.velocity(t, x, v); }
};

template <class T>
using ParticleStepper = stepping::Stepper<Points<T>, const Velocity<T>>;

// The bookkeeping of a particle run between steps (stepper.hpp's hooks): the sphere projection,
// the blow-up test, frames and diagnostics, checkpoints, the dopri5 floor. `result` collects the
// frames and the status; its step counts are the stepper's clock (written by checkpoint_state and
// by the caller at the end).
template <class T>
class ParticleRun : public stepping::StepHooks<Points<T>> {
 public:
  ParticleRun(const RunSpec& run, const Measure<T>& initial, AttentionField<T>& field,
              ParticleStepper<T>& stepper, SimulationResult<T>& result,
              const AttentionParams& attention, const CheckpointCallback<T>& checkpoint)
      : run_(run),
        initial_(initial),
        field_(field),
        stepper_(stepper),
        result_(result),
        attention_(attention),
        checkpoint_(checkpoint) {}

  double initial_radius = 0.0;  // the tokens' RMS radius at t = 0 (count_frame_clusters)
  bool saved_last = true;  // the current x is already the last saved frame
  bool rolled_back = false;  // a step left the finite range: x was rolled back to its start
  double rolled_back_to = 0.0;  // then: the time of the state x was rolled back to

  void save_frame(double t, const Points<T>& x) {
    result_.diagnostics.push_back(measure_frame(t, x, initial_.weights, run_, &field_, initial_radius));
    if (run_.save_every > 0) {
      result_.frames.push_back(x);
      result_.times.push_back(t);
    }
  }

  // Keeps the state each step starts from (finite: every accepted state is checked), so that a
  // step that overflows can be rolled back. dopri5 hands f(y): a non-finite rate ends the run.
  bool stop_before(const Points<T>& y, double t, double t_end, const Points<T>* rate) {
    start_ = y;
    if (!rate || rate->allFinite()) return false;
    fail(t, t_end, nullptr);
    return true;
  }

  // Non-finite check, projection (sphere), blow-up test, a frame every save_every steps. A step
  // that leaves the finite range is rolled back to its start; it is a blow-up when the velocity
  // there is finite and the growth time |x|^2 / <x, v> of the largest point (a singularity at
  // t + p times it when |x| ~ (t* - t)^-p) lies within the step, else status "failed".
  bool after_step(Points<T>& x, const stepping::StepEvent<Points<T>>& event) {
    if (attention_.on_sphere_at(event.t_start)) project_to_sphere(x);
    if (!x.allFinite()) {
      const double h = event.t - event.t_start;
      Points<T> v(start_.rows(), start_.cols());
      field_.velocity(0.5 * (event.t_start + event.t), start_, v);
      const double growth = v.allFinite() ? growth_time(start_, v) : NAN;
      if (growth > 0.0 && growth <= h) {
        result_.status = "blowup";
        result_.reason = fmt::format(
            "step {} (t = {:g} to {:g}) overflows: the largest point's growth time |x|^2 / <x, v> = {:g} at "
            "t = {:g} puts a singularity within the step; the result is the state at t = {:g}",
            stepper_.clock().steps, event.t_start, event.t, growth, event.t_start, event.t_start);
      } else {
        fail(event.t_start, event.t, &x);
      }
      x = start_;
      rolled_back = true;
      rolled_back_to = event.t_start;
      return false;
    }
    saved_last = false;
    if (max_row_norm(x) > run_.blowup) {
      result_.status = "blowup";
      return false;
    }
    if (run_.save_every > 0 && event.steps % run_.save_every == 0) {
      save_frame(event.t, x);
      saved_last = true;
    }
    return true;
  }

  // Writes the state through the checkpoint callback every run.checkpoint_every steps, and when
  // the run is asked to stop (the state is exactly what the next step starts from, so a stopped
  // run resumes bit for bit).
  void at_rest(const Points<T>& x, bool stop) {
    if (!checkpoint_ || run_.checkpoint_every <= 0) return;
    if (stepper_.clock().steps % run_.checkpoint_every != 0 && !stop) return;
    checkpoint_(checkpoint_state(x));
  }

  // Rejected at the floor. A singularity within reach explains it (blow-up); non-finite stages
  // (the error is NaN or inf at every step size down to the floor) fail the run; otherwise the run
  // stalls (tolerance out of reach, a stiff field): see run_spec.hpp.
  void at_floor(const Points<T>& x, const stepping::FloorEvent<Points<T>>& event) {
    if (!std::isfinite(event.err)) {
      start_ = x;
      fail(event.t, event.t + event.tried, nullptr, event.floor);
      return;
    }
    const double growth = growth_time(x, event.rate);
    if (growth > 0.0 && growth <= kSingularReach * event.floor) {
      result_.status = "blowup";
      return;
    }
    result_.status = "stalled";
    result_.reason = fmt::format(
        "dopri5 stalled at t = {:g} (T = {:g}): a step of {:g} was rejected (error {:g} times "
        "run.tol = {:g}) and steps below the floor {:g} are not taken; the solution's growth time "
        "|x| / (d|x|/dt) is {:g}, no singularity within reach",
        event.t, run_.T, event.tried, event.err, run_.tol, event.floor, growth);
  }

  SimulationState<T> checkpoint_state(const Points<T>& x) const {
    const stepping::StepClock& clock = stepper_.clock();
    SimulationState<T> state;
    state.partial = result_;
    state.partial.steps = clock.steps;
    state.partial.rejected_steps = clock.rejected;
    state.partial.positions = x;
    state.t = clock.t;
    state.h = clock.h;
    state.saved_last = saved_last;
    state.have_first_stage = clock.have_first_stage;
    if (clock.have_first_stage) state.first_stage = stepper_.first_stage();
    field_.sinkhorn_potentials(state.sinkhorn_f, state.sinkhorn_g);
    return state;
  }

 private:
  const RunSpec& run_;
  const Measure<T>& initial_;
  AttentionField<T>& field_;
  ParticleStepper<T>& stepper_;
  SimulationResult<T>& result_;
  const AttentionParams& attention_;  // which steps end on the sphere (on_sphere_at their start)
  const CheckpointCallback<T>& checkpoint_;
  Points<T> start_;  // the state the current step started from

  // Status "failed" for the step from t0 to t1 that left the finite range; `after`: the state it
  // produced (nullptr when no step was taken); `floor` > 0: dopri5's attempts were non-finite down
  // to this step size. The reason names the step and the first non-finite quantity: the velocity
  // at the step's start, else the state after the step (or dopri5's stages).
  void fail(double t0, double t1, const Points<T>* after, double floor = 0.0) {
    result_.status = "failed";
    Points<T> v(start_.rows(), start_.cols());
    field_.velocity(0.5 * (t0 + t1), start_, v);
    const long step = stepper_.clock().steps + (after ? 0 : 1);
    const std::string where = fmt::format("step {} (t = {:g} to {:g})", step, t0, t1);
    const double logits = largest_logit_bound(field_.params(), start_);
    const std::string overflow =
        std::isfinite(logits) && logits <= static_cast<double>(std::numeric_limits<T>::max())
            ? std::string()
            : fmt::format("; the logits scale <Q x_i, K x_j> overflow {} (bound {:g})",
                          std::is_same_v<T, float> ? "f32" : "double precision", logits);
    if (!v.allFinite()) {
      result_.reason = fmt::format(
          "{}: the attention velocity Gamma(x) is not finite ({}) at finite positions{}; no result "
          "past t = {:g}",
          where, first_non_finite(v), overflow, t0);
    } else if (!after) {
      result_.reason = fmt::format(
          "{}: dopri5's stages are not finite at every step size down to the floor {:g}, though the "
          "velocity at t = {:g} is (largest |v_i| = {:g}){}; no result past t = {:g}",
          where, floor, t0, static_cast<double>(max_row_norm(v)), overflow, t0);
    } else {
      const Points<T>& bad = *after;
      result_.reason = fmt::format(
          "{}: the positions after the step are not finite ({}) though the velocity at its start is "
          "(largest |v_i| = {:g}): the {} stages overflow{}; no result past t = {:g}",
          where, first_non_finite(bad), static_cast<double>(max_row_norm(v)), to_string(run_.integrator),
          overflow, t0);
    }
  }

  // "NaN at token i, coordinate j" for the first non-finite entry of y (row-major order).
  static std::string first_non_finite(const Points<T>& y) {
    for (Eigen::Index i = 0; i < y.rows(); ++i)
      for (Eigen::Index j = 0; j < y.cols(); ++j)
        if (!std::isfinite(static_cast<double>(y(i, j))))
          return fmt::format("{:g} at token {}, coordinate {}", static_cast<double>(y(i, j)), i, j);
    return "every entry finite";
  }
};

// Continues `from`: the result so far, x, the stepper's clock and first stage, the warm starts.
template <class T>
void resume_state(const SimulationState<T>& from, SimulationResult<T>& result, Points<T>& x,
                  ParticleStepper<T>& stepper, ParticleRun<T>& hooks, AttentionField<T>& field) {
  if (from.partial.positions.rows() != x.rows() || from.partial.positions.cols() != x.cols())
    throw InputError("", "checkpoint", "holds tokens of another shape than the run's");
  result = from.partial;
  x = result.positions;
  stepping::StepClock& clock = stepper.clock();
  clock.t = from.t;
  clock.h = from.h;
  clock.steps = result.steps;
  clock.rejected = result.rejected_steps;
  clock.have_first_stage = from.have_first_stage;
  if (from.have_first_stage) stepper.first_stage() = from.first_stage;
  hooks.saved_last = from.saved_last;
  field.set_sinkhorn_potentials(from.sinkhorn_f, from.sinkhorn_g);
}

}  // namespace

template <class T>
SimulationResult<T> simulate(const AttentionParams& attention, const RunSpec& run, const Measure<T>& initial,
                             const ProgressCallback& progress, const CheckpointCallback<T>& checkpoint,
                             const SimulationState<T>* resume_from, const Communicator* comm) {
  check_run_spec(run);
  if (attention.dim != initial.d())
    throw InputError("", "attention", "parameters are for d = " + std::to_string(attention.dim) +
                                          " but the tokens have d = " + std::to_string(initial.d()));
  check_sinkhorn_attention_range(attention, initial);

  // sphere and ngpt keep the tokens on the sphere (renormalized after each step); pre, peri not;
  // mix until its mix_until (a step boundary: layer_ends).
  const bool sphere = attention.on_sphere_at(0.0);
  AttentionParams field_params = attention;
  field_params.tangent_projection =
      !(attention.scheme_at(0.0) == Normalize::sphere && run.sphere_step == SphereStep::retraction);
  AttentionField<T> field(field_params, initial);
  field.set_communicator(comm);
  SimulationResult<T> result;
  Points<T> x = initial.points;
  if (sphere) project_to_sphere(x);
  const Velocity<T> velocity{field};
  // FSAL only without the sphere: the projection changes x after each step.
  ParticleStepper<T> stepper(velocity, run, x, stepping::TimeCuts(attention.layer_ends()), {}, !sphere);
  ParticleRun<T> hooks(run, initial, field, stepper, result, attention, checkpoint);
  hooks.initial_radius = rms_radius(x, initial.weights);  // x at t = 0, also when resuming
  if (resume_from) {
    resume_state(*resume_from, result, x, stepper, hooks, field);
  } else {
    hooks.save_frame(0.0, x);
    result.status = "finished";
  }
  stepper.run(x, hooks, progress);

  // A failed step was rolled back: the result is the last finite state, at the step's start.
  const double t = hooks.rolled_back ? hooks.rolled_back_to : stepper.clock().t;
  result.steps = stepper.clock().steps - (hooks.rolled_back ? 1 : 0);
  result.rejected_steps = stepper.clock().rejected;
  result.t_final = t;
  if (result.status == "finished" && t != run.T) {
    result.status = "failed";
    result.reason = fmt::format("the integrator ended at t = {:.17g} before run.T = {:.17g}", t, run.T);
  }
  if (!hooks.saved_last) hooks.save_frame(t, x);
  result.positions = std::move(x);
  result.summation = field.summation_report();
  return result;
}

template SimulationResult<float> simulate<float>(const AttentionParams&, const RunSpec&, const Measure<float>&,
                                                 const ProgressCallback&, const CheckpointCallback<float>&,
                                                 const SimulationState<float>*, const Communicator*);
template SimulationResult<double> simulate<double>(const AttentionParams&, const RunSpec&, const Measure<double>&,
                                                   const ProgressCallback&, const CheckpointCallback<double>&,
                                                   const SimulationState<double>*, const Communicator*);

}  // namespace tokenflow
