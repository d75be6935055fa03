// tokenflow/stability.hpp: W_2 stability of the particle flow, W_2(mu_t, nu_t) <= C(t) W_2(mu_0, nu_0).
//
// nu_0 is a perturbation of mu_0 (same weights and positions): "noise" moves every point by
// eta xi_i with xi_i ~ N(0, I) and eta chosen so that the identity coupling costs exactly delta
// (so W_2(mu_0, nu_0) <= delta, measured); "shift" moves every point by delta e_1 (W_2 = delta
// exactly). On the sphere both are projected back to |x| = 1. Both measures are evolved with the
// same parameters and fixed steps (euler or rk4, so that frames are at equal times), and
// W_2(mu_t, nu_t) is computed at every frame: exactly (network simplex, exact_ot) when n <= exact_max_n,
// otherwise between the Gaussian fits of the two clouds (Bures-Wasserstein; a proxy, not the W_2 of
// the empirical measures). The empirical constants: C = max_t W_2(t) / W_2(0) and
// L = max_{t > 0} log(W_2(t) / W_2(0)) / t (the smallest L with W_2(t) <= e^{L t} W_2(0) on the frames).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tokenflow/attention.hpp"
#include "tokenflow/dynamics.hpp"

namespace tokenflow {

struct StabilitySpec {
  double delta = 1e-2;
  std::string perturbation = "noise";  // noise | shift
  long exact_max_n = 2000;
  int frames = 20;                      // save_every = 0: about this many frames
  std::uint64_t seed = 0;               // of the noise
};

struct StabilityRow {
  double t = 0.0;
  double w2 = 0.0;     // W_2(mu_t, nu_t)
  double ratio = 0.0;  // w2 / W_2(mu_0, nu_0)
};

struct StabilityResult {
  std::string method;  // "exact" | "gaussian"
  double w2_initial = 0.0;
  std::vector<StabilityRow> rows;
  double growth_constant = 0.0, growth_rate = 0.0;
  std::string status_mu, status_nu;  // simulate's statuses
  // "finished" (both runs reached T) | "blowup" | "failed" (a run overflowed: see simulate's
  // statuses); `reason`: the failed run's reason, naming which measure it was.
  std::string status;
  std::string reason;
  long steps = 0;
};

// Fraction of the work done; false cancels (throws Cancelled).
using StabilityProgress = std::function<bool(double)>;

// Throws InputError for a bad delta / perturbation / integrator (dopri5 is refused: its frames
// would not be at equal times in the two runs).
StabilityResult stability_study(const AttentionParams& params, const RunSpec& run, const Measure<double>& mu0,
                                const StabilitySpec& spec, const StabilityProgress& progress = {});

}  // namespace tokenflow
