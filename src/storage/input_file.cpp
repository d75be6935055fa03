// Bounded reads of input files (tokenflow/input_file.hpp).
#include "tokenflow/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <map>
#include <utility>

#include "tokenflow/error.hpp"

namespace tokenflow {

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::numeric_limits<std::uint64_t>::max();
  const auto p = static_cast<std::uint64_t>(pages), s = static_cast<std::uint64_t>(page);
  if (p > std::numeric_limits<std::uint64_t>::max() / s) return std::numeric_limits<std::uint64_t>::max();
  return p * s;
}

std::string format_bytes(double bytes) {
  static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (!std::isfinite(bytes)) return "an unbounded amount";
  int u = 0;
  while (bytes >= 1024.0 && u < 6) bytes /= 1024.0, ++u;
  if (u >= 6 && bytes >= 1024.0) return "more than 1024 EiB";
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.3g %s", bytes, units[u]);
  return buf;
}

std::string shorten_number(const std::string& digits) {
  constexpr std::size_t kKeep = 20;
  if (digits.size() <= kKeep + 3) return digits;
  return digits.substr(0, kKeep) + "... (" + std::to_string(digits.size()) + " characters)";
}

namespace {

std::mutex& inputs_mutex() {
  static std::mutex m;
  return m;
}
using FileId = std::pair<std::uint64_t, std::uint64_t>;  // (device, inode)

// Every input file read, by (device, inode). One record a file, its path a plain string (a
// std::filesystem::path also keeps its parsed components, about 250 bytes more a file): a dataset
// of 10^5 pair files costs about 200 bytes a file here (measured with heaptrack).
std::map<FileId, InputFileRead>& inputs() {
  static std::map<FileId, InputFileRead> records;
  return records;
}

// Whether the path a record was read through still names the file it read. A file deleted after
// it was read frees its inode, which the file system may give to the next file it creates (an
// output folder's manifest, rewritten by rename, gave its inode to the next run's summary.json):
// that file is a new one, not the input.
bool still_names(const InputFileRead& r) {
  struct stat st {};
  return ::stat(r.path.c_str(), &st) == 0 && FileId(st.st_dev, st.st_ino) == FileId(r.device, r.inode);
}

void remember_input(const struct stat& st, const std::filesystem::path& path, const std::string& key) {
  std::lock_guard lock(inputs_mutex());
  const FileId id(static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino));
  const auto [at, added] = inputs().try_emplace(id);
  // A new file, or the inode of a deleted input, now another file's.
  if (added || !still_names(at->second)) at->second = InputFileRead{id.first, id.second, path.string(), key};
}

const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a fifo";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

[[noreturn]] void refuse_type(const std::filesystem::path& path, const std::string& key, mode_t mode) {
  throw InputError(path.string(), key, std::string("is not a regular file (") + file_type_name(mode) + ")");
}

// An open descriptor of the regular file `path` (closed by the destructor) and its size.
class InputFd {
 public:
  InputFd(const std::filesystem::path& path, const std::string& key) {
    // stat first: a device or a fifo is refused without opening it (opening a fifo for reading
    // blocks until a writer comes; opening a device may have effects).
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      throw InputError(path.string(), key, std::string("cannot open the file: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) refuse_type(path, key, st.st_mode);
    // O_NONBLOCK: if the path was replaced by a fifo since the stat, the open returns at once
    // (and fstat below refuses it) instead of waiting for a writer.
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd_ < 0)
      throw InputError(path.string(), key, std::string("cannot open the file: ") + std::strerror(errno));
    if (::fstat(fd_, &st) != 0) {
      const int e = errno;
      ::close(fd_);
      throw InputError(path.string(), key, std::string("cannot open the file: ") + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      refuse_type(path, key, st.st_mode);
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
    remember_input(st, path, key);
    // A regular file: blocking reads from here on (O_NONBLOCK only guarded the open).
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  }
  ~InputFd() { ::close(fd_); }
  InputFd(const InputFd&) = delete;
  InputFd& operator=(const InputFd&) = delete;

  std::uint64_t size() const { return size_; }
  // Reads up to `count` bytes into out (from the start of the file); returns how many were read.
  std::size_t read(char* out, std::size_t count, const std::filesystem::path& path, const std::string& key) const {
    std::size_t done = 0;
    while (done < count) {
      const ssize_t r = ::read(fd_, out + done, count - done);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw InputError(path.string(), key, std::string("cannot read the file: ") + std::strerror(errno));
      if (r == 0) break;
      done += static_cast<std::size_t>(r);
    }
    return done;
  }

 private:
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

}  // namespace

std::string read_input_file(const std::filesystem::path& path, const std::string& key, std::uint64_t max_bytes,
                            const std::string& what) {
  const InputFd fd(path, key);
  if (fd.size() > max_bytes)
    throw InputError(path.string(), key,
                     "is " + format_bytes(static_cast<double>(fd.size())) + ", larger than the " +
                         format_bytes(static_cast<double>(max_bytes)) + " allowed for " + what);
  if (fd.size() > std::numeric_limits<std::size_t>::max() / 2)
    throw InputError(path.string(), key, "is too large to read");
  std::string bytes(static_cast<std::size_t>(fd.size()), '\0');
  // Exactly the size fstat reported: bytes appended meanwhile are not read, a file cut short is
  // refused (it was being rewritten; what was read is not one version of it).
  if (fd.read(bytes.data(), bytes.size(), path, key) != bytes.size())
    throw InputError(path.string(), key, "changed while it was read (it became shorter); try again");
  return bytes;
}

std::string read_input_prefix(const std::filesystem::path& path, const std::string& key, std::size_t count) {
  const InputFd fd(path, key);
  std::string bytes(static_cast<std::size_t>(std::min<std::uint64_t>(count, fd.size())), '\0');
  bytes.resize(fd.read(bytes.data(), bytes.size(), path, key));
  return bytes;
}

bool any_input_file_read() {
  std::lock_guard lock(inputs_mutex());
  return !inputs().empty();
}

std::optional<InputFileRead> input_file_named_by(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
  std::lock_guard lock(inputs_mutex());
  const auto at = inputs().find(FileId(st.st_dev, st.st_ino));
  if (at == inputs().end() || !still_names(at->second)) return std::nullopt;
  return at->second;
}

}  // namespace tokenflow
