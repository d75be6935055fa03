// libFuzzer target: the TOML config reader and the simulate key reader. Any input must end in a
// config or in InputError; a crash, a sanitizer report or another exception is a finding.
#include <cstdint>
#include <string>

#include "tokenflow/config.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/readers.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    tokenflow::Config c = tokenflow::Config::from_text(text, "fuzz.toml");
    // The first line also goes through --set, which parses values on its own.
    const std::string first = text.substr(0, text.find('\n'));
    try {
      c.set(first);
    } catch (const tokenflow::InputError&) {
    }
    const tokenflow::SimulationConfig s = tokenflow::read_simulation_config(c);
    // Build the measure and the attention only for small sizes: a config may ask for d = 131 004
    // (a d x d identity per head, 137 GB), which a user may mean and a fuzzer must not allocate.
    const long d = s.init.kind == "sphere" ? s.init.d : static_cast<long>(s.init.mean.size());
    if (s.init.kind != "file" && s.init.n <= 64 && d <= 128 && s.attention.heads <= 16) {
      const auto mu = tokenflow::make_initial_measure(s, c);
      (void)tokenflow::read_attention(s, c, static_cast<int>(mu.d()));
    }
  } catch (const tokenflow::InputError&) {
  }
  return 0;
}
