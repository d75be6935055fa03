// libFuzzer target: the .npy parser. Any input must parse or end in InputError.
#include <cstdint>
#include <string>

#include "tokenflow/error.hpp"
#include "tokenflow/io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const tokenflow::NpyArray a = tokenflow::parse_npy(std::string(reinterpret_cast<const char*>(data), size), "fuzz.npy");
    std::size_t count = 1;
    for (auto s : a.shape) count *= s;
    if (count != a.data.size()) __builtin_trap();  // the parser must keep shape and data consistent
  } catch (const tokenflow::InputError&) {
  }
  return 0;
}
