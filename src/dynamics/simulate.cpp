// The particle flow: fixed-step euler and rk4, adaptive Dormand-Prince 5(4), blow-up detection,
// frames and diagnostics. All workspaces are allocated before the first step.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tokenflow/dynamics.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/ot_solve.hpp"

namespace tokenflow {

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

}  // namespace

template <class T>
void check_sinkhorn_attention_range(const AttentionParams& attention, const Measure<T>& initial) {
  if (attention.kind != AttentionKind::sinkhorn) return;
  const Eigen::MatrixXd x = initial.points.template cast<double>();
  double largest = 0.0;
  for (const AttentionLayer& layer : attention.layers)
    for (const HeadBlocks& head : layer.heads) {
      const double q = (x * head.Q.transpose()).rowwise().norm().maxCoeff();
      const double k = (x * head.K.transpose()).rowwise().norm().maxCoeff();
      const double bound = std::abs(attention.scale) * q * k;
      largest = std::isnan(bound) ? INFINITY : std::max(largest, bound);
    }
  if (!std::isfinite(largest))
    throw InputError("", "attention.Q",
                     "with these points, the Sinkhorn attention's logits scale <Q x_i, K x_j> overflow double "
                     "precision (rescale Q, K or the points)");
  if (largest / attention.epsilon > kMaxCostOverEpsilon)
    throw InputError("", "attention.epsilon",
                     fmt::format("{:g} is too small for logits up to {:g} at these points: the "
                                 "log-domain exponents s / epsilon keep no correct digit in double precision "
                                 "beyond 2^50 = {:g}; use epsilon >= {:g}",
                                 attention.epsilon, largest, kMaxCostOverEpsilon, largest / kMaxCostOverEpsilon));
}

template void check_sinkhorn_attention_range<float>(const AttentionParams&, const Measure<float>&);
template void check_sinkhorn_attention_range<double>(const AttentionParams&, const Measure<double>&);

namespace {

// Dormand & Prince (1980), RK5(4)7M, as tabulated in Hairer, Norsett, Wanner, Solving ODEs I,
// Table II.5.2.
constexpr double a21 = 1.0 / 5;
constexpr double a31 = 3.0 / 40, a32 = 9.0 / 40;
constexpr double a41 = 44.0 / 45, a42 = -56.0 / 15, a43 = 32.0 / 9;
constexpr double a51 = 19372.0 / 6561, a52 = -25360.0 / 2187, a53 = 64448.0 / 6561, a54 = -212.0 / 729;
constexpr double a61 = 9017.0 / 3168, a62 = -355.0 / 33, a63 = 46732.0 / 5247, a64 = 49.0 / 176,
                 a65 = -5103.0 / 18656;
constexpr double b1 = 35.0 / 384, b3 = 500.0 / 1113, b4 = 125.0 / 192, b5 = -2187.0 / 6784, b6 = 11.0 / 84;
// e = b (5th order) - b* (4th order)
constexpr double e1 = 71.0 / 57600, e3 = -71.0 / 16695, e4 = 71.0 / 1920, e5 = -17253.0 / 339200,
                 e6 = 22.0 / 525, e7 = -1.0 / 40;

template <class T>
class Stepper {
 public:
  Stepper(AttentionField<T>& field, const RunSpec& run, Eigen::Index n, Eigen::Index d)
      : field_(field), run_(run) {
    const int stages = run.integrator == Integrator::dopri5 ? 7 : (run.integrator == Integrator::rk4 ? 4 : 1);
    k_.assign(static_cast<std::size_t>(stages), Points<T>(n, d));
    tmp_.resize(n, d);
    if (run.integrator == Integrator::dopri5) {
      next_.resize(n, d);
      err_.resize(n, d);
    }
  }

  // Fixed step of size h from (t, x), in place. The step lies inside one layer's interval (the
  // caller splits steps at layer boundaries); `t_layer` selects that layer for every stage.
  void fixed_step(double t_layer, double h, Points<T>& x) {
    const T th = static_cast<T>(h);
    if (run_.integrator == Integrator::euler) {
      field_.velocity(t_layer, x, k_[0]);
      x.noalias() += th * k_[0];
      return;
    }
    // Classical RK4 (the field is autonomous within a layer).
    field_.velocity(t_layer, x, k_[0]);
    tmp_ = x + (th / 2) * k_[0];
    field_.velocity(t_layer, tmp_, k_[1]);
    tmp_ = x + (th / 2) * k_[1];
    field_.velocity(t_layer, tmp_, k_[2]);
    tmp_ = x + th * k_[2];
    field_.velocity(t_layer, tmp_, k_[3]);
    x.noalias() += (th / 6) * (k_[0] + T(2) * k_[1] + T(2) * k_[2] + k_[3]);
  }

  // One Dormand-Prince attempt from x with step h inside one layer (selected by t_layer): writes
  // the 5th-order solution to next_ and returns the scaled error norm (accept when <= 1).
  // k_[0] must hold f(x).
  double dopri_attempt(double t_layer, double h, const Points<T>& x) {
    const double t = t_layer;
    auto& k = k_;
    const T H = static_cast<T>(h);
    tmp_ = x + H * T(a21) * k[0];
    field_.velocity(t, tmp_, k[1]);
    tmp_ = x + H * (T(a31) * k[0] + T(a32) * k[1]);
    field_.velocity(t, tmp_, k[2]);
    tmp_ = x + H * (T(a41) * k[0] + T(a42) * k[1] + T(a43) * k[2]);
    field_.velocity(t, tmp_, k[3]);
    tmp_ = x + H * (T(a51) * k[0] + T(a52) * k[1] + T(a53) * k[2] + T(a54) * k[3]);
    field_.velocity(t, tmp_, k[4]);
    tmp_ = x + H * (T(a61) * k[0] + T(a62) * k[1] + T(a63) * k[2] + T(a64) * k[3] + T(a65) * k[4]);
    field_.velocity(t, tmp_, k[5]);
    next_ = x + H * (T(b1) * k[0] + T(b3) * k[2] + T(b4) * k[3] + T(b5) * k[4] + T(b6) * k[5]);
    field_.velocity(t, next_, k[6]);
    err_ = H * (T(e1) * k[0] + T(e3) * k[2] + T(e4) * k[3] + T(e5) * k[4] + T(e6) * k[5] + T(e7) * k[6]);
    // Hairer's norm: RMS of err / (atol + rtol max(|x|, |x_new|)), with atol = rtol = tol.
    double sum = 0.0;
    for (Eigen::Index i = 0; i < x.rows(); ++i)
      for (Eigen::Index c = 0; c < x.cols(); ++c) {
        const double sc = run_.tol * (1.0 + std::max(std::abs(static_cast<double>(x(i, c))),
                                                      std::abs(static_cast<double>(next_(i, c)))));
        const double r = static_cast<double>(err_(i, c)) / sc;
        sum += r * r;
      }
    return std::sqrt(sum / static_cast<double>(x.size()));
  }

  Points<T>& first_stage() { return k_[0]; }
  Points<T>& last_stage() { return k_.back(); }
  Points<T>& proposal() { return next_; }

 private:
  AttentionField<T>& field_;
  const RunSpec& run_;
  std::vector<Points<T>> k_;
  Points<T> tmp_, next_, err_;
};

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

  AttentionField<T> field(attention, initial);
  field.set_communicator(comm);
  SimulationResult<T> result;
  Points<T> x = initial.points;
  const bool sphere = attention.normalize == Normalize::sphere;
  if (sphere) project_to_sphere(x);
  const Eigen::Index n = x.rows(), d = x.cols();
  Stepper<T> stepper(field, run, n, d);

  auto save_frame = [&](double t) {
    result.diagnostics.push_back(measure_frame(t, x, initial.weights, run, &field));
    if (run.save_every > 0) {
      result.frames.push_back(x);
      result.times.push_back(t);
    }
  };
  // A progress callback that returns false asks the run to stop: it stops after the step's
  // bookkeeping, where maybe_checkpoint() writes the state the next step would start from (so a
  // stopped run resumes bit for bit), and then throws Cancelled.
  bool stop_requested = false;
  auto report = [&](double t) {
    if (progress && !progress(Progress{t, run.T, result.steps})) stop_requested = true;
  };

  double t = 0.0;
  double h = std::min(run.dt, run.T);  // dopri5's trial step
  bool saved_last = true;
  bool have_first_stage = false;
  if (resume_from) {
    if (resume_from->partial.positions.rows() != n || resume_from->partial.positions.cols() != d)
      throw InputError("", "checkpoint", "holds tokens of another shape than the run's");
    result = resume_from->partial;
    x = result.positions;
    t = resume_from->t;
    h = resume_from->h;
    saved_last = resume_from->saved_last;
    have_first_stage = resume_from->have_first_stage;
    if (have_first_stage) stepper.first_stage() = resume_from->first_stage;
    field.set_sinkhorn_potentials(resume_from->sinkhorn_f, resume_from->sinkhorn_g);
  } else {
    save_frame(0.0);
    result.status = "finished";
  }
  // Writes the state through `checkpoint` every run.checkpoint_every steps (after the step's
  // bookkeeping, so that the state is exactly what the next step starts from).
  auto maybe_checkpoint = [&]() {
    if (stop_requested && !(checkpoint && run.checkpoint_every > 0)) throw Cancelled();
    if (!checkpoint || run.checkpoint_every <= 0 || (result.steps % run.checkpoint_every != 0 && !stop_requested)) return;
    SimulationState<T> state;
    state.partial = result;
    state.partial.positions = x;
    state.t = t;
    state.h = h;
    state.saved_last = saved_last;
    state.have_first_stage = have_first_stage;
    if (have_first_stage) state.first_stage = stepper.first_stage();
    field.sinkhorn_potentials(state.sinkhorn_f, state.sinkhorn_g);
    checkpoint(state);
    if (stop_requested) throw Cancelled();
  };
  auto after_step = [&](double t_new) -> bool {  // false: stop (blow-up)
    t = t_new;
    ++result.steps;
    saved_last = false;
    if (sphere) project_to_sphere(x);
    if (!(max_row_norm(x) <= run.blowup)) {
      result.status = "blowup";
      return false;
    }
    if (run.save_every > 0 && result.steps % run.save_every == 0) {
      save_frame(t);
      saved_last = true;
    }
    report(t);
    return true;
  };

  // Layer boundaries inside (a, b), with a margin so that rounding never makes a sliver step.
  std::vector<double> boundaries;
  for (const auto& layer : attention.layers)
    if (std::isfinite(layer.until)) boundaries.push_back(layer.until);
  auto next_boundary = [&](double a, double b) {
    const double margin = 1e-12 * std::max(1.0, std::abs(b));
    for (double u : boundaries)
      if (u > a + margin && u < b - margin) return u;
    return b;
  };

  if (run.integrator != Integrator::dopri5) {
    // Step k starts at k dt (not an accumulated sum), the last one ends exactly at T. A step that
    // crosses a layer boundary is split there, so that every stage sees one layer's parameters
    // (the flow of piecewise-constant parameters, to the order of the method).
    const long steps = fixed_step_count(run);
    for (long k = result.steps; k < steps; ++k) {
      const double t0 = static_cast<double>(k) * run.dt;
      const double t1 = k + 1 == steps ? run.T : t0 + run.dt;
      for (double a = t0; a < t1;) {
        const double b = next_boundary(a, t1);
        stepper.fixed_step(0.5 * (a + b), b - a, x);  // the midpoint names the layer robustly
        a = b;
      }
      if (!after_step(t1)) break;
      maybe_checkpoint();
    }
  } else {
    while (t < run.T) {
      // Do not step across a layer boundary: the field is discontinuous there.
      const double limit = next_boundary(t, run.T);
      const double floor = dopri5_step_floor(t, run);
      h = std::max(h, floor);  // no step below the floor is tried (a final sliver to limit may be)
      const bool last = h >= limit - t;
      if (last) h = limit - t;
      const double t_layer = t + 0.5 * h;
      if (!have_first_stage) field.velocity(t_layer, x, stepper.first_stage());
      const double err = stepper.dopri_attempt(t_layer, h, x);
      const double factor = std::clamp(0.9 * std::pow(std::max(err, 1e-10), -0.2), 0.2, 5.0);
      if (err <= 1.0 && std::isfinite(err)) {
        x.swap(stepper.proposal());
        // FSAL: the last stage is f(x_new), unless the points were renormalized or the next step
        // is in another layer.
        stepper.first_stage().swap(stepper.last_stage());
        have_first_stage = !sphere && !(last && limit < run.T);
        const double t_new = last ? limit : t + h;
        if (!after_step(t_new)) break;
        h *= factor;
        maybe_checkpoint();
      } else {
        ++result.rejected_steps;
        have_first_stage = true;  // f(x) at the start of the step is still valid
        const double tried = h;
        h *= std::isfinite(err) ? factor : 0.2;
        if (h < floor) {
          // Rejected at the floor. A singularity within reach explains it (blow-up); otherwise the
          // run stalls (tolerance out of reach, a stiff or non-finite field): see dynamics.hpp.
          const double growth = growth_time(x, stepper.first_stage());
          if (growth > 0.0 && growth <= kSingularReach * floor) {
            result.status = "blowup";
          } else {
            result.status = "stalled";
            result.reason = fmt::format(
                "dopri5 stalled at t = {:g} (T = {:g}): a step of {:g} was rejected (error {:g} times "
                "run.tol = {:g}) and steps below the floor {:g} are not taken; the solution's growth time "
                "|x| / (d|x|/dt) is {:g}, no singularity within reach",
                t, run.T, tried, err, run.tol, floor, growth);
          }
          break;
        }
      }
    }
  }
  result.t_final = t;
  if (result.status == "finished" && t != run.T) {
    result.status = "failed";
    result.reason = fmt::format("the integrator ended at t = {:.17g} before run.T = {:.17g}", t, run.T);
  }
  if (!saved_last) save_frame(t);
  result.positions = std::move(x);
  return result;
}

template SimulationResult<float> simulate<float>(const AttentionParams&, const RunSpec&, const Measure<float>&,
                                                 const ProgressCallback&, const CheckpointCallback<float>&,
                                                 const SimulationState<float>*, const Communicator*);
template SimulationResult<double> simulate<double>(const AttentionParams&, const RunSpec&, const Measure<double>&,
                                                   const ProgressCallback&, const CheckpointCallback<double>&,
                                                   const SimulationState<double>*, const Communicator*);

}  // namespace tokenflow
