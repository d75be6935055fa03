// tokenflow/readers.hpp: the library's types read from a Config (the keys of DESIGN.md
// section 2). Every error names the source and the key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenflow/attention.hpp"
#include "tokenflow/config.hpp"
#include "tokenflow/dynamics.hpp"

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

// The keys `simulate` accepts (for Config::check_keys and --help).
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

}  // namespace tokenflow
