// tokenflow/simulation_checkpoint.hpp: the payload of `tokenflow simulate`'s checkpoint.bin (kind
// simulate of the container in tokenflow/checkpoint.hpp): the run's config (TOML text, stored as
// given, with its FNV-1a hash), the dtype, the initial measure and the SimulationState.
#pragma once

#include <string>

#include "tokenflow/checkpoint.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/measure.hpp"

namespace tokenflow {

// The simulate checkpoint: config, dtype, the initial measure and the state.
template <class T>
std::string simulation_checkpoint_payload(const std::string& config_toml, const Measure<T>& initial,
                                          const SimulationState<T>& state);
struct SimulationCheckpointHeader {
  std::string config_toml;
  bool float32 = false;
};
// Reads the header only (to learn the dtype and the config before the typed read).
SimulationCheckpointHeader read_simulation_checkpoint_header(const std::string& payload, const std::string& file);
// Every field is checked (the checksum does not stop a crafted file): shapes, finite values,
// counts against the bytes present. InputError naming `file` and the field.
template <class T>
void read_simulation_checkpoint(const std::string& payload, const std::string& file, Measure<T>& initial,
                                SimulationState<T>& state);
// The checks that need the run's config: t within [0, run.T], the step count within the run's
// steps, a positive dopri5 step before the end, frames consistent with run.save_every.
template <class T>
void check_simulation_checkpoint_state(const SimulationState<T>& state, const RunSpec& run, const std::string& file);

}  // namespace tokenflow
