// tokenflow/embed.hpp: texts as measures (`tokenflow embed`, `couple --x-text`).
//
// A text becomes mu = sum_w a_w delta_{v(w)}: one point per distinct known word w (the word's
// vector v(w) from a word-vector file), with weight a_w proportional to the number of times w
// occurs. Words without a vector are reported and left out.
//
// Word-vector files: the common text format of word2vec and GloVe, one word per line followed by
// its d numbers separated by spaces; an optional first line "count d" (word2vec) is recognized.
// Every line must have the same d and finite numbers; an error names the file and the line.
#pragma once

#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenflow/measure.hpp"

namespace tokenflow {

struct WordVectors {
  int dim = 0;
  std::vector<std::string> words;              // in file order
  std::unordered_map<std::string, int> index;  // lowercased word -> row (the first one wins)
  std::vector<double> data;                    // words.size() x dim, row-major
};

// Reads the file through read_input_file (a regular file only). With a "count dim" header the file
// must hold exactly count vectors of dim numbers (the count is checked against the file's size
// before anything is reserved); errors name the file and the line.
// `key` names the option or config key that gave the path.
WordVectors read_word_vectors(const std::filesystem::path& path, const std::string& key = "--vectors");
// The same from bytes in memory (`file` names them in errors).
WordVectors parse_word_vectors(const std::string& bytes, const std::string& file);

// Lowercase (ASCII) and split: a word is a maximal run of letters, digits, '_', '\'' or bytes
// >= 0x80 (so UTF-8 words stay whole); everything else separates words.
std::vector<std::string> tokenize(const std::string& text);

struct TextMeasure {
  std::vector<std::string> words;    // distinct known words, in order of first occurrence
  std::vector<int> counts;           // occurrences of each
  Points<double> points;             // words.size() x dim
  Eigen::VectorXd weights;           // counts / total, sums to 1
  std::vector<std::string> unknown;  // distinct words without a vector, in order
  int tokens = 0;                    // words in the text, known or not
};

// Throws InputError(key) when no word of the text has a vector.
TextMeasure text_to_measure(const WordVectors& vectors, const std::string& text,
                            const std::string& key = "--text");

}  // namespace tokenflow
