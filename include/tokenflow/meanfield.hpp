// tokenflow/meanfield.hpp: particles against the moment ODE (mean-field convergence).
//
// For each n in a list and each of several independent samples x_1..x_n ~ N(m0, S0) (uniform
// weights), the particle flow dx_i/dt = Gamma_mu(x_i) is run to T (simulate) and the Gaussian fit
// of the particles, N(m_n(T), S_n(T)) (weighted mean and covariance), is compared with the moment
// ODE's N(m(T), S(T)) started from N(m0, S0):
//   mean_error = |m_n(T) - m(T)|_2,  cov_error = |S_n(T) - S(T)|_F,
//   bures_wasserstein = W_2(N(m(T), S(T)), N(m_n(T), S_n(T))).
// These are O(n^{-1/2}) (the sample's own moment errors, carried by the flow, plus the mean-field
// error of the flow). The same three are also reported against the moment ODE started from the
// sample's own moments (m_n(0), S_n(0)): what remains then is the error the dynamics add.
// The slopes are least-squares fits of log(RMS over samples of the error) against log n.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tokenflow/gaussian.hpp"

namespace tokenflow {

struct MeanFieldSpec {
  std::vector<long> ns{256, 1024, 4096, 16384, 65536};
  int seeds = 3;          // independent samples per n
  std::uint64_t seed = 0; // base seed
};

struct MeanFieldRow {
  long n = 0;
  int sample = 0;
  std::uint64_t seed = 0;
  std::string status;  // simulate's status ("finished" | "blowup")
  double mean_error = 0, cov_error = 0, bures_wasserstein = 0;
  double mean_error_from_sample = 0, cov_error_from_sample = 0, bures_wasserstein_from_sample = 0;
  double seconds = 0;
};

struct MeanFieldSlopes {
  double mean_error = 0, cov_error = 0, bures_wasserstein = 0;
  double mean_error_from_sample = 0, cov_error_from_sample = 0, bures_wasserstein_from_sample = 0;
};

struct MeanFieldResult {
  GaussianMoments ode_final;  // N(m(T), S(T)) from N(m0, S0)
  std::vector<MeanFieldRow> rows;
  MeanFieldSlopes slopes;     // NaN with fewer than two distinct n
};

// The one check of a MeanFieldSpec (the config reader and meanfield_study both call it): at least
// one n, every n >= 2, seeds >= 1; InputError naming meanfield.ns or meanfield.seeds.
void check_meanfield_spec(const MeanFieldSpec& spec);

// Fraction of the work done (weighted by n^2 per run); false cancels (throws Cancelled).
using FractionCallback = std::function<bool(double)>;

// Runs the study. `particles` is simulate's run (T, dt, integrator, ...); the moment ODE uses
// dopri5 with particles.tol to the same T. Throws InputError when the attention has no Gaussian
// closure, when the initial Gaussian is bad, or when the moment ODE blows up before T (key run.T).
MeanFieldResult meanfield_study(const AttentionParams& params, const RunSpec& particles, const GaussianMoments& initial,
                                const MeanFieldSpec& spec, const FractionCallback& progress = {});

// Least-squares slope of log(y) against log(x) (NaN with fewer than two distinct x).
double log_log_slope(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace tokenflow
