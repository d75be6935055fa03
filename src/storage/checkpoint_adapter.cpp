// The earlier training checkpoint format, converted to the container's payload (checkpoint_adapter.hpp).
#include "checkpoint_adapter.hpp"

#include <string_view>

#include "tokenflow/records.hpp"

namespace tokenflow {

std::optional<std::string> earlier_training_checkpoint_payload(const std::string& all, const std::string& file) {
  constexpr std::string_view kMagic{"TFCKPT01", 8};
  if (all.size() < kMagic.size() || all.compare(0, kMagic.size(), kMagic) != 0) return std::nullopt;
  ByteReader r(all, file);
  r.open_sealed(std::string(kMagic), "checkpoint");
  return all.substr(kMagic.size(), r.remaining());
}

}  // namespace tokenflow
