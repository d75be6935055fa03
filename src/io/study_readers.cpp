// Readers of the studies built on simulate's keys: gaussian, meanfield, stability (readers.hpp).
// The CLI commands and the Python functions of the same names read their configs here.
#include <cmath>
#include <string>

#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/readers.hpp"

namespace tokenflow {

namespace {

// meanfield's particles: one rk4 step of 0.1 by default (4 field evaluations; rk4's error
// ~ dt^5 |J|^5 / 120 ~ 1e-7 is far below the smallest Monte Carlo error, ~ 1 / sqrt(65536) ~ 4e-3).
constexpr double kMeanfieldDefaultT = 0.1;
// stability: exact W_2 per frame costs ~0.2 s at n = 512, ~1 s at 1000, ~6 s at 2000.
constexpr long kStabilityDefaultN = 512;

}  // namespace

InputError located_in(const InputError& e, const Config& source) {
  const std::string& key = e.key();
  const std::string lookup = key.rfind("layers[", 0) == 0 ? "layers" : key;
  return e.located(source.source_of(lookup));
}

const std::vector<std::string>& gaussian_extra_keys() {
  static const std::vector<std::string> keys{"run.converge_tol", "run.grid_frames"};
  return keys;
}

GaussianSetup read_gaussian_setup(const Config& source) {
  const SimulationConfig config = read_simulation_config(source, gaussian_extra_keys());
  if (config.init.kind != "gaussian")
    throw InputError(
        source.source_of("init.kind"), "init.kind",
        "tokenflow gaussian starts from N(mean, cov): init.kind must be \"gaussian\" (got \"" +
            config.init.kind + "\")");
  GaussianSetup s;
  s.initial = {config.init.mean, config.init.cov};
  s.spec.run = config.run;
  if (!source.has("run.integrator")) s.spec.run.integrator = Integrator::dopri5;
  s.spec.converge_tol = source.get_double("run.converge_tol", s.spec.converge_tol);
  s.spec.grid_frames = source.get_int32("run.grid_frames", s.spec.grid_frames);
  try {
    check_gaussian(s.initial);
    s.attention = read_attention(config, source, static_cast<int>(s.initial.mean.size()));
    check_gaussian_closure(s.attention);
    if (!(s.spec.converge_tol > 0.0)) throw InputError("", "run.converge_tol", "must be positive");
    if (s.spec.grid_frames < 1) throw InputError("", "run.grid_frames", "must be at least 1");
  } catch (const InputError& e) {
    throw located_in(e, source);
  }
  return s;
}

const std::vector<std::string>& meanfield_extra_keys() {
  static const std::vector<std::string> keys{"meanfield.ns", "meanfield.seeds"};
  return keys;
}

MeanFieldSetup read_meanfield_setup(const Config& source) {
  SimulationConfig config = read_simulation_config(source, meanfield_extra_keys());
  if (config.init.kind != "gaussian")
    throw InputError(source.source_of("init.kind"), "init.kind",
                     "tokenflow meanfield samples N(mean, cov): init.kind must be \"gaussian\"");
  if (!source.has("run.T")) config.run.T = kMeanfieldDefaultT;
  if (!source.has("run.dt")) config.run.dt = std::max(config.run.T, 1e-12);
  MeanFieldSetup s;
  s.run = config.run;
  s.spec.seed = config.seed;
  const std::vector<std::int64_t> ns =
      source.get_int_list("meanfield.ns", {256, 1024, 4096, 16384, 65536});
  s.spec.ns.assign(ns.begin(), ns.end());
  s.spec.seeds = source.get_int32("meanfield.seeds", 3);
  s.initial = {config.init.mean, config.init.cov};
  try {
    check_gaussian(s.initial);
    s.attention = read_attention(config, source, static_cast<int>(s.initial.mean.size()));
    check_gaussian_closure(s.attention);
    if (s.spec.seeds < 1) throw InputError("", "meanfield.seeds", "must be at least 1");
    for (long n : s.spec.ns)
      if (n < 2)
        throw InputError("", "meanfield.ns",
                         "every n must be at least 2 (got " + std::to_string(n) + ")");
    if (s.spec.ns.empty()) throw InputError("", "meanfield.ns", "must list at least one n");
    // Each n is a particle run of n x d tokens (several copies for the integrator): refused before
    // the allocation when it cannot be held in memory.
    for (long n : s.spec.ns) {
      const long double bytes = 8.0L * 6 * n * static_cast<long double>(s.initial.mean.size());
      if (bytes > static_cast<long double>(physical_memory_bytes()))
        throw InputError("", "meanfield.ns",
                         "n = " + std::to_string(n) + " particles need at least " +
                             format_bytes(static_cast<double>(bytes)) + ", more than this machine's " +
                             format_bytes(static_cast<double>(physical_memory_bytes())) + " of memory");
    }
  } catch (const InputError& e) {
    throw located_in(e, source);
  }
  return s;
}

const std::vector<std::string>& stability_extra_keys() {
  static const std::vector<std::string> keys{"stability.delta", "stability.perturbation",
                                             "stability.frames", "stability.exact_max_n"};
  return keys;
}

StabilitySetup read_stability_setup(const Config& source) {
  SimulationConfig config = read_simulation_config(source, stability_extra_keys());
  if (!source.has("init.n")) config.init.n = kStabilityDefaultN;
  if (config.dtype == Dtype::f32)
    throw InputError(source.source_of("dtype"), "dtype",
                     "tokenflow stability runs in float64 (exact W_2); use dtype = \"f64\"");
  StabilitySetup s;
  s.run = config.run;
  s.spec.delta = source.get_double("stability.delta", s.spec.delta);
  s.spec.perturbation =
      source.get_string("stability.perturbation", s.spec.perturbation, {"noise", "shift"});
  s.spec.frames = source.get_int32("stability.frames", s.spec.frames);
  s.spec.exact_max_n =
      static_cast<long>(source.get_int("stability.exact_max_n", s.spec.exact_max_n));
  s.spec.seed = config.seed + 1;  // the noise is independent of the sample
  s.initial = make_initial_measure(config, source);
  s.attention = read_attention(config, source, static_cast<int>(s.initial.d()));
  if (!(s.spec.delta > 0.0 && std::isfinite(s.spec.delta)))
    throw InputError(source.source_of("stability.delta"), "stability.delta",
                     "must be positive and finite");
  if (s.spec.frames < 1)
    throw InputError(source.source_of("stability.frames"), "stability.frames",
                     "must be at least 1");
  if (config.run.integrator == Integrator::dopri5)
    throw InputError(source.source_of("run.integrator"), "run.integrator",
                     "stability compares the two runs at equal times: use rk4 or euler");
  return s;
}

}  // namespace tokenflow
