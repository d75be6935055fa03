// libFuzzer target: the checkpoint readers of `tokenflow resume` and `train --resume`. The first
// byte picks the kind:
//   even: a simulate checkpoint's payload (the harness wraps it in the file header with a valid
//         checksum, as a crafted file would have), read as `resume` reads it: the file, the header,
//         the typed state, then the checks against the run's config;
//   odd:  a training checkpoint's payload (the harness wraps it in the same header, and writes
//         the hash of the config it holds where the reader expects it), read by read_checkpoint.
// Any input must be read or end in InputError; a crash, a sanitizer report or another exception
// is a finding. Allocations must stay within what the input holds (-rss_limit_mb).
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_file.hpp"
#include "tokenflow/checkpoint.hpp"
#include "tokenflow/simulation_checkpoint.hpp"
#include "tokenflow/train_checkpoint.hpp"
#include "tokenflow/train_config.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/readers.hpp"
#include "tokenflow/train.hpp"

namespace {

template <class T>
void read_simulation(const std::string& payload, const std::string& path) {
  tokenflow::Measure<T> mu;
  tokenflow::SimulationState<T> state;
  tokenflow::read_simulation_checkpoint(payload, path, mu, state);
  // What is accepted is consistent: every array n x d.
  const auto n = mu.points.rows(), d = mu.points.cols();
  if (state.partial.positions.rows() != n || state.partial.positions.cols() != d) __builtin_trap();
  for (const auto& f : state.partial.frames)
    if (f.rows() != n || f.cols() != d) __builtin_trap();
  const auto header = tokenflow::read_simulation_checkpoint_header(payload, path);
  const tokenflow::Config config = tokenflow::Config::from_text(header.config_toml, path);
  const tokenflow::SimulationConfig s = tokenflow::read_simulation_config(config);
  tokenflow::check_simulation_checkpoint_state(state, s.run, path);
}

// The checkpoint container around `payload`, with a valid checksum (as a crafted file would have).
std::string container(std::uint32_t kind, const std::string& payload) {
  std::string bytes("TOKENFLOW-CKPT\0\0", 16);
  const std::uint32_t version = 1;
  const std::uint64_t size = payload.size(), hash = tokenflow::fnv1a64(payload.data(), payload.size());
  bytes.append(reinterpret_cast<const char*>(&version), 4);
  bytes.append(reinterpret_cast<const char*>(&kind), 4);
  bytes.append(reinterpret_cast<const char*>(&size), 8);
  bytes.append(reinterpret_cast<const char*>(&hash), 8);
  return bytes + payload;
}

void simulate_checkpoint(const std::string& payload) {
  static fuzz::MemoryFile file;
  const std::string bytes = container(1, payload);
  const std::string& path = file.write(bytes);
  if (tokenflow::checkpoint_kind(path) != tokenflow::CheckpointKind::simulate) __builtin_trap();
  const std::string read = tokenflow::read_checkpoint_file(path, tokenflow::CheckpointKind::simulate);
  if (read != payload) __builtin_trap();
  const auto header = tokenflow::read_simulation_checkpoint_header(read, path);
  if (header.float32)
    read_simulation<float>(read, path);
  else
    read_simulation<double>(read, path);
}

void training_checkpoint(std::string payload) {
  static fuzz::MemoryFile file;
  const std::string* path = &file.write(container(2, payload));
  const std::string config_toml = tokenflow::read_checkpoint_config(*path);
  const tokenflow::TrainConfig config = tokenflow::read_train_config(tokenflow::Config::from_text(config_toml, *path));
  // The harness keeps its own memory bounded: a config may describe a model of gigabytes (which a
  // user may mean; read_checkpoint then refuses a file that does not hold it).
  if (tokenflow::model_size(config.model).bytes > 64.0L * (1 << 20)) return;
  // The config hash sits right after the config string: put the right one there (a crafted file
  // can), so that the fields after it are reached.
  const std::size_t at = 8 + config_toml.size();
  if (payload.size() >= at + 8) {
    const std::uint64_t hash = tokenflow::config_hash(config);
    std::memcpy(payload.data() + at, &hash, 8);
    path = &file.write(container(2, payload));
  }
  const tokenflow::TrainState s = tokenflow::read_checkpoint(*path, config);
  if (s.params.size() != tokenflow::ParameterLayout(config.model).size()) __builtin_trap();
  if (s.step < 0 || s.step > config.train.steps) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > (1u << 20)) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 2 == 0)
      simulate_checkpoint(rest);
    else
      training_checkpoint(rest);
  } catch (const tokenflow::InputError&) {
  }
  return 0;
}
