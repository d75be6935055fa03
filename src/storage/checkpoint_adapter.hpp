// The one reader of the earlier training checkpoint format (src/storage/checkpoint_adapter.cpp); only
// checkpoint.cpp includes it: everything else sees the container of tokenflow/checkpoint.hpp.
#pragma once

#include <optional>
#include <string>

namespace tokenflow {

// When `all` (a whole file, `file` its name for messages) is a training checkpoint of the earlier
// format (magic "TFCKPT01", the payload, the FNV-1a hash of magic and payload), its verified payload,
// which is the payload train writes into the container today; otherwise nullopt. A corrupt earlier
// checkpoint throws InputError (key "checkpoint").
std::optional<std::string> earlier_training_checkpoint_payload(const std::string& all, const std::string& file);

}  // namespace tokenflow
