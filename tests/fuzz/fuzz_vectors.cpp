// libFuzzer target: the word-vector reader of `tokenflow embed --vectors` and `couple --vectors`
// (word2vec/GloVe text), and a text measured with what it accepts. Any input must parse or end in
// InputError; a crash, a sanitizer report or another exception is a finding.
#include <cstdint>
#include <string>

#include "tokenflow/embed.hpp"
#include "tokenflow/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (1u << 20)) return 0;
  try {
    const tokenflow::WordVectors v =
        tokenflow::parse_word_vectors(std::string(reinterpret_cast<const char*>(data), size), "fuzz.txt");
    // What is accepted is consistent: one row of dim numbers per word, every word indexed.
    if (v.dim < 1 || v.data.size() != v.words.size() * static_cast<std::size_t>(v.dim)) __builtin_trap();
    if (v.index.empty() || v.index.size() > v.words.size()) __builtin_trap();
    // A text of the first words (and one unknown word) becomes a measure of the known ones.
    std::string text = "zzz-unknown-word ";
    for (std::size_t i = 0; i < v.words.size() && i < 8; ++i) text += v.words[i] + " " + v.words[0] + " ";
    try {
      const tokenflow::TextMeasure t = tokenflow::text_to_measure(v, text, "--text");
      if (t.points.rows() != static_cast<Eigen::Index>(t.words.size()) || t.points.cols() != v.dim) __builtin_trap();
    } catch (const tokenflow::InputError&) {
      // A word may have no vector under its lowercase, tokenized form ("no word of the text...").
    }
  } catch (const tokenflow::InputError&) {
  }
  return 0;
}
