// Readers of the studies built on simulate's keys: gaussian, meanfield, stability (readers.hpp).
// The CLI commands and the Python functions of the same names read their configs here.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/memory_budget.hpp"
#include "tokenflow/readers.hpp"

namespace tokenflow {

namespace {

// `source` with each default of `defaults` that it does not set (a copy; the values are TOML and
// are read back by the same getters as a config file's, so the table is the only place they are
// written).
Config with_defaults(const Config& source, const std::vector<StudyDefault>& defaults) {
  Config c = source;
  for (const StudyDefault& d : defaults)
    if (!d.toml_value.empty() && !source.has(d.key)) c.set(d.key + "=" + d.toml_value);
  return c;
}

}  // namespace

// gaussian integrates the moment ODE with dopri5: its tolerance, not a step, sets the accuracy.
const std::vector<StudyDefault>& gaussian_defaults() {
  static const std::vector<StudyDefault> defaults{{"run.integrator", "\"dopri5\"", "\"dopri5\""}};
  return defaults;
}

// meanfield's particles: one rk4 step of 0.1 by default (4 field evaluations; rk4's error
// ~ dt^5 |J|^5 / 120 ~ 1e-7 is far below the smallest Monte Carlo error, ~ 1 / sqrt(65536) ~ 4e-3).
const std::vector<StudyDefault>& meanfield_defaults() {
  static const std::vector<StudyDefault> defaults{{"run.T", "0.1", "0.1"}, {"run.dt", "", "run.T"}};
  return defaults;
}

// stability: exact W_2 per frame costs ~0.2 s at n = 512, ~1 s at 1000, ~6 s at 2000.
const std::vector<StudyDefault>& stability_defaults() {
  static const std::vector<StudyDefault> defaults{{"init.n", "512", "512"}};
  return defaults;
}

std::vector<KeySpec> with_study_defaults(std::vector<KeySpec> keys, const std::vector<StudyDefault>& defaults) {
  for (const StudyDefault& d : defaults)
    for (KeySpec& k : keys)
      if (k.key == d.key) k.default_text = d.shown;
  return keys;
}

InputError located_in(const InputError& e, const Config& source) {
  const std::string& key = e.key();
  const std::string lookup = key.rfind("layers[", 0) == 0 ? "layers" : key;
  return e.located(source.source_of(lookup));
}

// gaussian's own keys, bound to the fields of GaussianRunSpec they read into.
const std::vector<Key<GaussianRunSpec>>& gaussian_extra_bindings() {
  static const std::vector<Key<GaussianRunSpec>> keys{
      {{"run.converge_tol", KeyType::number, "1e-9", positive(), {}, "",
        "status converged once |dm/dt| <= tol (1 + |m|) and |dS/dt|_F <= tol (1 + |S|_F) in the last layer"},
       [](GaussianRunSpec& s) -> FieldRef { return &s.converge_tol; }},
      {{"run.grid_frames", KeyType::integer, "100", at_least(1), {}, "frames",
        "with run.save_every = 0: frames on the grid t = j T / grid_frames"},
       [](GaussianRunSpec& s) -> FieldRef { return &s.grid_frames; }}};
  return keys;
}

const std::vector<KeySpec>& gaussian_extra_schema() {
  static const std::vector<KeySpec> keys = specs_of(gaussian_extra_bindings());
  return keys;
}

const std::vector<std::string>& gaussian_extra_keys() {
  static const std::vector<std::string> keys = key_names(gaussian_extra_schema());
  return keys;
}

namespace {

// The frames a moment run keeps (times, means, covariances: 1 + d + d^2 numbers each) and dopri5's
// frame grid, refused before they are allocated (run.grid_frames = 1e9 grew until an allocation
// failed). Fixed steps save every max(1, steps / grid_frames) steps, or every save_every; dopri5
// with save_every saves at steps it chooses (at least the first and the last frame counted).
void check_gaussian_frames_fit(const GaussianRunSpec& spec, long double d, const Config& c) {
  const RunSpec& run = spec.run;
  const bool fixed = run.integrator != Integrator::dopri5;
  const long double steps = fixed ? std::ceil(static_cast<long double>(run.T) / run.dt) : 0;
  long double frames = 2, grid = 0;
  std::string key = "run.grid_frames";
  if (run.save_every > 0) {
    key = "run.save_every";
    if (fixed) frames = std::floor(steps / run.save_every) + 2;
  } else if (fixed) {
    frames = std::min<long double>(steps, spec.grid_frames) + 2;
  } else {
    frames = static_cast<long double>(spec.grid_frames) + 1;
    grid = 8.0L * spec.grid_frames;
  }
  const long double bytes = 8.0L * frames * (1 + d + d * d) + grid;
  char count[64];
  std::snprintf(count, sizeof count, "%.0Lf", frames);
  check_memory(bytes, std::string("the moment run's ") + count + " frames (times, means and " +
                          std::to_string(static_cast<long>(d)) + " x " + std::to_string(static_cast<long>(d)) +
                          " covariances, from run.T, run.dt, run.save_every and run.grid_frames)",
               c.source_of(key), key, "save fewer frames");
}

}  // namespace

GaussianSetup read_gaussian_setup(const Config& given) {
  const Config source = with_defaults(given, gaussian_defaults());
  const SimulationConfig config = read_simulation_config(source, gaussian_extra_keys());
  if (config.init.kind != "gaussian")
    throw InputError(
        source.source_of("init.kind"), "init.kind",
        "tokenflow gaussian starts from N(mean, cov): init.kind must be \"gaussian\" (got \"" +
            config.init.kind + "\")");
  GaussianSetup s;
  s.initial = {config.init.mean, config.init.cov};
  s.spec.run = config.run;
  read_keys(source, gaussian_extra_bindings(), s.spec);
  check_gaussian_frames_fit(s.spec, static_cast<long double>(s.initial.mean.size()), source);
  try {
    check_gaussian(s.initial);
    s.attention = read_attention(config, source, static_cast<int>(s.initial.mean.size()));
    check_gaussian_closure(s.attention);
  } catch (const InputError& e) {
    throw located_in(e, source);
  }
  return s;
}

// meanfield's own keys: ns (a list, read and checked below) and seeds (bound to its field).
const KeySpec& meanfield_ns_key() {
  static const KeySpec key{"meanfield.ns", KeyType::integer_list, "[256, 1024, 4096, 16384, 65536]", at_least(2), {},
                           "tokens", "token counts (each >= 2)"};
  return key;
}

const std::vector<Key<MeanFieldSpec>>& meanfield_extra_bindings() {
  static const std::vector<Key<MeanFieldSpec>> keys{
      {{"meanfield.seeds", KeyType::integer, "3", at_least(1), {}, "", "independent samples per n (seed: the base)"},
       [](MeanFieldSpec& s) -> FieldRef { return &s.seeds; }}};
  return keys;
}

const std::vector<KeySpec>& meanfield_extra_schema() {
  static const std::vector<KeySpec> keys = [] {
    std::vector<KeySpec> all{meanfield_ns_key()};
    for (const KeySpec& k : specs_of(meanfield_extra_bindings())) all.push_back(k);
    return all;
  }();
  return keys;
}

const std::vector<std::string>& meanfield_extra_keys() {
  static const std::vector<std::string> keys = key_names(meanfield_extra_schema());
  return keys;
}

MeanFieldSetup read_meanfield_setup(const Config& given) {
  const Config source = with_defaults(given, meanfield_defaults());
  SimulationConfig config = read_simulation_config(source, meanfield_extra_keys());
  if (config.init.kind != "gaussian")
    throw InputError(source.source_of("init.kind"), "init.kind",
                     "tokenflow meanfield samples N(mean, cov): init.kind must be \"gaussian\"");
  if (!source.has("run.dt")) config.run.dt = std::max(config.run.T, 1e-12);  // one step
  MeanFieldSetup s;
  s.run = config.run;
  s.spec.seed = config.seed;
  const std::vector<std::int64_t> ns =
      source.get_int_list(meanfield_ns_key().key, {s.spec.ns.begin(), s.spec.ns.end()});
  s.spec.ns.assign(ns.begin(), ns.end());
  read_keys(source, meanfield_extra_bindings(), s.spec);
  s.initial = {config.init.mean, config.init.cov};
  try {
    check_gaussian(s.initial);
    s.attention = read_attention(config, source, static_cast<int>(s.initial.mean.size()));
    check_gaussian_closure(s.attention);
    check_meanfield_spec(s.spec);
    // Each n is a particle run of n x d tokens (several copies for the integrator): refused before
    // the allocation when it cannot be held in memory.
    for (long n : s.spec.ns)
      check_memory(8.0L * 6 * n * static_cast<long double>(s.initial.mean.size()),
                   "a particle run of n = " + std::to_string(n) + " tokens (six copies of n x d)", "", "meanfield.ns");
  } catch (const InputError& e) {
    throw located_in(e, source);
  }
  return s;
}

// stability's own keys, bound to the fields of StabilitySpec they read into.
const std::vector<Key<StabilitySpec>>& stability_extra_bindings() {
  static const std::vector<Key<StabilitySpec>> keys{
      {{"stability.delta", KeyType::number, "0.01", positive(), {}, "", "size of the perturbation of the initial measure"},
       [](StabilitySpec& s) -> FieldRef { return &s.delta; }},
      {{"stability.perturbation", KeyType::string, "\"noise\"", {}, {"noise", "shift"}, "",
        "noise: x_i + eta xi_i with W_2(mu_0, nu_0) <= delta (measured); shift: x_i + delta e_1"},
       [](StabilitySpec& s) -> FieldRef { return &s.perturbation; }},
      {{"stability.frames", KeyType::integer, "20", at_least(1), {}, "frames",
        "with run.save_every = 0, about this many frames"},
       [](StabilitySpec& s) -> FieldRef { return &s.frames; }},
      {{"stability.exact_max_n", KeyType::integer, "2000", at_least(0), {}, "tokens",
        "exact W_2 (network simplex) up to this n; above it, W_2 between the Gaussian fits"},
       [](StabilitySpec& s) -> FieldRef { return &s.exact_max_n; }}};
  return keys;
}

const std::vector<KeySpec>& stability_extra_schema() {
  static const std::vector<KeySpec> keys = specs_of(stability_extra_bindings());
  return keys;
}

const std::vector<std::string>& stability_extra_keys() {
  static const std::vector<std::string> keys = key_names(stability_extra_schema());
  return keys;
}

StabilitySetup read_stability_setup(const Config& given) {
  const Config source = with_defaults(given, stability_defaults());
  SimulationConfig config = read_simulation_config(source, stability_extra_keys());
  if (config.dtype == Dtype::f32)
    throw InputError(source.source_of("dtype"), "dtype",
                     "tokenflow stability runs in float64 (exact W_2); use dtype = \"f64\"");
  StabilitySetup s;
  s.run = config.run;
  read_keys(source, stability_extra_bindings(), s.spec);
  s.spec.seed = config.seed + 1;  // the noise is independent of the sample
  s.initial = make_initial_measure(config, source);
  s.attention = read_attention(config, source, static_cast<int>(s.initial.d()));
  if (config.run.integrator == Integrator::dopri5)
    throw InputError(source.source_of("run.integrator"), "run.integrator",
                     "stability compares the two runs at equal times: use rk4 or euler");
  return s;
}

}  // namespace tokenflow
