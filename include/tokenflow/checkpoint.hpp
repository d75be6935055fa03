// tokenflow/checkpoint.hpp: the container of the checkpoints that let a killed run continue bit for
// bit (storage layer: bytes only; the payloads are the commands').
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

#include "tokenflow/records.hpp"

namespace tokenflow {

enum class CheckpointKind : std::uint32_t { simulate = 1, train = 2 };

// The kind of the checkpoint at `path` (after verifying it); InputError if none or corrupt.
// A training checkpoint of the earlier format (magic "TFCKPT01", the same payload sealed by a
// trailing FNV-1a hash) is read as CheckpointKind::train, so runs checkpointed by it resume.
CheckpointKind checkpoint_kind(const std::filesystem::path& path);
// Writes payload atomically to `path` (the temporary file in temp_dir when given: an output folder's
// scratch(), tokenflow/output_dir.hpp).
void write_checkpoint_file(const std::filesystem::path& path, CheckpointKind kind, const std::string& payload,
                           const std::filesystem::path& temp_dir = {});
// Reads and verifies a checkpoint; returns its payload.
std::string read_checkpoint_file(const std::filesystem::path& path, CheckpointKind expected);

// The simulate checkpoint's payload: tokenflow/simulation_checkpoint.hpp; train's:
// tokenflow/train_checkpoint.hpp.

}  // namespace tokenflow
