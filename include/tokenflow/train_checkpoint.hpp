// tokenflow/train_checkpoint.hpp: checkpoint.bin of `tokenflow train`, from which a killed run
// resumes bit for bit. Part of the configuration layer (the payload holds the run's TOML and its
// hash, train_config.hpp).
#pragma once

#include <filesystem>
#include <string>

#include "tokenflow/train.hpp"

namespace tokenflow {

// checkpoint.bin: the checkpoint container of tokenflow/checkpoint.hpp (kind train) holding the
// configuration (TOML) and its hash, the step, the parameters and AdamW moments (f64; float32 runs
// convert exactly), the metrics rows, the evaluations, the accumulated seconds and loss; for dataset
// and texts tasks, the data files and their hashes. The temporary file goes to temp_dir when given
// (an output folder's scratch()).
void write_checkpoint(const std::filesystem::path& path, const TrainConfig& config,
                      const TrainState& state, const std::filesystem::path& temp_dir = {});
// The configuration stored in a checkpoint (TOML), to resume without --config.
std::string read_checkpoint_config(const std::filesystem::path& path);
// Refuses (InputError naming the file) a corrupt checkpoint or one of another configuration.
TrainState read_checkpoint(const std::filesystem::path& path, const TrainConfig& config);

}  // namespace tokenflow
