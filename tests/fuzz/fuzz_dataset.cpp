// libFuzzer target: the single-file dataset form (tokenflow/packed_pairs.hpp). The input is the
// archive (put in an in-memory file); opening it and reading every pair must succeed or end in
// InputError, never read outside the arrays or allocate beyond the file's size.
#include <cstdint>
#include <string>

#include "fuzz_file.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/packed_pairs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::MemoryFile file;
  const std::string& path = file.write(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const tokenflow::PackedPairs pairs(path, -1, "task.path");
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const tokenflow::CouplingPair p = pairs.pair(i);
      if (p.x.cols() != pairs.dimension() || p.target.rows() != p.x.rows() || p.target.cols() != p.y.rows())
        __builtin_trap();  // a pair's shapes come from the checked offsets
    }
  } catch (const tokenflow::InputError&) {
  }
  return 0;
}
