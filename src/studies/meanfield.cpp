// Mean-field convergence: particles (simulate) against the moment ODE, see meanfield.hpp.
#include "tokenflow/meanfield.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include "tokenflow/dynamics.hpp"
#include "tokenflow/error.hpp"

namespace tokenflow {

double log_log_slope(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t k = x.size();
  double sx = 0, sy = 0;
  for (std::size_t i = 0; i < k; ++i) {
    sx += std::log(x[i]);
    sy += std::log(y[i]);
  }
  const double mx = sx / double(k), my = sy / double(k);
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < k; ++i) {
    sxx += (std::log(x[i]) - mx) * (std::log(x[i]) - mx);
    sxy += (std::log(x[i]) - mx) * (std::log(y[i]) - my);
  }
  if (k < 2 || !(sxx > 0.0)) return std::numeric_limits<double>::quiet_NaN();
  return sxy / sxx;
}

namespace {

// A seed per (base, n, sample) far from every other one. Random(seed) starts its splitmix64 stream
// at seed * golden + c and advances by golden, so seeds s and s + k give the same stream shifted by
// k numbers (nearly the same sample): consecutive integers must not be used as seeds. Hashing with
// the splitmix64 finalizer spreads them over the whole cycle.
std::uint64_t mix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

GaussianMoments solve_to(const AttentionParams& params, const RunSpec& particles, const GaussianMoments& g) {
  GaussianRunSpec spec;
  spec.run = particles;
  spec.run.integrator = Integrator::dopri5;
  spec.run.save_every = 0;
  spec.grid_frames = 1;
  spec.converge_tol = 1e-300;  // run to T
  const GaussianResult r = solve_moments(params, spec, g);
  if (r.status == "blowup")
    throw InputError("", "run.T",
                     fmt::format("the moment ODE blows up at t = {:g} < T = {:g}; choose a smaller T",
                                 r.blowup_time.value_or(r.t_final), particles.T));
  if (r.status == "stalled" || r.status == "failed")
    throw std::runtime_error("meanfield: the moment ODE " + r.status + ": " + r.reason);
  return r.final;
}

}  // namespace

void check_meanfield_spec(const MeanFieldSpec& spec) {
  if (spec.ns.empty()) throw InputError("", "meanfield.ns", "must list at least one n");
  for (long n : spec.ns)
    if (n < 2) throw InputError("", "meanfield.ns", "every n must be at least 2 (got " + std::to_string(n) + ")");
  if (spec.seeds < 1) throw InputError("", "meanfield.seeds", "must be at least 1");
}

MeanFieldResult meanfield_study(const AttentionParams& params, const RunSpec& particles, const GaussianMoments& initial,
                                const MeanFieldSpec& spec, const FractionCallback& progress) {
  check_gaussian_closure(params);
  check_gaussian(initial);
  check_meanfield_spec(spec);

  MeanFieldResult result;
  result.ode_final = solve_to(params, particles, initial);
  double total = 0.0, done = 0.0;
  for (long n : spec.ns) total += double(spec.seeds) * double(n) * double(n);

  for (long n : spec.ns)
    for (int s = 0; s < spec.seeds; ++s) {
      const auto start = std::chrono::steady_clock::now();
      MeanFieldRow row;
      row.n = n;
      row.sample = s;
      row.seed = mix(mix(mix(spec.seed) ^ static_cast<std::uint64_t>(n)) ^ static_cast<std::uint64_t>(s));
      const Measure<double> mu = make_measure<double>(sample_gaussian(n, initial.mean, initial.cov, row.seed));
      const double cost = double(n) * double(n);
      const SimulationResult<double> sim = simulate(params, particles, mu, [&](const Progress& p) {
        return !progress || progress((done + cost * (p.T > 0 ? p.t / p.T : 1.0)) / total);
      });
      row.status = sim.status;
      // A particle run that did not reach T compares nothing with the ODE at T.
      if (sim.status == "stalled" || sim.status == "failed")
        throw std::runtime_error(fmt::format("meanfield: the particle run for n = {}, sample {} {}: {}", n, s,
                                             sim.status, sim.reason));
      const Measure<double> out{sim.positions, mu.weights, {}};
      const GaussianMoments fit{weighted_mean(out), weighted_covariance(out)};
      const GaussianMoments own{weighted_mean(mu), weighted_covariance(mu)};
      const GaussianMoments from_sample = solve_to(params, particles, own);
      row.mean_error = (fit.mean - result.ode_final.mean).norm();
      row.cov_error = (fit.cov - result.ode_final.cov).norm();
      row.bures_wasserstein = bures_wasserstein(result.ode_final, fit);
      row.mean_error_from_sample = (fit.mean - from_sample.mean).norm();
      row.cov_error_from_sample = (fit.cov - from_sample.cov).norm();
      row.bures_wasserstein_from_sample = bures_wasserstein(from_sample, fit);
      row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      result.rows.push_back(row);
      done += cost;
      if (progress && !progress(done / total)) throw Cancelled();
    }

  // RMS over samples per n, then the log-log fit.
  std::map<long, std::vector<const MeanFieldRow*>> by_n;
  for (const auto& r : result.rows) by_n[r.n].push_back(&r);
  std::vector<double> ns;
  std::vector<std::vector<double>> rms(6);
  for (const auto& [n, rows] : by_n) {
    ns.push_back(double(n));
    std::vector<double> sum(6, 0.0);
    for (const MeanFieldRow* r : rows) {
      const double v[6] = {r->mean_error, r->cov_error, r->bures_wasserstein, r->mean_error_from_sample,
                           r->cov_error_from_sample, r->bures_wasserstein_from_sample};
      for (int k = 0; k < 6; ++k) sum[k] += v[k] * v[k];
    }
    for (int k = 0; k < 6; ++k) rms[k].push_back(std::sqrt(sum[k] / double(rows.size())));
  }
  MeanFieldSlopes& sl = result.slopes;
  sl.mean_error = log_log_slope(ns, rms[0]);
  sl.cov_error = log_log_slope(ns, rms[1]);
  sl.bures_wasserstein = log_log_slope(ns, rms[2]);
  sl.mean_error_from_sample = log_log_slope(ns, rms[3]);
  sl.cov_error_from_sample = log_log_slope(ns, rms[4]);
  sl.bures_wasserstein_from_sample = log_log_slope(ns, rms[5]);
  return result;
}

}  // namespace tokenflow
