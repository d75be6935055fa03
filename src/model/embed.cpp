// Texts as measures (tokenflow/embed.hpp).
#include "tokenflow/embed.hpp"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tokenflow/error.hpp"

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

WordVectors read_word_vectors(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path.string(), "--vectors", "cannot open the file");
  WordVectors v;
  std::string line;
  long line_number = 0;
  std::vector<std::string> fields;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::istringstream ss(line);
    fields.clear();
    for (std::string f; ss >> f;) fields.push_back(f);
    if (fields.empty()) continue;
    // word2vec's header: "count dim" on the first line.
    if (line_number == 1 && fields.size() == 2 && is_integer(fields[0]) && is_integer(fields[1]))
      continue;
    const int dim = static_cast<int>(fields.size()) - 1;
    const std::string where = "line " + std::to_string(line_number);
    if (dim < 1) throw InputError(path.string(), where, "a word without numbers");
    if (v.dim == 0) v.dim = dim;
    if (dim != v.dim)
      throw InputError(
          path.string(), where,
          "has " + std::to_string(dim) + " numbers, the first vector " + std::to_string(v.dim));
    for (int c = 1; c <= dim; ++c) {
      const std::string& f = fields[static_cast<std::size_t>(c)];
      char* end = nullptr;
      const double x = std::strtod(f.c_str(), &end);
      if (end == f.c_str() || *end != '\0' || !std::isfinite(x))
        throw InputError(path.string(), where, "'" + f + "' is not a finite number");
      v.data.push_back(x);
    }
    const std::string key = lowercase(fields[0]);
    v.index.emplace(key, static_cast<int>(v.words.size()));
    v.words.push_back(fields[0]);
  }
  if (v.words.empty()) throw InputError(path.string(), "--vectors", "no word vectors in the file");
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
