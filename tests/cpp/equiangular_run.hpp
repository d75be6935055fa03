// The particle run that test_equiangular.cpp and test_normalization_schemes.cpp hold against the
// equiangular reductions: n tokens of radius r0 at pairwise inner product rho0 (r0^2 rho0), equal
// weights, one head of scale beta under `normalize` (mix: with mix_until), dense sums, dopri5 at
// tol 1e-12 to T = 4 (first step 1e-2), every 10th accepted step saved.
#pragma once

#include <optional>
#include <string>

#include "tokenflow/attention.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/equiangular.hpp"

namespace tokenflow::testing {

inline constexpr double kEquiangularRunT = 4.0;

inline SimulationResult<double> simulate_equiangular(
    long n, double beta, double rho0, double r0, const std::string& normalize,
    std::optional<double> mix_until = std::nullopt) {
  AttentionSpec spec;
  spec.scale = beta;
  spec.normalize = normalize;
  spec.mix_until = mix_until;
  spec.summation = "dense";
  const AttentionParams params = make_attention(spec, static_cast<int>(n));
  RunSpec run;
  run.T = kEquiangularRunT;
  run.dt = 1e-2;
  run.integrator = Integrator::dopri5;
  run.tol = 1e-12;
  run.save_every = 10;
  Measure<double> mu;
  mu.points = r0 * equiangular_points(n, rho0);
  mu.weights = Vec<double>::Constant(n, 1.0 / static_cast<double>(n));
  return simulate(params, run, mu);
}

}  // namespace tokenflow::testing
