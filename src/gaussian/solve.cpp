// The moment ODE dm/dt = b + M m, dS/dt = M S + S M^T: Dormand-Prince 5(4) with step control
// (or fixed-step euler / rk4), layer boundaries, frames, events (blow-up, convergence) and the
// positive-semidefiniteness report.
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

#include <Eigen/Eigenvalues>
#include <algorithm>
#include <cmath>
#include <limits>

#include "tokenflow/error.hpp"
#include "tokenflow/gaussian.hpp"

namespace tokenflow {

namespace {

// Dormand & Prince (1980), RK5(4)7M, as tabulated in Hairer, Norsett, Wanner, Solving ODEs I,
// Table II.5.2 (the same tableau as the particle integrator in src/dynamics/simulate.cpp).
constexpr double a21 = 1.0 / 5;
constexpr double a31 = 3.0 / 40, a32 = 9.0 / 40;
constexpr double a41 = 44.0 / 45, a42 = -56.0 / 15, a43 = 32.0 / 9;
constexpr double a51 = 19372.0 / 6561, a52 = -25360.0 / 2187, a53 = 64448.0 / 6561, a54 = -212.0 / 729;
constexpr double a61 = 9017.0 / 3168, a62 = -355.0 / 33, a63 = 46732.0 / 5247, a64 = 49.0 / 176,
                 a65 = -5103.0 / 18656;
constexpr double b1 = 35.0 / 384, b3 = 500.0 / 1113, b4 = 125.0 / 192, b5 = -2187.0 / 6784, b6 = 11.0 / 84;
constexpr double e1 = 71.0 / 57600, e3 = -71.0 / 16695, e4 = 71.0 / 1920, e5 = -17253.0 / 339200,
                 e6 = 22.0 / 525, e7 = -1.0 / 40;

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
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(0.5 * (S + S.transpose()));
  const Eigen::Index top = S.rows() - 1;
  const double lambda = eig.eigenvalues()[top];
  const Eigen::VectorXd v = eig.eigenvectors().col(top);
  const double rate = v.dot(dS * v);
  if (!(lambda > 0.0 && rate > 0.0)) return t;
  const double step = lambda / rate;
  return std::isfinite(step) ? t + step : t;
}

}  // namespace

GaussianResult solve_moments(const AttentionParams& params, const GaussianRunSpec& spec, const GaussianMoments& initial,
                             const ProgressCallback& progress) {
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
  const MomentField field(params);
  const MomentOde f(field, d);
  {
    // The initial state must be one where the ODE can be computed and that is not past the
    // blow-up threshold already (a run would stop there before its first step).
    const double trace = initial.cov.trace();
    if (!(trace <= run.blowup))
      throw InputError("", "init.cov",
                       fmt::format("has trace {:g}, above run.blowup = {:g}: the run would stop as blown up "
                                   "before its first step",
                                   trace, run.blowup));
    Eigen::VectorXd y0 = f.pack(initial.mean, initial.cov), dy0;
    f(0.0, y0, dy0);
    if (!dy0.allFinite()) {
      const bool mean_larger = initial.mean.squaredNorm() > std::abs(trace);
      throw InputError("", mean_larger ? "init.mean" : "init.cov",
                       fmt::format("is out of the range where the moment ODE is computable: its rates at t = 0 "
                                   "overflow double precision (|m| = {:g}, trace S = {:g}); rescale it",
                                   initial.mean.norm(), trace));
    }
  }

  GaussianResult result;
  result.status = "horizon";
  // S leaves the cone "by more than rounding" when lambda_min(S) < -allowance (1 + lambda_max(S)):
  // one step's error bound in the 2-norm is |dS|_F <= sqrt(d + d^2) tol (1 + |y|) <= (d + 1) tol
  // (1 + |y|) (Hairer's RMS norm); we allow ten of them, and never less than 1e-14 (rounding).
  result.psd_allowance = std::max(10.0 * double(d + 1) * run.tol, 1e-14);

  Eigen::VectorXd y = f.pack(initial.mean, 0.5 * (initial.cov + initial.cov.transpose()));
  double t = 0.0;
  auto save_frame = [&](double time) {
    result.times.push_back(time);
    result.means.push_back(f.mean(y));
    result.covs.push_back(f.cov(y));
  };
  auto check_psd = [&](double time) {
    const Eigen::VectorXd lambda =
        Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(f.cov(y), Eigen::EigenvaluesOnly).eigenvalues();
    const double relative = lambda.minCoeff() / (1.0 + std::max(lambda.maxCoeff(), 0.0));
    if (relative < result.psd_worst_relative_eigenvalue) result.psd_worst_relative_eigenvalue = relative;
    if (relative < -result.psd_allowance && !result.left_psd_cone) {
      result.left_psd_cone = true;
      result.left_psd_cone_time = time;
    }
  };
  auto exploded = [&]() { return !(f.cov(y).trace() <= run.blowup) || !y.allFinite(); };
  // The last layer is active (convergence is final only there: a later layer would move S again).
  double last_boundary = 0.0;
  for (const auto& layer : params.layers)
    if (std::isfinite(layer.until)) last_boundary = std::max(last_boundary, layer.until);
  auto stationary = [&](double time, const Eigen::VectorXd& dy) {
    if (time < last_boundary) return false;
    const double dm = dy.head(d).norm(), dS = dy.tail(d * d).norm();
    return dm <= spec.converge_tol * (1.0 + f.mean(y).norm()) && dS <= spec.converge_tol * (1.0 + f.cov(y).norm());
  };
  auto report = [&]() {
    if (progress && !progress(Progress{t, run.T, result.steps})) throw Cancelled();
  };

  save_frame(0.0);
  check_psd(0.0);
  std::vector<double> boundaries;
  for (const auto& layer : params.layers)
    if (std::isfinite(layer.until) && layer.until < run.T) boundaries.push_back(layer.until);
  const double margin = 1e-12 * std::max(1.0, run.T);
  bool saved_last = true;
  Eigen::VectorXd k1, last_rate;  // last_rate: f at the current y (when known)

  if (run.integrator == Integrator::dopri5) {
    std::vector<double> grid;  // save_every = 0: the frame times, steps land on them
    if (run.save_every == 0)
      for (int j = 1; j < spec.grid_frames; ++j) grid.push_back(run.T * double(j) / double(spec.grid_frames));
    auto next_after = [&](const std::vector<double>& list, double a) {
      for (double u : list)
        if (u > a + margin) return u;
      return std::numeric_limits<double>::infinity();
    };
    std::vector<Eigen::VectorXd> k(7);
    Eigen::VectorXd tmp, next, err;
    double h = std::min(run.dt, std::max(run.T, 1e-300));
    bool have_k1 = false;
    while (t < run.T) {
      const double boundary = next_after(boundaries, t), grid_time = next_after(grid, t);
      double limit = std::min({boundary, grid_time, run.T});
      if (limit > run.T - margin) limit = run.T;
      const double floor = dopri5_step_floor(t, run);
      h = std::max(h, floor);  // no step below the floor is tried (a final sliver to limit may be)
      const bool last = h >= limit - t;
      if (last) h = limit - t;
      const double t_layer = t + 0.5 * h;
      if (!have_k1) {
        f(t_layer, y, k[0]);
        have_k1 = true;
      }
      if (stationary(t, k[0])) {
        result.status = "converged";
        break;
      }
      tmp = y + h * a21 * k[0];
      f(t_layer, tmp, k[1]);
      tmp = y + h * (a31 * k[0] + a32 * k[1]);
      f(t_layer, tmp, k[2]);
      tmp = y + h * (a41 * k[0] + a42 * k[1] + a43 * k[2]);
      f(t_layer, tmp, k[3]);
      tmp = y + h * (a51 * k[0] + a52 * k[1] + a53 * k[2] + a54 * k[3]);
      f(t_layer, tmp, k[4]);
      tmp = y + h * (a61 * k[0] + a62 * k[1] + a63 * k[2] + a64 * k[3] + a65 * k[4]);
      f(t_layer, tmp, k[5]);
      next = y + h * (b1 * k[0] + b3 * k[2] + b4 * k[3] + b5 * k[4] + b6 * k[5]);
      f(t_layer, next, k[6]);
      err = h * (e1 * k[0] + e3 * k[2] + e4 * k[3] + e5 * k[4] + e6 * k[5] + e7 * k[6]);
      // Hairer's norm: RMS of err / (atol + rtol max(|y|, |y_new|)), atol = rtol = tol.
      double sum = 0.0;
      for (Eigen::Index i = 0; i < y.size(); ++i) {
        const double sc = run.tol * (1.0 + std::max(std::abs(y[i]), std::abs(next[i])));
        sum += (err[i] / sc) * (err[i] / sc);
      }
      const double e = std::sqrt(sum / double(y.size()));
      const double factor = std::clamp(0.9 * std::pow(std::max(e, 1e-10), -0.2), 0.2, 5.0);
      if (e <= 1.0 && std::isfinite(e)) {
        y.swap(next);
        f.symmetrize(y);  // changes y by rounding only: the field keeps S symmetric
        const double t_new = last ? limit : t + h;
        const bool crossed_layer = last && limit == boundary;
        t = t_new;
        ++result.steps;
        saved_last = false;
        k[0].swap(k[6]);  // FSAL: f(y_new) in the step's layer
        have_k1 = !crossed_layer;
        check_psd(t);
        if (exploded()) {
          result.status = "blowup";
          Eigen::VectorXd dy = k[0];
          if (crossed_layer) f(t, y, dy);
          result.blowup_time = refined_blowup_time(t, f.cov(y), f.cov(dy));
          break;
        }
        const bool on_grid = run.save_every == 0 && last && limit == grid_time;
        if ((run.save_every > 0 && result.steps % run.save_every == 0) || on_grid) {
          save_frame(t);
          saved_last = true;
        }
        report();
        h *= factor;
      } else {
        ++result.rejected_steps;
        const double tried = h;
        h *= std::isfinite(e) ? factor : 0.2;
        if (h < floor) {
          // Rejected at the floor (dynamics.hpp, dopri5_step_floor): a blow-up when the singular
          // time t + lambda / lambda' (the refinement above) lies within kSingularReach floors,
          // else the run stalls.
          const double singular = refined_blowup_time(t, f.cov(y), f.cov(k[0]));
          if (singular > t && singular - t <= kSingularReach * floor) {
            result.status = "blowup";
            result.blowup_time = singular;
          } else {
            result.status = "stalled";
            result.reason = fmt::format(
                "dopri5 stalled at t = {:g} (T = {:g}): a step of {:g} was rejected (error {:g} times "
                "run.tol = {:g}) and steps below the floor {:g} are not taken; no singularity within reach "
                "(trace S = {:g})",
                t, run.T, tried, e, run.tol, floor, f.cov(y).trace());
          }
          break;
        }
      }
    }
  } else {
    // Step k starts at k dt and the last one ends at T; steps are cut at layer boundaries.
    const long steps = fixed_step_count(run);
    const long every = run.save_every > 0 ? run.save_every : std::max<long>(1, steps / spec.grid_frames);
    Eigen::VectorXd s1, s2, s3, s4;
    for (long step = 0; step < steps; ++step) {
      const double t0 = static_cast<double>(step) * run.dt;
      const double t1 = step + 1 == steps ? run.T : t0 + run.dt;
      f(t0 + 0.5 * std::min(run.dt, t1 - t0), y, s1);
      if (stationary(t0, s1)) {
        result.status = "converged";
        break;
      }
      const Eigen::VectorXd previous = y;
      for (double a = t0; a < t1;) {
        double b = t1;
        for (double u : boundaries)
          if (u > a + margin && u < t1 - margin) {
            b = u;
            break;
          }
        const double hh = b - a, tl = 0.5 * (a + b);
        f(tl, y, s1);
        if (run.integrator == Integrator::euler) {
          y += hh * s1;
        } else {
          f(tl, y + hh / 2 * s1, s2);
          f(tl, y + hh / 2 * s2, s3);
          f(tl, y + hh * s3, s4);
          y += hh / 6 * (s1 + 2 * s2 + 2 * s3 + s4);
        }
        a = b;
      }
      f.symmetrize(y);
      t = t1;
      ++result.steps;
      saved_last = false;
      if (y.allFinite()) check_psd(t);
      if (exploded()) {
        result.status = "blowup";
        // A fixed step may jump past the singularity: refine from the last finite state.
        if (!y.allFinite()) {
          y = previous;
          t = t0;
        }
        Eigen::VectorXd dy;
        f(t, y, dy);
        result.blowup_time = refined_blowup_time(t, f.cov(y), f.cov(dy));
        break;
      }
      if (result.steps % every == 0) {
        save_frame(t);
        saved_last = true;
      }
      report();
    }
  }
  if (result.status == "horizon") {
    // At T: stationary there too counts as converged.
    Eigen::VectorXd dy;
    f(t, y, dy);
    if (stationary(t, dy)) result.status = "converged";
  }
  result.t_final = t;
  if (!saved_last) save_frame(t);
  result.final.mean = f.mean(y);
  result.final.cov = f.cov(y);
  // Verified before anything is reported: the horizon is T itself, and every moment reported
  // outside a blow-up is finite.
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
  return result;
}

}  // namespace tokenflow
