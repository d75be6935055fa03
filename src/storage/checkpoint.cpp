// Checkpoint files: atomic writes, verified reads.
#include "tokenflow/checkpoint.hpp"

#include "checkpoint_adapter.hpp"

#include <cstring>
#include <utility>

#include "tokenflow/durable_file.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"

namespace tokenflow {

namespace {
constexpr char kMagic[16] = "TOKENFLOW-CKPT";
constexpr std::uint32_t kVersion = 1;
}  // namespace

void write_checkpoint_file(const std::filesystem::path& path, CheckpointKind kind, const std::string& payload,
                           const std::filesystem::path& temp_dir) {
  ByteWriter header;
  header.bytes(kMagic, sizeof(kMagic));
  header.scalar<std::uint32_t>(kVersion);
  header.scalar<std::uint32_t>(static_cast<std::uint32_t>(kind));
  header.scalar<std::uint64_t>(payload.size());
  header.scalar<std::uint64_t>(fnv1a64(payload.data(), payload.size()));
  // The old checkpoint or the new one, never half of one; fsynced, and the folder too.
  replace_file_atomically(path, header.data() + payload, temp_dir);
}

namespace {

std::string read_verified(const std::filesystem::path& path, std::uint32_t& kind) {
  const std::string file = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw InputError(file, "checkpoint", "no checkpoint here (was the run started with run.checkpoint_every > 0?)");
  // A regular file only (a fifo or /dev/zero in its place is refused, not read forever).
  const std::string all = read_input_file(path, "checkpoint");
  if (auto earlier = earlier_training_checkpoint_payload(all, file)) {
    kind = static_cast<std::uint32_t>(CheckpointKind::train);
    return *std::move(earlier);
  }
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

}  // namespace tokenflow
