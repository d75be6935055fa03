// tokenflow/readers.hpp: the library's types read from a Config (the keys of docs/design.md
// section 2). Every error names the source and the key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenflow/attention.hpp"
#include "tokenflow/config.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/meanfield.hpp"
#include "tokenflow/schema.hpp"
#include "tokenflow/stability.hpp"

namespace tokenflow {

enum class Dtype { f64, f32 };

struct InitSpec {
  std::string kind = "gaussian";  // gaussian | sphere | file
  long n = 4096;
  Eigen::VectorXd mean;  // gaussian (default 0 in R^2)
  Eigen::MatrixXd cov;   // gaussian (default I)
  int d = 3;             // sphere
  std::string path, weights, positions;  // file
};

struct SimulationConfig {
  Dtype dtype = Dtype::f64;
  std::uint64_t seed = 0;
  InitSpec init;
  AttentionSpec attention;
  RunSpec run;
};

// The keys `simulate` accepts, written once (tokenflow/schema.hpp): --help, docs/config.md.
const std::vector<KeySpec>& simulation_schema();
// Their names (for Config::check_keys).
const std::vector<std::string>& simulation_keys();

// Reads and checks every key (unknown keys, types, ranges). Matrices are checked against d when
// the measure is built (make_attention), because d may come from a file. `extra_keys` are the
// keys of a command that reads more than simulate does (they are accepted, not read, here).
SimulationConfig read_simulation_config(const Config& config, const std::vector<std::string>& extra_keys = {});

// The initial measure of [init] (in double; the caller converts to f32 when asked).
// x0/weights/positions override [init] (Python's simulate(config, x0=...)).
Measure<double> make_initial_measure(const SimulationConfig& config, const Config& source);

// Checked attention parameters for dimension d (errors located in `source`).
AttentionParams read_attention(const SimulationConfig& config, const Config& source, int d);

// `e` located in the source of its key when it names none yet (keys "layers[i].Q", made by
// make_attention, are located at the [[layers]] table).
InputError located_in(const InputError& e, const Config& source);

// ---- the studies built on simulate's keys (the commands gaussian, meanfield, stability) ------------
// Each reads simulate's keys plus its own, checks them, and locates every error in `source` (the
// CLI and Python's tokenflow.gaussian/meanfield/stability read configs through these).

// A default that a study sets where simulate's differs: the dotted key and its value as TOML.
// The study's reader applies it to a config that does not set the key, and the study's key list
// (tokenflow config COMMAND, Python's config_keys and docstrings, docs/config.md) shows it: one
// table, so the two cannot disagree. An empty toml_value marks a default that the reader derives
// from other keys; `shown` then says how (meanfield's run.dt is run.T).
struct StudyDefault {
  std::string key, toml_value, shown;
};
const std::vector<StudyDefault>& gaussian_defaults();
const std::vector<StudyDefault>& meanfield_defaults();
const std::vector<StudyDefault>& stability_defaults();
// `keys` with the default text of each key that `defaults` names replaced by the study's.
std::vector<KeySpec> with_study_defaults(std::vector<KeySpec> keys, const std::vector<StudyDefault>& defaults);

// `tokenflow gaussian`: [init] mean/cov (kind "gaussian"), [attention] with a Gaussian closure,
// [run] (integrator dopri5 unless given), run.converge_tol, run.grid_frames.
struct GaussianSetup {
  AttentionParams attention;
  GaussianRunSpec spec;
  GaussianMoments initial;
};
const std::vector<KeySpec>& gaussian_extra_schema();  // its own keys
const std::vector<Key<GaussianRunSpec>>& gaussian_extra_bindings();  // those bound to GaussianRunSpec
const std::vector<std::string>& gaussian_extra_keys();
GaussianSetup read_gaussian_setup(const Config& source);

// `tokenflow meanfield`: as gaussian, plus [meanfield] ns, seeds; run.T defaults to 0.1 and run.dt
// to T (one rk4 step).
struct MeanFieldSetup {
  AttentionParams attention;
  RunSpec run;  // of the particles
  GaussianMoments initial;
  MeanFieldSpec spec;
};
const std::vector<KeySpec>& meanfield_extra_schema();  // its own keys
const std::vector<Key<MeanFieldSpec>>& meanfield_extra_bindings();  // those bound to MeanFieldSpec
const std::vector<std::string>& meanfield_extra_keys();
MeanFieldSetup read_meanfield_setup(const Config& source);

// `tokenflow stability`: simulate's keys (init.n defaults to 512; f64 only; rk4 or euler), plus
// [stability] delta, perturbation, frames, exact_max_n.
struct StabilitySetup {
  AttentionParams attention;
  RunSpec run;
  Measure<double> initial;
  StabilitySpec spec;
};
const std::vector<KeySpec>& stability_extra_schema();  // its own keys
const std::vector<Key<StabilitySpec>>& stability_extra_bindings();  // those bound to StabilitySpec
const std::vector<std::string>& stability_extra_keys();
StabilitySetup read_stability_setup(const Config& source);

}  // namespace tokenflow
