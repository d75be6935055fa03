// The one memory estimate checked before allocating (tokenflow/memory_budget.hpp).
#include "tokenflow/memory_budget.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"

namespace tokenflow {

namespace {

constexpr std::uint64_t kUnlimited = std::numeric_limits<std::uint64_t>::max();

// "123", "64M", "2.5G", "1T" (powers of 1024) -> bytes; 0 when the text is not such a size.
std::uint64_t parse_size(const std::string& text) {
  std::istringstream in(text);
  long double value = 0;
  if (!(in >> value) || !(value > 0) || !std::isfinite(static_cast<double>(value))) return 0;
  std::string unit;
  in >> unit;
  long double scale = 1;
  if (!unit.empty()) {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0])));
    const std::string rest = unit.substr(1);
    if (!(rest.empty() || rest == "B" || rest == "iB" || rest == "b")) return 0;
    if (u == 'K') scale = 1024.0L;
    else if (u == 'M') scale = 1024.0L * 1024;
    else if (u == 'G') scale = 1024.0L * 1024 * 1024;
    else if (u == 'T') scale = 1024.0L * 1024 * 1024 * 1024;
    else if (u != 'B') return 0;
  }
  const long double bytes = value * scale;
  return bytes >= static_cast<long double>(kUnlimited) ? kUnlimited : static_cast<std::uint64_t>(bytes);
}

// The first line of a cgroup file as a byte count ("max" or unreadable: unlimited).
std::uint64_t cgroup_value(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line) || line.empty() || line == "max") return kUnlimited;
  std::uint64_t v = 0;
  for (const char c : line) {
    if (c < '0' || c > '9') return kUnlimited;
    if (v > (kUnlimited - 9) / 10) return kUnlimited;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v == 0 ? kUnlimited : v;
}

// The memory limit of this process's control group: /proc/self/cgroup names its path ("0::/x" in
// v2, "N:memory:/x" in v1) under /sys/fs/cgroup.
std::uint64_t cgroup_limit() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  std::uint64_t limit = kUnlimited;
  while (std::getline(in, line)) {
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    if (controllers.empty()) {  // v2: every ancestor's memory.max bounds it too
      for (std::string p = path;; p = p.substr(0, p.rfind('/'))) {
        limit = std::min(limit, cgroup_value("/sys/fs/cgroup" + p + "/memory.max"));
        if (p.empty() || p == "/") break;
      }
    } else if (controllers.find("memory") != std::string::npos) {
      limit = std::min(limit, cgroup_value("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes"));
    }
  }
  // A v1 "no limit" is a huge page-aligned number, above any machine's memory: the min takes care.
  return limit;
}

std::uint64_t rlimit_bytes(int resource) {
  struct rlimit r {};
  if (::getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return kUnlimited;
  return static_cast<std::uint64_t>(r.rlim_cur);
}

struct Limit {
  std::uint64_t bytes = kUnlimited;
  std::string text;
};

Limit compute_limit() {
  Limit l{physical_memory_bytes(), ""};
  l.text = "this machine's " + format_bytes(static_cast<double>(l.bytes)) + " of memory";
  const std::uint64_t group = cgroup_limit();
  if (group < l.bytes) l = {group, "the " + format_bytes(static_cast<double>(group)) + " memory limit of this process's control group"};
  const std::uint64_t as = std::min(rlimit_bytes(RLIMIT_AS), rlimit_bytes(RLIMIT_DATA));
  if (as < l.bytes) l = {as, "the " + format_bytes(static_cast<double>(as)) + " memory limit of this process (ulimit -v)"};
  if (const char* env = std::getenv("TOKENFLOW_MEMORY_LIMIT"); env != nullptr && *env != '\0') {
    const std::uint64_t bytes = parse_size(env);
    if (bytes == 0)
      throw InputError("", "TOKENFLOW_MEMORY_LIMIT",
                       "is not a size (bytes, or a number with K, M, G or T): " + std::string(env).substr(0, 80));
    if (bytes < l.bytes) l = {bytes, "the " + format_bytes(static_cast<double>(bytes)) + " memory limit set by TOKENFLOW_MEMORY_LIMIT"};
  }
  return l;
}

const Limit& limit() {
  static const Limit l = compute_limit();
  return l;
}

}  // namespace

std::uint64_t memory_limit_bytes() { return limit().bytes; }

std::string memory_limit_text() { return limit().text; }

bool fits_in_memory(long double bytes) {
  return bytes >= 0 && bytes <= static_cast<long double>(memory_limit_bytes());
}

void check_memory(long double bytes, const std::string& what, const std::string& source, const std::string& key,
                  const std::string& advice) {
  if (fits_in_memory(bytes)) return;
  throw InputError(source, key,
                   what + " needs " + format_bytes(static_cast<double>(bytes)) + ", more than " + memory_limit_text() +
                       (advice.empty() ? "" : "; " + advice));
}

}  // namespace tokenflow
