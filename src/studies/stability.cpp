// W_2 stability of the particle flow: see stability.hpp.
#include "tokenflow/stability.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tokenflow/echo.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/ot.hpp"
#include "tokenflow/wasserstein.hpp"

namespace tokenflow {

namespace {

double gaussian_fit_w2(const Points<double>& x, const Points<double>& y, const Eigen::VectorXd& a) {
  const Measure<double> mx{x, a, {}}, my{y, a, {}};
  return bures_wasserstein({weighted_mean(mx), weighted_covariance(mx)}, {weighted_mean(my), weighted_covariance(my)});
}

}  // namespace

StabilityResult stability_study(const AttentionParams& params, const RunSpec& run_in, const Measure<double>& mu0,
                                const StabilitySpec& spec, const StabilityProgress& progress) {
  if (!(spec.delta > 0.0 && std::isfinite(spec.delta)))
    throw InputError("", "stability.delta", "must be positive and finite");
  if (spec.perturbation != "noise" && spec.perturbation != "shift")
    throw InputError("", "stability.perturbation", "must be \"noise\" or \"shift\" (got \"" + echo(spec.perturbation) + "\")");
  if (spec.frames < 1) throw InputError("", "stability.frames", "must be at least 1");
  if (run_in.integrator == Integrator::dopri5)
    throw InputError("", "run.integrator",
                     "stability compares the two runs at equal times: use a fixed-step integrator (euler or rk4)");
  const Eigen::Index n = mu0.n(), d = mu0.d();
  RunSpec run = run_in;
  const auto steps = static_cast<long>(std::ceil(run.T / run.dt - 1e-9));
  if (run.save_every == 0) run.save_every = static_cast<int>(std::max<long>(1, steps / spec.frames));

  // nu_0: the perturbed copy.
  Measure<double> nu0 = mu0;
  if (spec.perturbation == "shift") {
    nu0.points.col(0).array() += spec.delta;
  } else {
    Random rng(spec.seed);
    Points<double> xi(n, d);
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index c = 0; c < d; ++c) xi(i, c) = rng.normal();
    double sq = 0.0;
    for (Eigen::Index i = 0; i < n; ++i) sq += mu0.weights[i] * xi.row(i).squaredNorm();
    nu0.points += (spec.delta / std::sqrt(sq)) * xi;
  }
  Measure<double> mu = mu0;
  if (on_sphere(params.normalize)) {
    mu.points.rowwise().normalize();
    nu0.points.rowwise().normalize();
  }

  StabilityResult result;
  result.method = n <= spec.exact_max_n ? "exact" : "gaussian";
  const Eigen::VectorXd a = mu.weights;
  auto distance = [&](const Points<double>& x, const Points<double>& y) {
    return result.method == "exact" ? wasserstein_exact(x, y, a, a, 2.0) : gaussian_fit_w2(x, y, a);
  };
  // Work: two simulations (half) and the distances (half), roughly.
  auto report = [&](double fraction) {
    if (progress && !progress(fraction)) throw Cancelled();
    return true;
  };
  const SimulationResult<double> rmu = simulate(params, run, mu, [&](const Progress& p) {
    return report(0.25 * (p.T > 0 ? p.t / p.T : 1.0));
  });
  const SimulationResult<double> rnu = simulate(params, run, nu0, [&](const Progress& p) {
    return report(0.25 + 0.25 * (p.T > 0 ? p.t / p.T : 1.0));
  });
  result.status_mu = rmu.status;
  result.status_nu = rnu.status;
  result.status = rmu.status == "finished" && rnu.status == "finished" ? "finished" : "blowup";
  for (const auto* r : {&rmu, &rnu})
    if (r->status == "failed" || r->status == "stalled") {
      result.status = "failed";
      result.reason = fmt::format("the flow of {}: {}", r == &rmu ? "mu_0" : "nu_0 (the perturbed copy)", r->reason);
      break;
    }
  result.steps = rmu.steps;
  const std::size_t frames = std::min(rmu.frames.size(), rnu.frames.size());
  for (std::size_t f = 0; f < frames; ++f) {
    if (rmu.times[f] != rnu.times[f]) break;  // one run stopped early (blow-up)
    StabilityRow row;
    row.t = rmu.times[f];
    row.w2 = distance(rmu.frames[f], rnu.frames[f]);
    result.rows.push_back(row);
    report(0.5 + 0.5 * double(f + 1) / double(frames));
  }
  result.w2_initial = result.rows.empty() ? 0.0 : result.rows.front().w2;
  result.growth_constant = 0.0;
  result.growth_rate = -std::numeric_limits<double>::infinity();
  for (auto& row : result.rows) {
    row.ratio = result.w2_initial > 0.0 ? row.w2 / result.w2_initial : std::numeric_limits<double>::quiet_NaN();
    result.growth_constant = std::max(result.growth_constant, row.ratio);
    if (row.t > 0.0) result.growth_rate = std::max(result.growth_rate, std::log(row.ratio) / row.t);
  }
  if (result.rows.size() < 2) result.growth_rate = std::numeric_limits<double>::quiet_NaN();
  return result;
}

}  // namespace tokenflow
