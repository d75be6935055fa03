// Config keys written once: help text, Markdown, checked reads and TOML values (tokenflow/schema.hpp).
#include "tokenflow/schema.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "tokenflow/error.hpp"

namespace tokenflow {

namespace {

// 1048576 rather than 1.04858e+06: integers (all bounds of integer keys) are written in full.
std::string number_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{:g}", v);
}

}  // namespace

const char* key_type_name(KeyType t) {
  switch (t) {
    case KeyType::integer: return "integer";
    case KeyType::number: return "number";
    case KeyType::boolean: return "boolean";
    case KeyType::string: return "string";
    case KeyType::number_list: return "list of numbers";
    case KeyType::integer_list: return "list of integers";
    case KeyType::matrix: return "matrix";
    case KeyType::vector: return "vector";
    case KeyType::path: return "path";
  }
  return "";
}

namespace {

// "must be positive (got -1)": the requirement and the offending value.
[[noreturn]] void out_of_bounds(const Config& c, const KeySpec& spec, const std::string& got) {
  throw InputError(c.source_of(spec.key), spec.key, spec.bounds.requirement() + " (got " + got + ")");
}

// The section of a dotted key ("" for a top-level key) and the rest.
std::pair<std::string, std::string> split_section(const std::string& key) {
  const auto dot = key.find('.');
  if (dot == std::string::npos) return {"", key};
  return {key.substr(0, dot), key.substr(dot + 1)};
}

}  // namespace

std::string key_range_text(const KeySpec& spec) {
  if (!spec.choices.empty()) {
    std::string s;
    for (const auto& choice : spec.choices) s += (s.empty() ? "" : " | ") + choice;
    return s;
  }
  if (spec.type != KeyType::integer && spec.type != KeyType::number && spec.type != KeyType::number_list &&
      spec.type != KeyType::integer_list)
    return "";
  const Bounds& b = spec.bounds;
  if (std::isinf(b.lo) && std::isinf(b.hi)) return "";
  return std::string(b.lo_open ? "(" : "[") + (std::isinf(b.lo) ? "-inf" : number_text(b.lo)) + ", " +
         (std::isinf(b.hi) ? "inf" : number_text(b.hi)) + (b.hi_open ? ")" : "]");
}

std::string Bounds::requirement() const {
  const bool no_lo = std::isinf(lo), no_hi = std::isinf(hi);
  if (no_lo && no_hi) return "must be finite";
  if (no_hi && lo == 0.0) return lo_open ? "must be positive" : "must be >= 0";
  if (no_hi) return std::string(lo_open ? "must be > " : "must be at least ") + number_text(lo);
  if (no_lo) return std::string(hi_open ? "must be < " : "must be at most ") + number_text(hi);
  return std::string("must be in ") + (lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) +
         (hi_open ? ")" : "]");
}

std::vector<std::string> key_names(const std::vector<KeySpec>& keys) {
  std::vector<std::string> names;
  for (const auto& k : keys) names.push_back(k.key);
  return names;
}

std::string keys_help(const std::vector<KeySpec>& keys, const std::string& title) {
  std::string out = title + "\n";
  std::string section = "-";
  for (const auto& k : keys) {
    if (k.hidden) continue;
    const auto [name_section, name] = split_section(k.key);
    if (name_section != section) {
      section = name_section;
      // [[layers]] is an array of tables: each entry holds these keys.
      if (!section.empty()) out += section == "layers" ? "  [[layers]]\n" : "  [" + section + "]\n";
    }
    // "    n = 16                     size of the first text; [1, 100000] tokens"
    const std::string line = fmt::format("    {} = {}", name, k.default_text);
    const std::string range = key_range_text(k);
    std::string doc = k.doc;
    if (!range.empty() || !k.unit.empty()) doc += ";";
    if (!range.empty()) doc += " " + range;
    if (!k.unit.empty()) doc += " " + k.unit;
    out += fmt::format("{:<30} {}\n", line, doc);
  }
  return out;
}

std::string keys_markdown(const std::vector<KeySpec>& keys) {
  std::string out = "| key | type | default | range | unit | meaning |\n| --- | --- | --- | --- | --- | --- |\n";
  for (const auto& k : keys) {
    if (k.hidden) continue;
    std::string range = key_range_text(k);
    std::replace(range.begin(), range.end(), '|', '/');
    std::string doc = k.doc;
    std::string::size_type at = 0;
    while ((at = doc.find('|', at)) != std::string::npos) doc.replace(at, 1, "\\|"), at += 2;
    const std::string default_cell = k.default_text.empty() ? "(none)" : fmt::format("`{}`", k.default_text);
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", k.key, key_type_name(k.type), default_cell, range, k.unit, doc);
  }
  return out;
}

double read_number(const Config& c, const KeySpec& spec, double fallback) {
  const double v = c.get_double(spec.key, fallback);
  if (c.has(spec.key) && !spec.bounds.contains(v)) {
    // inf and nan fail an open infinite end: "must be >= 0 (got inf)" would read as a contradiction.
    const std::string requirement = spec.bounds.requirement();
    if (std::isinf(v) && requirement != "must be finite")
      throw InputError(c.source_of(spec.key), spec.key, requirement + " and finite (got " + fmt::format("{}", v) + ")");
    out_of_bounds(c, spec, fmt::format("{}", v));
  }
  return v;
}

std::int64_t read_integer(const Config& c, const KeySpec& spec, std::int64_t fallback) {
  const std::int64_t v = c.get_int(spec.key, fallback);
  if (c.has(spec.key) && !spec.bounds.contains(static_cast<double>(v))) out_of_bounds(c, spec, std::to_string(v));
  return v;
}

int read_int32(const Config& c, const KeySpec& spec, int fallback) {
  const int v = c.get_int32(spec.key, fallback);
  if (c.has(spec.key) && !spec.bounds.contains(static_cast<double>(v))) out_of_bounds(c, spec, std::to_string(v));
  return v;
}

std::string read_string(const Config& c, const KeySpec& spec, const std::string& fallback) {
  return c.get_string(spec.key, fallback, spec.choices);
}

std::string toml_number(double v) {
  std::string s = fmt::format("{:.17g}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

void read_field(const Config& c, const KeySpec& spec, FieldRef field) {
  std::visit(
      [&](auto f) {
        using F = decltype(f);
        if constexpr (std::is_same_v<F, std::string*>) {
          *f = read_string(c, spec, *f);
        } else if constexpr (std::is_same_v<F, int*>) {
          *f = read_int32(c, spec, *f);
        } else if constexpr (std::is_same_v<F, long*>) {
          *f = static_cast<long>(read_integer(c, spec, *f));
        } else if constexpr (std::is_same_v<F, std::uint64_t*>) {
          *f = static_cast<std::uint64_t>(read_integer(c, spec, static_cast<std::int64_t>(*f)));
        } else if constexpr (std::is_same_v<F, double*>) {
          *f = read_number(c, spec, *f);
        } else if constexpr (std::is_same_v<F, bool*>) {
          *f = c.get_bool(spec.key, *f);
        } else if constexpr (std::is_same_v<F, DtypeField>) {
          *f.float32 = read_string(c, spec, *f.float32 ? "f32" : "f64") == "f32";
        } else {
          static_assert(std::is_same_v<F, PairField>);
          const auto pair = c.get_double_list(spec.key, {*f.lo, *f.hi});
          if (pair.size() != 2 || !spec.bounds.contains(pair[0]) || !spec.bounds.contains(pair[1]) || pair[1] < pair[0])
            throw InputError(c.source_of(spec.key), spec.key,
                             "must be [lo, hi] with lo <= hi, both " + spec.bounds.requirement().substr(8));
          *f.lo = pair[0];
          *f.hi = pair[1];
        }
      },
      field);
}

std::string field_toml(const KeySpec& spec, FieldRef field) {
  const std::string name = split_section(spec.key).second;
  // A non-finite number (a key whose default is inf, meaning off: model.marginal_penalty) is written
  // as a comment: Config refuses non-finite numbers, and the key's absence reads as its default.
  if (auto* const* d = std::get_if<double*>(&field); d && !std::isfinite(**d))
    return fmt::format("# {} = {}", name, toml_number(**d));
  const std::string value = std::visit(
      [](auto f) -> std::string {
        using F = decltype(f);
        // fmt rather than operator+: GCC 12 reports a false -Wrestrict on "[" + std::string&&.
        if constexpr (std::is_same_v<F, std::string*>) return fmt::format("\"{}\"", *f);  // one of its choices
        else if constexpr (std::is_same_v<F, double*>) return toml_number(*f);
        else if constexpr (std::is_same_v<F, bool*>) return *f ? "true" : "false";
        else if constexpr (std::is_same_v<F, DtypeField>) return *f.float32 ? "\"f32\"" : "\"f64\"";
        else if constexpr (std::is_same_v<F, PairField>) return fmt::format("[{}, {}]", toml_number(*f.lo), toml_number(*f.hi));
        else return std::to_string(*f);
      },
      field);
  return fmt::format("{} = {}", name, value);
}

}  // namespace tokenflow
