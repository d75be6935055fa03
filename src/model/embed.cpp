// Texts as measures (tokenflow/embed.hpp).
#include "tokenflow/embed.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <unordered_map>

#include "tokenflow/echo.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"

namespace tokenflow {

namespace {

std::string lowercase(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

bool is_integer(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace

WordVectors read_word_vectors(const std::filesystem::path& path, const std::string& key) {
  // A regular file only (not /dev/zero, not a fifo), no larger than this machine's memory.
  return parse_word_vectors(read_input_file(path, key), path.string());
}

WordVectors parse_word_vectors(const std::string& bytes, const std::string& file) {
  WordVectors v;
  long line_number = 0;
  // word2vec's header "count dim" on the first line: the rows that follow must be exactly `count`
  // vectors of `dim` numbers. The promise is checked against the bytes present before anything is
  // reserved (a row takes at least 2 bytes per number plus the word and the newline).
  long header_count = -1;
  long header_line = 0;
  std::vector<std::string> fields;
  std::unordered_map<std::string, long> first_line;  // word -> the line of its vector
  for (std::size_t pos = 0; pos < bytes.size();) {
    std::size_t end = bytes.find('\n', pos);
    if (end == std::string::npos) end = bytes.size();
    std::string_view line(bytes.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    fields.clear();
    for (std::size_t i = 0; i < line.size();) {
      while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
      std::size_t j = i;
      while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
      if (j > i) fields.emplace_back(line.substr(i, j - i));
      i = j;
    }
    if (fields.empty()) continue;
    const std::string where = "line " + std::to_string(line_number);
    if (line_number == 1 && fields.size() == 2 && is_integer(fields[0]) && is_integer(fields[1])) {
      if (fields[0].size() > 12 || fields[1].size() > 9)
        throw InputError(file, where, "the header \"count dim\" (" + shorten_number(fields[0]) + " " +
                                          shorten_number(fields[1]) + ") is too large");
      header_count = std::stol(fields[0]);
      const long dim = std::stol(fields[1]);
      if (header_count < 1 || dim < 1)
        throw InputError(file, where, "the header \"count dim\" must be two positive integers");
      if (static_cast<long double>(header_count) * (2.0L * dim + 1.0L) > static_cast<long double>(bytes.size()))
        throw InputError(file, where,
                         "the header promises " + fields[0] + " vectors of dimension " + fields[1] +
                             ", more than the file's " + std::to_string(bytes.size()) + " bytes can hold");
      v.dim = static_cast<int>(dim);
      header_line = line_number;
      v.words.reserve(static_cast<std::size_t>(header_count));
      v.data.reserve(static_cast<std::size_t>(header_count) * static_cast<std::size_t>(dim));
      continue;
    }
    if (header_count >= 0 && static_cast<long>(v.words.size()) == header_count)
      throw InputError(file, where,
                       "one vector more than the " + std::to_string(header_count) + " the header (line " +
                           std::to_string(header_line) + ") promises");
    const long dim = static_cast<long>(fields.size()) - 1;
    if (dim < 1) throw InputError(file, where, "a word without numbers");
    if (v.dim == 0) v.dim = static_cast<int>(std::min<long>(dim, 1L << 30));
    if (dim != v.dim)
      throw InputError(
          file, where,
          "has " + std::to_string(dim) + " numbers, " +
              (header_count >= 0 ? "the header says " : "the first vector ") + std::to_string(v.dim));
    for (long c = 1; c <= dim; ++c) {
      const std::string& f = fields[static_cast<std::size_t>(c)];
      char* stop = nullptr;
      const double x = std::strtod(f.c_str(), &stop);
      if (stop == f.c_str() || *stop != '\0' || !std::isfinite(x))
        throw InputError(file, where, "'" + echo(f) + "' is not a finite number");
      v.data.push_back(x);
    }
    // The same word twice is refused, naming both lines (which vector would be meant?); words
    // that differ only in case share a lookup key, and the first (word2vec files list the most
    // frequent first) is the one looked up.
    if (const auto same = first_line.find(fields[0]); same != first_line.end())
      throw InputError(file, where,
                       "the word '" + echo(fields[0]) + "' already has a vector on line " +
                           std::to_string(same->second) + "; each word must appear once");
    first_line.emplace(fields[0], line_number);
    const std::string key = lowercase(fields[0]);
    v.index.emplace(key, static_cast<int>(v.words.size()));
    v.words.push_back(fields[0]);
    if (v.words.size() > static_cast<std::size_t>(std::numeric_limits<int>::max() - 1))
      throw InputError(file, where, "too many word vectors");
  }
  if (v.words.empty()) throw InputError(file, "--vectors", "no word vectors in the file");
  if (header_count >= 0 && static_cast<long>(v.words.size()) != header_count)
    throw InputError(file, "line " + std::to_string(line_number),
                     "the file ends after " + std::to_string(v.words.size()) + " vectors; the header (line " +
                         std::to_string(header_line) + ") promises " + std::to_string(header_count));
  return v;
}

std::vector<std::string> tokenize(const std::string& text) {
  std::vector<std::string> words;
  std::string current;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const bool word_char = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') || c == '_' || c == '\'' || c >= 0x80;
    if (word_char) {
      current += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : ch;
    } else if (!current.empty()) {
      words.push_back(current);
      current.clear();
    }
  }
  if (!current.empty()) words.push_back(current);
  return words;
}

TextMeasure text_to_measure(const WordVectors& vectors, const std::string& text,
                            const std::string& key) {
  TextMeasure t;
  std::unordered_map<std::string, int> seen;  // word -> index in t.words (known) or -1 (unknown)
  std::vector<int> rows;
  for (const std::string& w : tokenize(text)) {
    ++t.tokens;
    auto it = seen.find(w);
    if (it == seen.end()) {
      auto v = vectors.index.find(w);
      if (v == vectors.index.end()) {
        seen.emplace(w, -1);
        t.unknown.push_back(w);
        continue;
      }
      it = seen.emplace(w, static_cast<int>(t.words.size())).first;
      t.words.push_back(w);
      t.counts.push_back(0);
      rows.push_back(v->second);
    }
    if (it->second >= 0) ++t.counts[static_cast<std::size_t>(it->second)];
  }
  if (t.words.empty())
    throw InputError("", key,
                     t.tokens == 0 ? "the text has no words" : "no word of the text has a vector");
  const auto n = static_cast<Eigen::Index>(t.words.size());
  t.points.resize(n, vectors.dim);
  t.weights.resize(n);
  double total = 0.0;
  for (Eigen::Index i = 0; i < n; ++i) {
    const std::size_t row = static_cast<std::size_t>(rows[static_cast<std::size_t>(i)]) *
                            static_cast<std::size_t>(vectors.dim);
    for (int c = 0; c < vectors.dim; ++c)
      t.points(i, c) = vectors.data[row + static_cast<std::size_t>(c)];
    t.weights[i] = t.counts[static_cast<std::size_t>(i)];
    total += t.weights[i];
  }
  t.weights /= total;
  return t;
}

}  // namespace tokenflow
