// tokenflow/train_config.hpp: the keys of `tokenflow train` (dtype, [task], [model], [train]),
// written once as schemas (tokenflow/schema.hpp), and the readers and the TOML writer made from them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenflow/config.hpp"
#include "tokenflow/schema.hpp"
#include "tokenflow/train.hpp"

namespace tokenflow {

// The schemas, in the order the TOML writer writes them (the config hash depends on that order).
const std::vector<Key<TaskSpec>>& task_schema();
const std::vector<Key<ModelConfig>>& model_schema();
const std::vector<Key<TrainSpec>>& train_spec_schema();
// Every key of `tokenflow train`: dtype, then the three sections.
std::vector<KeySpec> train_command_keys();

const std::vector<std::string>& task_keys();   // "task.kind", ...
const std::vector<std::string>& model_keys();  // "model.width", ... (model.d is the task's d)
const std::vector<std::string>& train_keys();  // every key `train` accepts (for Config::check_keys)

// Readers: every key checked against its schema, then the checks that involve several keys.
TaskSpec read_task_spec(const Config& config);
// `d` is the tokens' dimension (the task's); refuses a model larger than this machine's memory.
ModelConfig read_model_config(const Config& config, int d);
// kind = "dataset": task.d and train.test_pairs come from the files of task.path, or, for pairs
// given in memory (Python), from `pairs` (then task.path must be absent).
struct DatasetShape {
  int d = 0;
  long test_pairs = 0;
};
TrainConfig read_train_config(const Config& config, const std::optional<DatasetShape>& pairs = std::nullopt);

// The resolved configuration, every key with its value, as TOML (model.bin and checkpoints keep it;
// read_train_config reads it back to the same TrainConfig).
std::string to_toml(const TrainConfig& config);
// The [model] table alone, every key written (what load_model needs to rebuild the model).
std::string model_toml(const ModelConfig& model);
// FNV-1a hash of to_toml without the keys that do not change the trajectory of the steps two runs
// share (eval_every, checkpoint_every, and steps unless schedule = "cosine"): a checkpoint only
// resumes the run it belongs to, and a finished run can be continued with more steps.
std::uint64_t config_hash(const TrainConfig& config);

}  // namespace tokenflow
