// TOML configurations (toml++) with strict keys, typed getters and "did you mean" suggestions.
#include "tokenflow/config.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>
#include <utility>
#include <vector>
#include <sstream>
#include <toml++/toml.h>

#include "tokenflow/echo.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/io.hpp"

namespace tokenflow {

struct Config::Impl {
  toml::table table;
  std::string source;           // file path or a label ("config", "defaults")
  std::string base_dir;         // for relative paths: the config file's directory
  std::set<std::string> overridden;  // keys set with --set
};

Config::Config() : impl_(std::make_unique<Impl>()) { impl_->source = "defaults"; }
Config::~Config() = default;
Config::Config(const Config& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Config& Config::operator=(const Config& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
Config::Config(Config&&) noexcept = default;
Config& Config::operator=(Config&&) noexcept = default;

namespace {

std::string describe_parse_error(const toml::parse_error& e) {
  std::ostringstream os;
  os << "line " << e.source().begin.line << ", column " << e.source().begin.column << ": "
     << e.description();
  return os.str();
}

std::vector<std::string> split_dots(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  std::string p;
  while (std::getline(ss, p, '.')) parts.push_back(p);
  return parts;
}

const char* type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    default: return "a date/time";
  }
}

std::optional<double> as_number(const toml::node& node) {
  if (auto v = node.as_floating_point()) return v->get();
  if (auto v = node.as_integer()) return static_cast<double>(v->get());
  return std::nullopt;
}

// The deepest nesting of tables, arrays and dotted keys a config may have. Real configs nest three
// or four levels ([[attention.layers]] with a matrix is 4); a limit of 64 is far above any of them.
constexpr int kMaxTomlDepth = 64;

// The index just past the TOML string that opens at text[i] (basic or literal, one-line or
// multi-line), counting its line breaks into `line`. A one-line string ends at the line's end
// (toml++ reports it unclosed).
std::size_t skip_toml_string(const std::string& text, std::size_t i, long& line) {
  const std::size_t n = text.size();
  const char c = text[i];
  const bool basic = c == '"';
  const bool multi = i + 2 < n && text[i + 1] == c && text[i + 2] == c;
  i += multi ? 3 : 1;
  while (i < n) {
    if (basic && text[i] == '\\') {  // an escape: the next character is not a delimiter
      if (i + 1 < n && text[i + 1] == '\n') ++line;
      i += 2;
      continue;
    }
    if (text[i] == '\n') {
      if (!multi) break;  // a one-line string ends at the line's end (toml++ reports it)
      ++line;
    }
    if (text[i] == c) {
      if (!multi) {
        ++i;
        break;
      }
      if (i + 2 < n && text[i + 1] == c && text[i + 2] == c) {
        i += 3;
        for (int extra = 0; extra < 2 && i < n && text[i] == c; ++extra) ++i;  // """a"""" is a"
        break;
      }
    }
    ++i;
  }
  return i;
}

// Why this scanner exists: toml++ (3.3) limits the nesting of array and inline-table VALUES (256)
// but not of dotted keys: a header [a.a.a. ... .a] of 50 000 parts, or a key a.a. ... .a = 1 (also
// inside inline tables), builds 50 000 nested tables, and toml++ recurses over them without a
// depth limit (inserting, copying, printing, destroying): the stack overflows (SIGSEGV in the CLI,
// and Python's interpreter dies with it). So the nesting is measured here, before toml++ sees the
// text, and a deep document is an InputError naming the file and the line.
// The scanner knows TOML's comments and its four kinds of strings (basic, literal, and their
// multi-line forms) well enough not to count a '.', '[' or '{' inside them. Depth at any point is
//   parts of the current [table] header + open arrays and inline tables + parts of the keys on the
//   path to the current value (a.b = {c.d = [ ... ]} is 2 + 1 + 2 + 1 deep inside the brackets).
// It never counts less than toml++ nests; on text toml++ will refuse anyway it may count anything.
void check_toml_nesting(const std::string& text, const std::string& source) {
  enum class Ctx { key, value, header };
  struct Open {
    char kind;       // '[' array or '{' inline table
    int saved_keys;  // key_parts when it opened (restored at its ',' and its end)
  };
  std::vector<Open> stack;
  int header_parts = 0;  // of the table the statements are in
  int key_parts = 0;     // of the keys on the path from the statement to the current value
  Ctx ctx = Ctx::key;
  long line = 1;
  const std::size_t n = text.size();
  auto check = [&] {
    if (header_parts + key_parts + static_cast<int>(stack.size()) > kMaxTomlDepth)
      throw InputError(source, "",
                       "nests tables, arrays or dotted keys more than " + std::to_string(kMaxTomlDepth) +
                           " levels deep (at line " + std::to_string(line) + "); no config needs that");
  };
  auto end_of_line = [&] {
    if (stack.empty()) {  // an array may span lines; otherwise the statement ends here
      ctx = Ctx::key;
      key_parts = 0;
    }
  };
  for (std::size_t i = 0; i < n;) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      if (ctx == Ctx::header) ctx = Ctx::key;  // an unclosed header: toml++ reports it
      end_of_line();
      ++i;
      continue;
    }
    if (c == '#') {  // a comment, to the end of the line
      while (i < n && text[i] != '\n') ++i;
      continue;
    }
    if (c == '"' || c == '\'') {
      i = skip_toml_string(text, i, line);
      continue;
    }
    switch (ctx) {
      case Ctx::header:
        if (c == '.') {
          ++header_parts;
          check();
        } else if (c == ']') {
          ctx = Ctx::value;  // nothing but a comment may follow on the line
          while (i + 1 < n && text[i + 1] == ']') ++i;
        }
        break;
      case Ctx::key:
        if (c == '[' && stack.empty()) {  // a [table] or [[array of tables]] header
          header_parts = 1;
          if (i + 1 < n && text[i + 1] == '[') ++header_parts, ++i;  // the array adds a level
          key_parts = 0;
          ctx = Ctx::header;
          check();
        } else if (c == '.') {
          ++key_parts;
          check();
        } else if (c == '=') {
          ++key_parts;
          ctx = Ctx::value;
          check();
        } else if (c == '}' && !stack.empty() && stack.back().kind == '{') {  // {} or {a = 1, }
          key_parts = stack.back().saved_keys;
          stack.pop_back();
          ctx = Ctx::value;
        }
        break;
      case Ctx::value:
        if (c == '[' || c == '{') {
          stack.push_back({c, key_parts});
          if (c == '{') ctx = Ctx::key;
          check();
        } else if ((c == ']' || c == '}') && !stack.empty() && stack.back().kind == (c == ']' ? '[' : '{')) {
          key_parts = stack.back().saved_keys;
          stack.pop_back();
        } else if (c == ',' && !stack.empty()) {
          key_parts = stack.back().saved_keys;
          if (stack.back().kind == '{') ctx = Ctx::key;
        }
        break;
    }
    ++i;
  }
}

// The checks before toml++ parses a config's text: its size and its nesting.
void check_toml_bounds(const std::string& text, const std::string& source) {
  if (text.size() > kMaxConfigBytes)
    throw InputError(source, "",
                     "is " + format_bytes(static_cast<double>(text.size())) + ", larger than the " +
                         format_bytes(static_cast<double>(kMaxConfigBytes)) + " a config may have");
  check_toml_nesting(text, source);
}

}  // namespace

Config Config::from_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw InputError(path, "", "no such config file");
  // A regular file of at most kMaxConfigBytes (not /dev/zero, not a fifo), then the text checks.
  Config c = from_text(read_input_file(path, "", kMaxConfigBytes, "a config"), path);
  c.impl_->base_dir = std::filesystem::path(path).parent_path().string();
  return c;
}

Config Config::from_text(const std::string& text, const std::string& source) {
  Config c;
  c.impl_->source = source;
  check_toml_bounds(text, source);
  try {
    c.impl_->table = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw InputError(source, "", "invalid TOML at " + describe_parse_error(e));
  }
  return c;
}

namespace {

// For a number that TOML refuses only for its size: "a double" (1e999, 1e-999) or "a 64-bit
// integer" (a run of digits beyond int64); "" for anything else.
std::string number_out_of_range(const std::string& value) {
  const auto first = value.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  const std::string v = value.substr(first, value.find_last_not_of(" \t") - first + 1);
  const std::size_t digits_from = (v[0] == '+' || v[0] == '-') ? 1 : 0;
  const std::string body = v.substr(digits_from);
  if (!body.empty() && body.find_first_not_of("0123456789_") == std::string::npos) return "a 64-bit integer";
  errno = 0;
  char* end = nullptr;
  std::strtod(v.c_str(), &end);
  if (end != v.c_str() && *end == '\0' && errno == ERANGE) return "a double (magnitudes about 2.2e-308 to 1.8e308, or 0)";
  return "";
}

}  // namespace

void Config::set(const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError("--set", echo(assignment), "expected key=value");
  std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  key.erase(0, key.find_first_not_of(" \t"));
  key.erase(key.find_last_not_of(" \t") + 1);
  // The key's parts and the value's nesting are bounded as a config file's are.
  check_toml_bounds(key + " = " + value, "--set");
  toml::table parsed;
  try {
    parsed = toml::parse("value = " + value);
  } catch (const toml::parse_error&) {
    // A number TOML cannot hold is refused as such (not read as a string, then "not a string").
    if (const std::string range = number_out_of_range(value); !range.empty())
      throw InputError("--set", echo(key), echo(value) + " is out of the range of " + range);
    // Not a TOML value: take it as a string, so that --set attention.kind=l2 works unquoted.
    parsed = toml::table{{"value", value}};
  }
  const auto parts = split_dots(key);
  toml::table* t = &impl_->table;
  for (std::size_t k = 0; k + 1 < parts.size(); ++k) {
    toml::node* child = t->get(parts[k]);
    if (child == nullptr) {
      t->insert_or_assign(parts[k], toml::table{});
      child = t->get(parts[k]);
    }
    if (!child->is_table())
      throw InputError("--set", echo(key), "'" + echo(parts[k]) + "' is not a table");
    t = child->as_table();
  }
  parsed.get("value")->visit([&](auto&& node) { t->insert_or_assign(parts.back(), node); });
  impl_->overridden.insert(key);
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  // A key in the wrong table ("init.T" for "run.T"): the same last component wins.
  const auto last_of = [](const std::string& k) { return k.substr(k.find_last_of('.') + 1); };
  std::string best;
  std::size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    if (c != word && last_of(c) == last_of(word) && word.find('.') != std::string::npos) {
      const std::size_t dist = edit_distance(word, c);
      if (dist < best_d) best_d = dist, best = c;
    }
  }
  if (!best.empty()) return best;
  // Suggest only what is plausibly a typo: at most a third of the word (and at least 2 edits). The
  // distance is at least the difference of the lengths, so a candidate whose length is further off
  // is not compared: a hostile key of megabytes costs a pass over the candidates, not megabytes
  // times their lengths (a 2 MiB key took 2.7 s).
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  for (const auto& c : candidates) {
    const std::size_t gap =
        word.size() > c.size() ? word.size() - c.size() : c.size() - word.size();
    if (gap > limit) continue;
    const std::size_t dist = edit_distance(word, c);
    if (dist < best_d) best_d = dist, best = c;
  }
  if (best_d > limit) return "";
  return best;
}

namespace {

// The key a paper's (or POT's) name stands for, in the same table: "attention.beta" is
// "attention.scale" (the inverse temperature beta of the papers), "reg" and "eps" are "epsilon".
// Empty when the name is not one of these or the command has no such key.
struct KeySuggestion {
  std::string key;   // the key meant, "" when none
  std::string note;  // why, when the name is not a typo of it ("" otherwise)
};

KeySuggestion key_for_paper_name(const std::string& key, const std::set<std::string>& known) {
  struct Synonym {
    const char *name, *ours, *note;
  };
  static const Synonym names[]{{"beta", "scale", ""},
                               {"inverse_temperature", "scale", ""},
                               {"reg", "epsilon", ""},
                               {"eps", "epsilon", ""},
                               {"h", "dt", ""},
                               {"step", "dt", ""},
                               {"steps", "dt", "the number of steps is T / dt"},
                               {"n_steps", "dt", "the number of steps is T / dt"},
                               {"num_steps", "dt", "the number of steps is T / dt"},
                               {"num_heads", "heads", ""}};
  const std::size_t dot = key.find_last_of('.');
  const std::string table = dot == std::string::npos ? "" : key.substr(0, dot + 1);
  const std::string last = key.substr(dot == std::string::npos ? 0 : dot + 1);
  for (const Synonym& s : names)
    if (last == s.name && known.count(table + s.ours)) return {table + s.ours, s.note};
  return {};
}

}  // namespace

void Config::check_keys(const std::vector<std::string>& known) const {
  std::set<std::string> prefixes;
  for (const auto& k : known) {
    auto parts = split_dots(k);
    std::string p;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) prefixes.insert(p += (i ? "." : "") + parts[i]);
  }
  const std::set<std::string> known_set(known.begin(), known.end());
  std::function<void(const toml::table&, const std::string&)> walk =
      [&](const toml::table& t, const std::string& prefix) {
        for (const auto& [k, node] : t) {
          const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
          if (known_set.count(key)) {
            continue;
          } else if (prefixes.count(key) && node.is_table()) {
            walk(*node.as_table(), key);
          } else if (prefixes.count(key) && node.is_array_of_tables()) {
            for (const auto& item : *node.as_array()) walk(*item.as_table(), key);
          } else {
            const KeySuggestion synonym = key_for_paper_name(key, known_set);
            const std::string guess = synonym.key.empty() ? nearest(key, known) : synonym.key;
            const std::string note = synonym.note.empty() ? "" : " " + synonym.note;
            throw InputError(source_of(key), echo(key),
                             "unknown key" + (guess.empty() ? std::string() : " (did you mean '" + guess + "'?" + note + ")"));
          }
        }
      };
  walk(impl_->table, "");
}

bool Config::has(const std::string& key) const {
  return static_cast<bool>(impl_->table.at_path(key));
}

std::string Config::source_of(const std::string& key) const {
  if (impl_->overridden.count(key)) return "--set";
  // A table (or a key below a table) that --set created or wrote into: "--set" when nothing else
  // gave values (the defaults), else both sources.
  const std::string below = key + ".";
  for (const std::string& k : impl_->overridden)
    if (k.compare(0, below.size(), below) == 0 || key.compare(0, k.size() + 1, k + ".") == 0)
      return impl_->source == "defaults" ? "--set" : impl_->source + " and --set";
  return impl_->source;
}
const std::string& Config::source() const { return impl_->source; }

std::optional<double> Config::get_optional_double(const std::string& key) const {
  auto node = impl_->table.at_path(key);
  if (!node) return std::nullopt;
  auto v = as_number(*node.node());
  if (!v) throw InputError(source_of(key), key, std::string("must be a number, not ") + type_name(*node.node()));
  if (!std::isfinite(*v)) throw InputError(source_of(key), key, "must be finite");
  return v;
}

double Config::get_double(const std::string& key, double fallback) const {
  return get_optional_double(key).value_or(fallback);
}

std::int64_t Config::get_int(const std::string& key, std::int64_t fallback) const {
  auto node = impl_->table.at_path(key);
  if (!node) return fallback;
  if (auto v = node.as_integer()) return v->get();
  if (auto v = node.as_floating_point(); v && std::floor(v->get()) == v->get() && std::abs(v->get()) < 9e15)
    return static_cast<std::int64_t>(v->get());
  throw InputError(source_of(key), key, std::string("must be an integer, not ") + type_name(*node.node()));
}

int Config::get_int32(const std::string& key, int fallback) const {
  const std::int64_t v = get_int(key, fallback);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    throw InputError(source_of(key), key, "is " + std::to_string(v) + ", outside the range of a 32-bit integer");
  return static_cast<int>(v);
}

bool Config::get_bool(const std::string& key, bool fallback) const {
  auto node = impl_->table.at_path(key);
  if (!node) return fallback;
  if (auto v = node.as_boolean()) return v->get();
  throw InputError(source_of(key), key, std::string("must be true or false, not ") + type_name(*node.node()));
}

std::string Config::get_string(const std::string& key, const std::string& fallback,
                               const std::vector<std::string>& choices) const {
  auto node = impl_->table.at_path(key);
  std::string value = fallback;
  if (node) {
    auto v = node.as_string();
    if (!v) throw InputError(source_of(key), key, std::string("must be a string, not ") + type_name(*node.node()));
    value = v->get();
  }
  if (!choices.empty() && std::find(choices.begin(), choices.end(), value) == choices.end()) {
    std::string list;
    for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
    const std::string guess = nearest(value, choices);
    throw InputError(source_of(key), key,
                     "unknown value '" + echo(value) + "'" +
                         (guess.empty() ? "" : " (did you mean '" + guess + "'?)") + "; one of: " + list);
  }
  return value;
}

namespace {
// The keys that take a .npy path instead of an inline matrix: Q, K, V, W (of [attention] and of
// each [[layers]] table).
bool takes_matrix_file(const std::string& key) {
  const std::string last = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
  return last == "Q" || last == "K" || last == "V" || last == "W";
}

toml::array toml_rows(const Eigen::MatrixXd& m) {
  toml::array rows;
  for (Eigen::Index i = 0; i < m.rows(); ++i) {
    toml::array row;
    for (Eigen::Index j = 0; j < m.cols(); ++j) row.push_back(m(i, j));
    rows.push_back(std::move(row));
  }
  return rows;
}
}  // namespace

std::optional<Eigen::MatrixXd> Config::get_matrix(const std::string& key) const {
  auto node = impl_->table.at_path(key);
  if (!node) return std::nullopt;
  const std::string src = source_of(key);
  if (auto path = node.as_string(); path && takes_matrix_file(key)) {
    // A file named with --set (or in a config without a file) is relative to the working directory.
    const std::string file = src == "--set" ? path->get() : resolve_path(path->get());
    return Eigen::MatrixXd(read_points(file, key));  // names the file and key on any error
  }
  if (auto v = as_number(*node.node())) {
    if (!std::isfinite(*v)) throw InputError(src, key, "must be finite");
    return Eigen::MatrixXd::Constant(1, 1, *v);
  }
  const std::string not_a_matrix = std::string("must be a matrix: an array of rows, e.g. [[1.0, 0.0], [0.0, 1.0]]") +
                                   (takes_matrix_file(key) ? ", or the path of a .npy file" : "");
  const toml::array* rows = node.as_array();
  if (!rows || rows->empty()) throw InputError(src, key, not_a_matrix);
  const bool flat = rows->front().is_number();
  const std::size_t r = flat ? 1 : rows->size();
  const toml::array* first = flat ? rows : rows->front().as_array();
  if (!first || first->empty()) throw InputError(src, key, not_a_matrix);
  const std::size_t c = first->size();
  Eigen::MatrixXd m(r, c);
  for (std::size_t i = 0; i < r; ++i) {
    const toml::array* row = flat ? rows : (*rows)[i].as_array();
    if (!row) throw InputError(src, key, "row " + std::to_string(i) + " is not an array");
    if (row->size() != c)
      throw InputError(src, key, "row " + std::to_string(i) + " has " + std::to_string(row->size()) +
                                     " entries, row 0 has " + std::to_string(c));
    for (std::size_t j = 0; j < c; ++j) {
      auto v = as_number((*row)[j]);
      if (!v) throw InputError(src, key, "entry (" + std::to_string(i) + ", " + std::to_string(j) + ") is not a number");
      if (!std::isfinite(*v)) throw InputError(src, key, "entry (" + std::to_string(i) + ", " + std::to_string(j) + ") is not finite");
      m(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = *v;
    }
  }
  return m;
}

std::optional<Eigen::VectorXd> Config::get_vector(const std::string& key) const {
  auto m = get_matrix(key);
  if (!m) return std::nullopt;
  if (m->rows() != 1 && m->cols() != 1)
    throw InputError(source_of(key), key, "must be a list of numbers");
  return Eigen::Map<const Eigen::VectorXd>(m->data(), m->size()).eval();
}

std::vector<double> Config::get_double_list(const std::string& key, const std::vector<double>& fallback) const {
  auto v = get_vector(key);
  if (!v) return fallback;
  return std::vector<double>(v->data(), v->data() + v->size());
}

std::vector<std::int64_t> Config::get_int_list(const std::string& key,
                                               const std::vector<std::int64_t>& fallback) const {
  auto v = get_vector(key);
  if (!v) return fallback;
  std::vector<std::int64_t> out;
  for (double x : *v) {
    if (std::floor(x) != x) throw InputError(source_of(key), key, "must be a list of integers");
    // (the list was read as doubles: 2^63 and beyond would not convert)
    if (!(std::abs(x) < 9.2e18)) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", x);
      throw InputError(source_of(key), key, std::string("holds ") + text + ", outside the range of a 64-bit integer");
    }
    out.push_back(static_cast<std::int64_t>(x));
  }
  return out;
}

std::vector<Config> Config::get_tables(const std::string& key) const {
  auto node = impl_->table.at_path(key);
  if (!node) return {};
  if (!node.is_array_of_tables())
    throw InputError(source_of(key), key, "must be an array of tables ([[" + key + "]])");
  std::vector<Config> out;
  for (const auto& item : *node.as_array()) {
    Config c;
    c.impl_->table = *item.as_table();
    c.impl_->source = source_of(key);
    c.impl_->base_dir = impl_->base_dir;
    out.push_back(std::move(c));
  }
  return out;
}

void Config::inline_matrix_files() {
  for (const char* name : {"Q", "K", "V", "W"}) {
    const std::string key = std::string("attention.") + name;
    if (impl_->table.at_path(key).is_string())
      impl_->table["attention"].as_table()->insert_or_assign(name, toml_rows(*get_matrix(key)));
  }
  toml::array* layers = impl_->table["layers"].as_array();
  if (!layers || !layers->is_array_of_tables()) return;
  const std::vector<Config> readers = get_tables("layers");  // each with this source and folder
  for (std::size_t i = 0; i < readers.size(); ++i)
    for (const char* name : {"Q", "K", "V", "W"})
      if ((*layers)[i].as_table()->get(name) && (*layers)[i].as_table()->get(name)->is_string())
        (*layers)[i].as_table()->insert_or_assign(name, toml_rows(*readers[i].get_matrix(name)));
}

std::string Config::to_toml() const {
  std::ostringstream os;
  os << impl_->table;
  return os.str();
}

std::string Config::resolve_path(const std::string& path) const {
  const std::filesystem::path p(path);
  if (p.is_absolute() || impl_->base_dir.empty()) return path;
  return (std::filesystem::path(impl_->base_dir) / p).string();
}

}  // namespace tokenflow
