// libFuzzer target: the aligned-texts reader of [task] kind = "texts" (JSON lines of text pairs and
// word links, tokenflow/texts.hpp) against a fixed vocabulary. Any input must parse or end in
// InputError; a crash, a sanitizer report or another exception is a finding.
#include <cmath>
#include <cstdint>
#include <string>

#include "tokenflow/error.hpp"
#include "tokenflow/texts.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (1u << 20)) return 0;
  static const tokenflow::WordVectors vectors =
      tokenflow::parse_word_vectors("cat 1 0\ndog 0 1\nchat 1.1 0\nchien 0 1.1\nthe 0.5 0.5\n", "vectors.txt");
  try {
    const tokenflow::TextPairs t =
        tokenflow::parse_text_pairs(std::string(reinterpret_cast<const char*>(data), size), vectors, "fuzz.jsonl");
    // What is accepted is a coupling with positive marginals whose support is the sure links.
    for (const tokenflow::CouplingPair& p : t.pairs) {
      if (p.x.rows() < 1 || p.y.rows() < 1 || p.target.rows() != p.x.rows() || p.target.cols() != p.y.rows())
        __builtin_trap();
      if (!(std::abs(p.target.sum() - 1.0) <= 1e-6) || !(p.a.minCoeff() > 0.0) || !(p.b.minCoeff() > 0.0))
        __builtin_trap();
      for (const auto& [i, j] : p.sure)
        if (i < 0 || j < 0 || i >= p.x.rows() || j >= p.y.rows()) __builtin_trap();
    }
  } catch (const tokenflow::InputError&) {
  }
  return 0;
}
