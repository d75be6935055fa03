// Pairs of texts with word alignments read into coupling pairs (tokenflow/texts.hpp).
#include "tokenflow/texts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>
#include <utility>

#include "tokenflow/dataset.hpp"
#include "tokenflow/echo.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"

namespace tokenflow {

namespace {

using json = nlohmann::json;
using Link = std::pair<int, int>;

// Errors of one line: InputError(file, "line N: KEY", what).
struct LineContext {
  const std::string& file;
  long line;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(file, key.empty() ? fmt::format("line {}", line) : fmt::format("line {}: {}", line, key), what);
  }
};

const std::vector<std::string>& line_keys() {
  static const std::vector<std::string> keys{"x", "y", "links", "weights", "possible"};
  return keys;
}

std::vector<std::string> text_words(const json& object, const char* key, const LineContext& at) {
  const auto it = object.find(key);
  if (it == object.end()) at.fail(key, "is missing (a line holds x, y and links)");
  if (!it->is_string()) at.fail(key, "must be a string (the text)");
  std::vector<std::string> words = tokenize(it->get<std::string>());
  if (words.empty()) at.fail(key, "has no word (a text needs at least one)");
  return words;
}

// A list of [i, j] with 0 <= i < n, 0 <= j < m, each at most once.
std::vector<Link> read_links(const json& list, const char* key, std::size_t n, std::size_t m, const LineContext& at) {
  if (!list.is_array()) at.fail(key, "must be a list of [i, j] (word positions in x and y)");
  std::vector<Link> links;
  std::set<Link> seen;
  for (std::size_t k = 0; k < list.size(); ++k) {
    const json& l = list[k];
    if (!l.is_array() || l.size() != 2 || !l[0].is_number_integer() || !l[1].is_number_integer())
      at.fail(key, fmt::format("entry {} is {}, expected [i, j] with two integers", k, echo(l.dump())));
    // Positions as written (a JSON integer beyond int64, 2^64 - 1, is unsigned: never wrapped).
    auto position = [&](const json& v, const char* name, std::size_t size, const char* text) {
      const bool in_range = v.is_number_unsigned() ? v.get<std::uint64_t>() < size
                                                   : v.get<std::int64_t>() >= 0 && static_cast<std::uint64_t>(v.get<std::int64_t>()) < size;
      if (!in_range)
        at.fail(key, fmt::format("entry {}: {} = {} is out of range ({} has {} words, positions 0 to {})", k, name,
                                 echo(v.dump()), text, size, size - 1));
      return static_cast<long long>(v.is_number_unsigned() ? static_cast<long long>(v.get<std::uint64_t>())
                                                           : v.get<std::int64_t>());
    };
    const long long i = position(l[0], "i", n, "x"), j = position(l[1], "j", m, "y");
    const Link link{static_cast<int>(i), static_cast<int>(j)};
    if (!seen.insert(link).second) at.fail(key, fmt::format("entry {}: the link [{}, {}] is given twice", k, i, j));
    links.push_back(link);
  }
  return links;
}

std::vector<double> read_weights(const json& object, std::size_t links, const LineContext& at) {
  const auto it = object.find("weights");
  if (it == object.end()) return std::vector<double>(links, 1.0);
  if (!it->is_array() || it->size() != links)
    at.fail("weights", fmt::format("must be a list of {} numbers, one per link", links));
  std::vector<double> w;
  for (std::size_t k = 0; k < links; ++k) {
    const json& v = (*it)[k];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0.0)
      at.fail("weights", fmt::format("entry {} is {}, expected a finite number >= 0", k, echo(v.dump())));
    w.push_back(v.get<double>());
  }
  if (std::none_of(w.begin(), w.end(), [](double x) { return x > 0.0; }))
    at.fail("weights", "are all zero (the target needs mass)");
  return w;
}

// The row of each word in the vector file, -1 for unknown words (counted in `out`).
std::vector<int> vector_rows(const std::vector<std::string>& words, const WordVectors& vectors, TextPairs& out,
                             std::unordered_set<std::string>& unknown) {
  std::vector<int> rows;
  for (const std::string& w : words) {
    const auto it = vectors.index.find(w);
    rows.push_back(it == vectors.index.end() ? -1 : it->second);
    if (it != vectors.index.end()) continue;
    ++out.unknown_tokens;
    if (unknown.insert(w).second) {
      ++out.unknown_words;
      if (out.unknown_first.size() < kUnknownShown) out.unknown_first.push_back(w);
    }
  }
  return rows;
}

// Point index of each position: the distinct known words, in order of first occurrence (-1: unknown).
std::vector<int> point_of_position(const std::vector<int>& rows, std::vector<int>& point_rows) {
  std::map<int, int> point_of_row;
  std::vector<int> point(rows.size(), -1);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0) continue;
    const auto [it, fresh] = point_of_row.emplace(rows[i], static_cast<int>(point_rows.size()));
    if (fresh) point_rows.push_back(rows[i]);
    point[i] = it->second;
  }
  return point;
}

// The weights of a text's points (texts.hpp): the target's marginal `linked` scaled to the share
// 1 - s of the N known occurrences that a kept link names, and s = U / (N + U) spread evenly over
// the U known occurrences that none names: a = (1 - s) linked + s unlinked / U, unlinked counting
// each point's unlinked occurrences. Empty without unlinked occurrences (a = linked).
Eigen::VectorXd text_weights(const Eigen::VectorXd& linked, const std::vector<int>& point,
                             const std::vector<bool>& is_linked) {
  Eigen::VectorXd unlinked = Eigen::VectorXd::Zero(linked.size());
  double N = 0.0, U = 0.0;
  for (std::size_t i = 0; i < point.size(); ++i) {
    if (point[i] < 0) continue;
    if (is_linked[i]) {
      N += 1.0;
    } else {
      U += 1.0;
      unlinked[point[i]] += 1.0;
    }
  }
  if (U == 0.0) return {};
  const double s = U / (N + U);
  return (1.0 - s) * linked + (s / U) * unlinked;
}

Points<double> vectors_of(const std::vector<int>& point_rows, const WordVectors& vectors) {
  Points<double> p(static_cast<Eigen::Index>(point_rows.size()), vectors.dim);
  for (std::size_t k = 0; k < point_rows.size(); ++k)
    for (int c = 0; c < vectors.dim; ++c)
      p(static_cast<Eigen::Index>(k), c) =
          vectors.data[static_cast<std::size_t>(point_rows[k]) * static_cast<std::size_t>(vectors.dim) +
                       static_cast<std::size_t>(c)];
  return p;
}

// Gold links on positions -> links between points (each once, sorted); links of words without a point left out.
std::vector<Link> point_links(const std::vector<Link>& links, const std::vector<int>& px, const std::vector<int>& py) {
  std::set<Link> out;
  for (const auto& [i, j] : links)
    if (px[static_cast<std::size_t>(i)] >= 0 && py[static_cast<std::size_t>(j)] >= 0)
      out.emplace(px[static_cast<std::size_t>(i)], py[static_cast<std::size_t>(j)]);
  return {out.begin(), out.end()};
}

CouplingPair parse_line(const json& object, const WordVectors& vectors, const LineContext& at, TextPairs& out,
                        std::unordered_set<std::string>& unknown) {
  if (!object.is_object()) at.fail("", "is not a JSON object {\"x\": ..., \"y\": ..., \"links\": [...]}");
  for (const auto& item : object.items())
    if (std::find(line_keys().begin(), line_keys().end(), item.key()) == line_keys().end())
      at.fail(echo(item.key()), "unknown key (a line holds x, y, links and optionally weights, possible)");
  const std::vector<std::string> wx = text_words(object, "x", at), wy = text_words(object, "y", at);
  if (!object.contains("links")) at.fail("links", "is missing (a line holds x, y and links)");
  const std::vector<Link> links = read_links(object["links"], "links", wx.size(), wy.size(), at);
  if (links.empty()) at.fail("links", "is empty (the target coupling comes from the links)");
  const std::vector<double> weights = read_weights(object, links.size(), at);
  const std::vector<Link> possible =
      object.contains("possible") ? read_links(object["possible"], "possible", wx.size(), wy.size(), at)
                                  : std::vector<Link>{};
  const std::vector<int> rx = vector_rows(wx, vectors, out, unknown), ry = vector_rows(wy, vectors, out, unknown);
  // When their sum overflows, the weights are scaled by the largest one, so that sums of them (a
  // link given by several positions, the total) stay finite for weights up to the largest double.
  double sum = 0.0;
  for (const double w : weights) sum += w;
  const double scale = std::isfinite(sum) ? 1.0 : *std::max_element(weights.begin(), weights.end());
  std::vector<int> rows_x, rows_y;
  const std::vector<int> px = point_of_position(rx, rows_x), py = point_of_position(ry, rows_y);
  std::map<Link, double> mass;  // (point of x, point of y) -> weight / scale
  std::vector<bool> linked_x(wx.size(), false), linked_y(wy.size(), false);  // positions a kept link names
  for (std::size_t k = 0; k < links.size(); ++k) {
    const auto [i, j] = links[k];
    if (px[static_cast<std::size_t>(i)] < 0 || py[static_cast<std::size_t>(j)] < 0) {
      ++out.dropped_links;
      continue;
    }
    if (!(weights[k] > 0.0)) continue;
    mass[{px[static_cast<std::size_t>(i)], py[static_cast<std::size_t>(j)]}] += weights[k] / scale;
    linked_x[static_cast<std::size_t>(i)] = linked_y[static_cast<std::size_t>(j)] = true;
  }
  if (mass.empty()) at.fail("links", "no link is left: every linked word (with positive weight) is unknown");
  CouplingPair p;
  p.x = vectors_of(rows_x, vectors);
  p.y = vectors_of(rows_y, vectors);
  p.target = RowMatrix::Zero(p.x.rows(), p.y.rows());
  double total = 0.0;
  for (const auto& [pq, w] : mass) total += w;
  for (const auto& [pq, w] : mass) p.target(pq.first, pq.second) = w / total;
  p.sure = point_links(links, px, py);
  std::vector<Link> all = possible;
  all.insert(all.end(), links.begin(), links.end());
  p.possible = point_links(all, px, py);
  // The texts' measures keep their unaligned words: then their weights are not the target's
  // marginals (without any, a and b are left for check_coupling_pair to fill in with those).
  Eigen::VectorXd a = text_weights(p.target.rowwise().sum(), px, linked_x),
                  b = text_weights(p.target.colwise().sum().transpose(), py, linked_y);
  const bool unaligned = a.size() > 0 || b.size() > 0;
  if (unaligned) {
    p.a = a.size() > 0 ? std::move(a) : Eigen::VectorXd(p.target.rowwise().sum());
    p.b = b.size() > 0 ? std::move(b) : Eigen::VectorXd(p.target.colwise().sum().transpose());
  }
  check_coupling_pair(p, at.file + fmt::format(" line {}", at.line), vectors.dim, unaligned);
  return p;
}

// The reason in one of nlohmann's exception messages, without its "[json.exception...]" tag.
std::string json_reason(const std::string& what) {
  if (const auto column = what.find("column"); column != std::string::npos) return what.substr(column);
  if (const auto tag = what.find("] "); tag != std::string::npos) return what.substr(tag + 2);
  return what;
}

}  // namespace

TextPairs parse_text_pairs(const std::string& bytes, const WordVectors& vectors, const std::string& file) {
  TextPairs out;
  std::unordered_set<std::string> unknown;
  long line_number = 0;
  for (std::size_t pos = 0; pos < bytes.size();) {
    std::size_t end = bytes.find('\n', pos);
    if (end == std::string::npos) end = bytes.size();
    const std::string_view line(bytes.data() + pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const LineContext at{file, line_number};
    json object;
    try {
      object = json::parse(line);
    } catch (const json::exception& e) {
      // nlohmann's messages: "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
      // and, for a number beyond double's range, "[json.exception.out_of_range.406] number overflow
      // parsing '1e315'": the part after the position, or after the tag.
      at.fail("", "not JSON: " + json_reason(e.what()));
    }
    try {
      out.pairs.push_back(parse_line(object, vectors, at, out, unknown));
    } catch (const json::exception& e) {  // a value of a kind parse_line did not expect
      at.fail("", "unreadable: " + json_reason(e.what()));
    }
  }
  if (out.pairs.empty()) throw InputError(file, "", "holds no pair (one JSON object a line)");
  return out;
}

TextPairs read_text_pairs(const std::filesystem::path& path, const WordVectors& vectors, const std::string& key) {
  return parse_text_pairs(read_input_file(path, key), vectors, path.string());
}

std::string describe_unknown(const TextPairs& t) {
  if (t.unknown_words == 0) return "";
  return fmt::format("{} unknown word{} ({} occurrence{}, {} link{} left out): {}{}", t.unknown_words,
                     t.unknown_words == 1 ? "" : "s", t.unknown_tokens, t.unknown_tokens == 1 ? "" : "s",
                     t.dropped_links, t.dropped_links == 1 ? "" : "s", echo_list(t.unknown_first),
                     t.unknown_words > static_cast<long>(t.unknown_first.size()) ? ", ..." : "");
}

}  // namespace tokenflow
