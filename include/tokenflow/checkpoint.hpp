// tokenflow/checkpoint.hpp: checkpoints that let a killed run continue bit for bit.
//
// A checkpoint is one binary file written atomically (temporary name, then rename):
//   magic "TOKENFLOW-CKPT" (16 bytes), u32 format version, u32 payload kind,
//   u64 payload size, u64 FNV-1a hash of the payload, then the payload.
// The payload starts with the command's full config (TOML text) and its FNV-1a hash. Reading
// checks every length and the hash: a truncated, corrupt or foreign file is an InputError that
// names the file. ByteWriter/ByteReader are the building blocks for other commands' payloads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tokenflow/dynamics.hpp"
#include "tokenflow/measure.hpp"

namespace tokenflow {

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t seed = 0xcbf29ce484222325ull);

class ByteWriter {
 public:
  void bytes(const void* p, std::size_t n);
  template <class S>
  void scalar(S v) { bytes(&v, sizeof(S)); }
  void string(const std::string& s);
  template <class M>  // any dense Eigen matrix/vector: rows, cols, data (its storage order)
  void matrix(const M& m) {
    scalar<std::int64_t>(m.rows());
    scalar<std::int64_t>(m.cols());
    bytes(m.data(), sizeof(typename M::Scalar) * static_cast<std::size_t>(m.size()));
  }
  const std::string& data() const { return buffer_; }

 private:
  std::string buffer_;
};

class ByteReader {
 public:
  ByteReader(const std::string& data, std::string file) : data_(data), file_(std::move(file)) {}
  void bytes(void* p, std::size_t n);
  template <class S>
  S scalar() {
    S v;
    bytes(&v, sizeof(S));
    return v;
  }
  std::string string();
  template <class M>
  void matrix(M& m) {
    const auto r = scalar<std::int64_t>(), c = scalar<std::int64_t>();
    if (r < 0 || c < 0 || (r > 0 && c > static_cast<std::int64_t>(remaining() / sizeof(typename M::Scalar)) / r))
      corrupt("matrix size");
    // A vector (one dimension fixed at compile time) must be read with that dimension: resizing
    // VectorXd to r x 0 leaves size() = r over no storage (a fuzz finding: memcpy to null).
    if ((M::RowsAtCompileTime != Eigen::Dynamic && r != M::RowsAtCompileTime) ||
        (M::ColsAtCompileTime != Eigen::Dynamic && c != M::ColsAtCompileTime))
      corrupt("matrix shape");
    m.resize(r, c);
    bytes(m.data(), sizeof(typename M::Scalar) * static_cast<std::size_t>(m.size()));
  }
  std::size_t remaining() const { return data_.size() - pos_; }
  [[noreturn]] void corrupt(const std::string& what) const;

 private:
  const std::string& data_;
  std::string file_;
  std::size_t pos_ = 0;
};

enum class CheckpointKind : std::uint32_t { simulate = 1, train = 2 };

// The kind of the checkpoint at `path` (after verifying it); InputError if none or corrupt.
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
