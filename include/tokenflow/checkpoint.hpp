// tokenflow/checkpoint.hpp: checkpoints that let a killed run continue bit for bit.
//
// Every checkpoint (simulate's and train's) is one container, written atomically and durably
// (a temporary name, fsync, rename, fsync of the folder: the old checkpoint or the new one, never
// half of one):
//   magic "TOKENFLOW-CKPT" (16 bytes), u32 format version, u32 payload kind,
//   u64 payload size, u64 FNV-1a hash of the payload, then the payload.
// The payload starts with the command's full config (TOML text) and its FNV-1a hash; its records
// are tokenflow/records.hpp's. Reading checks every length and the hash: a truncated, corrupt or
// foreign file is an InputError that names the file. `tokenflow resume` reads the kind and hands
// the payload to the command that wrote it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenflow/dynamics.hpp"
#include "tokenflow/measure.hpp"
#include "tokenflow/records.hpp"

namespace tokenflow {

enum class CheckpointKind : std::uint32_t { simulate = 1, train = 2 };

// The kind of the checkpoint at `path` (after verifying it); InputError if none or corrupt.
// A training checkpoint of the earlier format (magic "TFCKPT01", the same payload sealed by a
// trailing FNV-1a hash) is read as CheckpointKind::train, so runs checkpointed by it resume.
CheckpointKind checkpoint_kind(const std::filesystem::path& path);
// Writes payload atomically to `path`.
void write_checkpoint_file(const std::filesystem::path& path, CheckpointKind kind, const std::string& payload);
// Reads and verifies a checkpoint; returns its payload.
std::string read_checkpoint_file(const std::filesystem::path& path, CheckpointKind expected);

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
