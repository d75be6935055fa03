// tokenflow/model_file.hpp: model.bin, a trained Sinkhorn Transformer with its configuration.
// Part of the configuration layer (it reads and writes the model's TOML keys, train_config.hpp).
#pragma once

#include <filesystem>

#include "tokenflow/model.hpp"

namespace tokenflow {

// model.bin, little-endian, readable without tokenflow (e.g. numpy + struct):
//   8 bytes   magic "TFMODEL1"
//   u64       length L, then L bytes: the configuration as TOML ([model] with d, and the
//             [task]/[train] tables it was trained with; a model with an empty config_toml is
//             saved with its [model] keys)
//   u64       number of tensors; each: u64 name length, name bytes, u64 rank, rank x u64 dims,
//             u64 offset (in values)
//   u64       number of values P, then P x f64: the flat parameters
//   u64       FNV-1a 64-bit hash of every byte before it
// Written atomically (temporary file, fsync, rename); a file with a wrong magic, a wrong length or
// a wrong hash is refused with an InputError naming it.
void save_model(const std::filesystem::path& path, const SinkhornTransformer& model);
SinkhornTransformer load_model(const std::filesystem::path& path);

}  // namespace tokenflow
