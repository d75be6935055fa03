// Checkpoint files: atomic writes, verified reads.
#include "tokenflow/checkpoint.hpp"

#include <cstring>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "tokenflow/error.hpp"
#include "tokenflow/io.hpp"

namespace tokenflow {

namespace {
constexpr char kMagic[16] = "TOKENFLOW-CKPT";
constexpr std::uint32_t kVersion = 1;
}  // namespace

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = seed;
  for (std::size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

void ByteWriter::bytes(const void* p, std::size_t n) {
  if (n > 0) buffer_.append(static_cast<const char*>(p), n);  // p may be null for empty matrices
}
void ByteWriter::string(const std::string& s) {
  scalar<std::uint64_t>(s.size());
  bytes(s.data(), s.size());
}

void ByteReader::bytes(void* p, std::size_t n) {
  if (n == 0) return;  // p may be null for empty matrices
  if (n > remaining()) corrupt("truncated payload");
  std::memcpy(p, data_.data() + pos_, n);
  pos_ += n;
}
std::string ByteReader::string() {
  const auto n = scalar<std::uint64_t>();
  if (n > remaining()) corrupt("string length");
  std::string s(data_.data() + pos_, n);
  pos_ += n;
  return s;
}
void ByteReader::corrupt(const std::string& what) const {
  throw InputError(file_, "checkpoint", "is corrupt (" + what + "); delete it to start the run afresh");
}

void write_checkpoint_file(const std::filesystem::path& path, CheckpointKind kind, const std::string& payload) {
  ByteWriter header;
  header.bytes(kMagic, sizeof(kMagic));
  header.scalar<std::uint32_t>(kVersion);
  header.scalar<std::uint32_t>(static_cast<std::uint32_t>(kind));
  header.scalar<std::uint64_t>(payload.size());
  header.scalar<std::uint64_t>(fnv1a64(payload.data(), payload.size()));
  const std::filesystem::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(header.data().data(), static_cast<std::streamsize>(header.data().size()));
    out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
    out.flush();
    if (!out) throw std::runtime_error("cannot write checkpoint " + tmp.string());
  }
  std::filesystem::rename(tmp, path);  // atomic: the old checkpoint or the new one, never half
}

namespace {
std::string read_verified(const std::filesystem::path& path, std::uint32_t& kind) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(file, "checkpoint", "no checkpoint here (was the run started with run.checkpoint_every > 0?)");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  ByteReader r(all, file);
  char magic[16];
  r.bytes(magic, sizeof(magic));
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) r.corrupt("not a tokenflow checkpoint");
  if (r.scalar<std::uint32_t>() != kVersion) r.corrupt("written by another format version");
  kind = r.scalar<std::uint32_t>();
  const auto size = r.scalar<std::uint64_t>(), hash = r.scalar<std::uint64_t>();
  if (size != r.remaining()) r.corrupt("payload length");
  std::string payload(size, '\0');
  r.bytes(payload.data(), size);
  if (fnv1a64(payload.data(), payload.size()) != hash) r.corrupt("checksum mismatch");
  return payload;
}
}  // namespace

CheckpointKind checkpoint_kind(const std::filesystem::path& path) {
  std::uint32_t kind = 0;
  read_verified(path, kind);
  if (kind != static_cast<std::uint32_t>(CheckpointKind::simulate) && kind != static_cast<std::uint32_t>(CheckpointKind::train))
    throw InputError(path.string(), "checkpoint", "is corrupt (unknown kind)");
  return static_cast<CheckpointKind>(kind);
}

std::string read_checkpoint_file(const std::filesystem::path& path, CheckpointKind expected) {
  std::uint32_t kind = 0;
  std::string payload = read_verified(path, kind);
  if (kind != static_cast<std::uint32_t>(expected))
    throw InputError(path.string(), "checkpoint", "belongs to another command");
  return payload;
}

template <class T>
std::string simulation_checkpoint_payload(const std::string& config_toml, const Measure<T>& initial,
                                          const SimulationState<T>& s) {
  ByteWriter w;
  w.string(config_toml);
  w.scalar<std::uint64_t>(fnv1a64(config_toml.data(), config_toml.size()));
  w.scalar<std::uint8_t>(sizeof(T));
  w.matrix(initial.points);
  w.matrix(initial.weights);
  w.matrix(initial.positions);
  const SimulationResult<T>& p = s.partial;
  w.string(p.status);
  w.scalar<double>(p.t_final);
  w.scalar<std::int64_t>(p.steps);
  w.scalar<std::int64_t>(p.rejected_steps);
  w.matrix(p.positions);
  w.scalar<std::uint64_t>(p.frames.size());
  for (const auto& f : p.frames) w.matrix(f);
  w.scalar<std::uint64_t>(p.times.size());
  for (double t : p.times) w.scalar<double>(t);
  w.scalar<std::uint64_t>(p.diagnostics.size());
  for (const auto& f : p.diagnostics) {
    w.scalar<double>(f.t);
    w.matrix(f.mean);
    w.matrix(f.cov_eigenvalues);
    w.scalar<double>(f.effective_rank);
    w.scalar<std::int32_t>(f.rank);
    w.scalar<std::int64_t>(f.cluster_count);
    w.scalar<double>(f.energy);
    w.scalar<double>(f.max_norm);
  }
  w.scalar<double>(s.t);
  w.scalar<double>(s.h);
  w.scalar<std::uint8_t>(s.saved_last);
  w.scalar<std::uint8_t>(s.have_first_stage);
  w.matrix(s.first_stage);
  w.scalar<std::uint64_t>(s.sinkhorn_f.size());
  for (std::size_t h = 0; h < s.sinkhorn_f.size(); ++h) {
    w.matrix(s.sinkhorn_f[h]);
    w.matrix(s.sinkhorn_g[h]);
  }
  return w.data();
}

SimulationCheckpointHeader read_simulation_checkpoint_header(const std::string& payload, const std::string& file) {
  ByteReader r(payload, file);
  SimulationCheckpointHeader h;
  h.config_toml = r.string();
  if (r.scalar<std::uint64_t>() != fnv1a64(h.config_toml.data(), h.config_toml.size()))
    r.corrupt("config hash mismatch");
  const auto size = r.scalar<std::uint8_t>();
  if (size != 4 && size != 8) r.corrupt("dtype");
  h.float32 = size == 4;
  return h;
}

template <class T>
void read_simulation_checkpoint(const std::string& payload, const std::string& file, Measure<T>& initial,
                                SimulationState<T>& s) {
  ByteReader r(payload, file);
  (void)r.string();
  (void)r.scalar<std::uint64_t>();
  if (r.scalar<std::uint8_t>() != sizeof(T)) r.corrupt("dtype");
  r.matrix(initial.points);
  r.matrix(initial.weights);
  r.matrix(initial.positions);
  const auto n = initial.points.rows(), d = initial.points.cols();
  if (initial.weights.size() != n || (initial.positions.size() != 0 && initial.positions.size() != n))
    r.corrupt("measure sizes");
  SimulationResult<T>& p = s.partial;
  p.status = r.string();
  p.t_final = r.scalar<double>();
  p.steps = static_cast<long>(r.scalar<std::int64_t>());
  p.rejected_steps = static_cast<long>(r.scalar<std::int64_t>());
  r.matrix(p.positions);
  if (p.positions.rows() != n || p.positions.cols() != d) r.corrupt("positions shape");
  const auto frames = r.scalar<std::uint64_t>();
  if (frames > r.remaining()) r.corrupt("frame count");
  p.frames.resize(frames);
  for (auto& f : p.frames) {
    r.matrix(f);
    if (f.rows() != n || f.cols() != d) r.corrupt("frame shape");
  }
  const auto times = r.scalar<std::uint64_t>();
  if (times > r.remaining() / sizeof(double)) r.corrupt("time count");
  p.times.resize(times);
  for (auto& t : p.times) t = r.scalar<double>();
  const auto diags = r.scalar<std::uint64_t>();
  if (diags > r.remaining()) r.corrupt("diagnostics count");
  p.diagnostics.resize(diags);
  for (auto& f : p.diagnostics) {
    f.t = r.scalar<double>();
    r.matrix(f.mean);
    r.matrix(f.cov_eigenvalues);
    f.effective_rank = r.scalar<double>();
    f.rank = r.scalar<std::int32_t>();
    f.cluster_count = static_cast<long>(r.scalar<std::int64_t>());
    f.energy = r.scalar<double>();
    f.max_norm = r.scalar<double>();
  }
  s.t = r.scalar<double>();
  s.h = r.scalar<double>();
  s.saved_last = r.scalar<std::uint8_t>() != 0;
  s.have_first_stage = r.scalar<std::uint8_t>() != 0;
  r.matrix(s.first_stage);
  if (s.have_first_stage && (s.first_stage.rows() != n || s.first_stage.cols() != d)) r.corrupt("integrator state");
  const auto heads = r.scalar<std::uint64_t>();
  if (heads > r.remaining()) r.corrupt("head count");
  s.sinkhorn_f.resize(heads);
  s.sinkhorn_g.resize(heads);
  for (std::size_t h = 0; h < heads; ++h) {
    r.matrix(s.sinkhorn_f[h]);
    r.matrix(s.sinkhorn_g[h]);
  }
  if (r.remaining() != 0) r.corrupt("trailing bytes");
}

template std::string simulation_checkpoint_payload<float>(const std::string&, const Measure<float>&,
                                                          const SimulationState<float>&);
template std::string simulation_checkpoint_payload<double>(const std::string&, const Measure<double>&,
                                                           const SimulationState<double>&);
template void read_simulation_checkpoint<float>(const std::string&, const std::string&, Measure<float>&,
                                                SimulationState<float>&);
template void read_simulation_checkpoint<double>(const std::string&, const std::string&, Measure<double>&,
                                                 SimulationState<double>&);

}  // namespace tokenflow
