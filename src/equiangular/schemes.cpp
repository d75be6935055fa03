// Normalization schemes on the equiangular reduction (include/tokenflow/normalization_schemes.hpp):
// Eq. (N1)-(N3), rho(t) and r(t) on the library's stepper, and the clustering time.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "ode_support.hpp"
#include "tokenflow/normalization_schemes.hpp"

namespace tokenflow {

namespace {

void check_scheme_start(const EquiangularModel& model, Normalize scheme, double rho0, double r0) {
  check_equiangular_model(model);
  if (scheme == Normalize::none)
    throw std::invalid_argument("normalization schemes: normalize = none has no equiangular reduction");
  if (scheme == Normalize::mix)
    throw std::invalid_argument(
        "normalization schemes: mix changes scheme at mix_until; use solve_mix_equiangular");
  if (!(rho0 < 1.0 && rho0 > -1.0 / (model.n - 1.0)))
    throw std::invalid_argument("normalization schemes: rho0 = " + std::to_string(rho0) +
                                " is outside (-1/(n - 1), 1)");
  if (!(std::isfinite(r0) && r0 > 0.0))
    throw std::invalid_argument("normalization schemes: r0 must be finite and positive");
  if (on_sphere(scheme) && r0 != 1.0)
    throw std::invalid_argument("normalization schemes: sphere and ngpt keep r = 1 (r0 = 1)");
}

bool moves_radius(Normalize scheme) { return scheme == Normalize::pre || scheme == Normalize::peri; }

// q = e^{-beta u} and Z = 1 + (n - 1) q at rho = 1 - u.
struct Weights {
  double q, z;
};
Weights weights_at(const EquiangularModel& model, double u) {
  const double q = std::exp(-model.beta * u);
  return {q, 1.0 + (model.n - 1.0) * q};
}

// d/dt [log(1 - rho), log r] at y = [v, w].
struct SchemeOde {
  EquiangularModel model;
  Normalize scheme;
  void operator()(double /*t*/, const Eigen::VectorXd& y, Eigen::VectorXd& dy) const {
    const double u = std::exp(y[0]), rho = -std::expm1(y[0]), r = std::exp(y[1]);
    const double s = scheme_speed_factor(model, scheme, rho, r);
    dy.resize(2);
    dy[0] = -equiangular_log_gap_rate(model, u) / s;
    dy[1] = 0.0;
    if (scheme == Normalize::pre) dy[1] = equiangular_radial_rate(model, rho) / r;
    if (scheme == Normalize::peri)
      dy[1] = equiangular_radial_rate(model, rho) / (r * equiangular_attention_norm(model, rho));
  }
};

// d/dxi [t, log r, s] with s = -log(1 - rho) = s0 + xi: dt/ds = s_factor / G, dw/ds = c / G (pre,
// peri), ds/dxi = 1. The stepper passes the layer's time, not the stage's: s is carried in the state.
struct SchemeTimeOde {
  EquiangularModel model;
  Normalize scheme;
  void operator()(double /*t_layer*/, const Eigen::VectorXd& y, Eigen::VectorXd& dy) const {
    const double u = std::exp(-y[2]), rho = -std::expm1(-y[2]), g = equiangular_log_gap_rate(model, u);
    dy.resize(3);
    dy[0] = scheme_speed_factor(model, scheme, rho, std::exp(y[1])) / g;
    dy[1] = moves_radius(scheme) ? equiangular_radial_rate(model, rho) / g : 0.0;
    dy[2] = 1.0;
  }
};

// The path from the state y = [log(1 - rho), log r] at t = 0 (appended to *path).
void append_path(const EquiangularModel& model, Normalize scheme, const Eigen::VectorXd& y,
                 const std::vector<double>& times, double tol, SchemePath* path) {
  long steps = 0;
  const std::vector<Eigen::VectorXd> at = reduction::dopri5_at_times(
      SchemeOde{model, scheme}, y, times, tol, "normalization schemes", &steps);
  path->steps += steps;
  for (const Eigen::VectorXd& v : at) {
    path->gap.push_back(std::exp(v[0]));
    path->rho.push_back(-std::expm1(v[0]));
    path->radius.push_back(std::exp(v[1]));
  }
}

// The time from s0 = -log(1 - rho) and radius r0 to s1 = -log(target gap) > s0, and the radius
// then.
SchemeClustering clustering_from(const EquiangularModel& model, Normalize scheme, double s0,
                                 double r0, double s1, double tol) {
  if (!(s1 > s0)) return {0.0, r0};
  const SchemeTimeOde f{model, scheme};
  Eigen::VectorXd y(3);
  y << 0.0, std::log(r0), s0;
  const RunSpec run = reduction::dopri5_spec(s1 - s0, tol);
  stepping::Stepper<Eigen::VectorXd, const SchemeTimeOde> stepper(f, run, y, {});
  reduction::FloorFlag hooks;
  stepper.run(y, hooks, {});
  if (hooks.floored)
    throw std::runtime_error("normalization schemes: dopri5's step fell below its floor");
  return {y[0], std::exp(y[1])};
}

void check_mix_until(double mix_until) {
  if (!(std::isfinite(mix_until) && mix_until >= 0.0))
    throw std::invalid_argument("normalization schemes: mix_until must be finite and >= 0");
}

// log(1 - rho) at t = mix_until under Post-LN from rho0.
double post_ln_log_gap_at(const EquiangularModel& model, double rho0, double mix_until,
                          double tol) {
  long steps = 0;
  Eigen::VectorXd y(2);
  y << std::log1p(-rho0), 0.0;
  return reduction::dopri5_at_times(SchemeOde{model, Normalize::sphere}, y, {mix_until}, tol,
                                    "normalization schemes", &steps)[0][0];
}

}  // namespace

const char* to_string(Normalize scheme) {
  switch (scheme) {
    case Normalize::none: return "none";
    case Normalize::sphere: return "sphere";
    case Normalize::pre: return "pre";
    case Normalize::peri: return "peri";
    case Normalize::ngpt: return "ngpt";
    case Normalize::mix:
      return "mix";
  }
  return "?";
}

double equiangular_radial_rate(const EquiangularModel& model, double rho) {
  const Weights w = weights_at(model, 1.0 - rho);
  return (1.0 + (model.n - 1.0) * rho * w.q) / w.z;
}

double equiangular_attention_norm(const EquiangularModel& model, double rho) {
  const double n = model.n;
  const Weights w = weights_at(model, 1.0 - rho);
  const double sq = 1.0 + 2.0 * (n - 1.0) * rho * w.q + (n - 1.0) * w.q * w.q * (1.0 + (n - 2.0) * rho);
  return std::sqrt(std::max(0.0, sq)) / w.z;
}

double scheme_speed_factor(const EquiangularModel& model, Normalize scheme, double rho, double radius) {
  switch (scheme) {
    case Normalize::sphere: return 1.0;
    case Normalize::pre: return radius;
    case Normalize::peri: return radius * equiangular_attention_norm(model, rho);
    case Normalize::ngpt: return equiangular_attention_norm(model, rho);
    case Normalize::mix:
      throw std::invalid_argument(
          "normalization schemes: mix's speed factor is Post-LN's before mix_until, Pre-LN's "
          "after");
    case Normalize::none: break;
  }
  throw std::invalid_argument("normalization schemes: normalize = none has no speed factor");
}

SchemePath solve_scheme_equiangular(const EquiangularModel& model, Normalize scheme, double rho0, double r0,
                                    const std::vector<double>& times, double tol) {
  check_scheme_start(model, scheme, rho0, r0);
  SchemePath path;
  path.times = times;
  Eigen::VectorXd y(2);
  y << std::log1p(-rho0), std::log(r0);
  append_path(model, scheme, y, times, tol, &path);
  return path;
}

SchemeClustering scheme_clustering_time(const EquiangularModel& model, Normalize scheme, double rho0, double r0,
                                        double target_gap, double tol) {
  check_scheme_start(model, scheme, rho0, r0);
  if (!(target_gap > 0.0 && target_gap <= 1.0 - rho0))
    throw std::invalid_argument("normalization schemes: the target gap must lie in (0, 1 - rho0]");
  return clustering_from(model, scheme, -std::log1p(-rho0), r0, -std::log(target_gap), tol);
}

SchemePath solve_mix_equiangular(const EquiangularModel& model, double rho0, double mix_until,
                                 const std::vector<double>& times, double tol) {
  check_scheme_start(model, Normalize::sphere, rho0, 1.0);
  check_mix_until(mix_until);
  if (!std::is_sorted(times.begin(), times.end()))
    throw std::invalid_argument("normalization schemes: times must be finite, >= 0 and ascending");
  const auto split = std::lower_bound(times.begin(), times.end(), mix_until);
  SchemePath path;
  path.times = times;
  Eigen::VectorXd y(2);
  y << std::log1p(-rho0), 0.0;
  append_path(model, Normalize::sphere, y, std::vector<double>(times.begin(), split), tol, &path);
  if (split == times.end()) return path;
  // Pre-LN from the Post-LN state at mix_until (r = 1), its clock started there.
  y[0] = post_ln_log_gap_at(model, rho0, mix_until, tol);
  std::vector<double> later;
  for (auto t = split; t != times.end(); ++t) later.push_back(*t - mix_until);
  append_path(model, Normalize::pre, y, later, tol, &path);
  return path;
}

SchemeClustering mix_clustering_time(const EquiangularModel& model, double rho0, double mix_until,
                                     double target_gap, double tol) {
  check_mix_until(mix_until);
  const SchemeClustering post_ln =
      scheme_clustering_time(model, Normalize::sphere, rho0, 1.0, target_gap, tol);
  if (post_ln.time <= mix_until) return post_ln;
  const double s0 = -post_ln_log_gap_at(model, rho0, mix_until, tol);
  SchemeClustering pre_ln =
      clustering_from(model, Normalize::pre, s0, 1.0, -std::log(target_gap), tol);
  pre_ln.time += mix_until;
  return pre_ln;
}

}  // namespace tokenflow
