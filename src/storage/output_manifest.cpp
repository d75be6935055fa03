// DIR/.tokenflow-outputs: reading, writing, and the records of files (tokenflow/output_manifest.hpp).
#include "tokenflow/output_manifest.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <sstream>

#include "tokenflow/durable_file.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/records.hpp"

namespace tokenflow {
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kManifestMaxBytes = std::uint64_t{64} << 20;

bool bookkeeping_name(const std::string& top) {
  return top == kManifestFileName || top == ".tokenflow-lock" || top.rfind(".staging-", 0) == 0 ||
         top.rfind(".rollback-", 0) == 0 || top.rfind(std::string(kManifestFileName) + ".tmp-", 0) == 0;
}

std::string first_component(const std::string& path) { return path.substr(0, path.find('/')); }

[[noreturn]] void bad_line(const std::string& file, const std::string& line, const std::string& why) {
  throw InputError(file, "--out", "line \"" + line.substr(0, 80) + "\" " + why + " (a manifest tokenflow writes has none)");
}

// "SIZE MTIME HASH PATH" of a file record.
std::pair<std::string, FileRecord> parse_file_record(const std::string& rest, const std::string& file,
                                                     const std::string& line) {
  FileRecord r;
  unsigned long long size = 0, hash = 0;
  long long mtime = 0;
  int used = 0;
  if (std::sscanf(rest.c_str(), "%llu %lld %16llx %n", &size, &mtime, &hash, &used) != 3 || used <= 0)
    bad_line(file, line, "is not a file record");
  r.size = size;
  r.mtime_ns = mtime;
  r.hash = hash;
  return {rest.substr(static_cast<std::size_t>(used)), r};
}

}  // namespace

bool is_output_path(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.back() == '/') return false;
  for (const char c : path)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  if (bookkeeping_name(first_component(path))) return false;
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = path.find('/', start);
    const std::string part = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (end == std::string::npos) return true;
    start = end + 1;
  }
}

OutputManifest parse_output_manifest(const std::string& text, const std::string& file) {
  OutputManifest m;
  std::istringstream in(text);
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (first) {
      first = false;
      if (line == "tokenflow-outputs 2") continue;
      throw InputError(file, "--out",
                       "is not a manifest tokenflow wrote (it lacks the line `tokenflow-outputs 2`), so tokenflow "
                       "leaves it and every file in this folder alone: move it away or choose another --out");
    }
    const std::size_t space = line.find(' ');
    const std::string kind = line.substr(0, space), rest = space == std::string::npos ? "" : line.substr(space + 1);
    if (kind == "command" && !rest.empty()) {
      m.command = rest;
      continue;
    }
    std::string path = rest;
    FileRecord record;
    if (kind == "file") std::tie(path, record) = parse_file_record(rest, file, line);
    else if (kind != "dir" && kind != "inplace") bad_line(file, line, "is not a record");
    if (!is_output_path(path)) bad_line(file, line, "names a path outside this folder or one of tokenflow's own");
    if (kind == "file") m.files[path] = record;
    else if (kind == "dir") m.dirs.insert(path);
    else m.in_place.insert(path);
  }
  if (first)
    throw InputError(file, "--out",
                     "is empty, so not a manifest tokenflow wrote: tokenflow leaves it and every file in this folder "
                     "alone; move it away or choose another --out");
  return m;
}

std::string output_manifest_text(const OutputManifest& m) {
  std::string text =
      "# tokenflow: what the last run wrote in this folder. A run into this folder replaces exactly these\n"
      "# files (a file changed since, or any other file here, is never replaced or removed).\n"
      "tokenflow-outputs 2\n";
  if (!m.command.empty()) text += "command " + m.command + "\n";
  for (const auto& d : m.dirs) text += "dir " + d + "\n";
  char head[96];
  for (const auto& [path, r] : m.files) {
    std::snprintf(head, sizeof head, "file %" PRIu64 " %" PRId64 " %016" PRIx64 " ", r.size, r.mtime_ns, r.hash);
    text += head + path + "\n";
  }
  for (const auto& p : m.in_place) text += "inplace " + p + "\n";
  return text;
}

OutputManifest read_output_manifest(const fs::path& dir) {
  const fs::path path = dir / kManifestFileName;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return {};
  if (!fs::is_regular_file(fs::symlink_status(path, ec)))
    throw InputError(path.string(), "--out", "is not a manifest tokenflow wrote (not a regular file)");
  return parse_output_manifest(read_input_file(path, "--out", kManifestMaxBytes, "a manifest"), path.string());
}

void write_output_manifest(const fs::path& dir, const OutputManifest& manifest, const fs::path& temp_dir) {
  replace_file_atomically(dir / kManifestFileName, output_manifest_text(manifest), temp_dir);
}

std::optional<FileRecord> record_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return std::nullopt;
  }
  FileRecord r;
  r.size = static_cast<std::uint64_t>(st.st_size);
  r.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  r.hash = fnv1a64(nullptr, 0);
  std::string buffer(std::size_t{1} << 20, '\0');
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    r.hash = fnv1a64(buffer.data(), static_cast<std::size_t>(n), r.hash);
  }
  ::close(fd);
  return r;
}

bool file_matches(const fs::path& path, const FileRecord& record) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (static_cast<std::uint64_t>(st.st_size) != record.size) return false;
  const std::int64_t mtime = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (mtime == record.mtime_ns) return true;
  const auto now = record_file(path);
  return now && now->size == record.size && now->hash == record.hash;
}

}  // namespace tokenflow
