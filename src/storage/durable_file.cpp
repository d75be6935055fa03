// Durable output files (tokenflow/durable_file.hpp) and the registry of a run's uncommitted
// paths (tokenflow/run_files.hpp).
#include "tokenflow/durable_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <sys/random.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "tokenflow/run_files.hpp"

namespace tokenflow {
namespace fs = std::filesystem;

namespace {
std::string errno_text(int e) { return std::strerror(e); }
}  // namespace

DurableFile::DurableFile(const fs::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw WriteError(path_, errno_text(errno));
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFile::write(const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    // At most 1 GiB per call: Linux writes at most 0x7ffff000 bytes at once anyway.
    const ssize_t w = ::write(fd_, p, std::min<std::size_t>(n, std::size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw WriteError(path_, errno_text(errno));
    }
    if (w == 0) throw WriteError(path_, "the system accepted no bytes");
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void DurableFile::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    throw WriteError(path_, errno_text(e));
  }
  if (::close(fd) != 0) throw WriteError(path_, errno_text(errno));
}

void write_file_durably(const fs::path& path, std::string_view bytes) {
  DurableFile f(path);
  f.write(bytes);
  f.close();
}

void sync_directory(const fs::path& dir) {
  const fs::path d = dir.empty() ? fs::path(".") : dir;
  const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw WriteError(d, errno_text(errno));
  // Some file systems refuse fsync on a folder (EINVAL): nothing more can be done there.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    const int e = errno;
    ::close(fd);
    throw WriteError(d, errno_text(e));
  }
  ::close(fd);
}

std::string random_token() {
  unsigned char bytes[16];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<std::size_t>(n);
  }
  static const char digits[] = "0123456789abcdef";
  std::string token;
  for (const unsigned char b : bytes) {
    token += digits[b >> 4];
    token += digits[b & 15];
  }
  return token;
}

void rename_no_replace(const fs::path& from, const fs::path& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return;
  const int e = errno;
  if (e != EINVAL && e != ENOSYS) throw WriteError(to, errno_text(e));
  // A file system without RENAME_NOREPLACE: link(2) never replaces; a folder cannot be linked, so
  // it is checked first (the output folder's lock keeps other tokenflow processes out meanwhile).
  struct stat st {};
  if (::lstat(from.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    if (::link(from.c_str(), to.c_str()) != 0) throw WriteError(to, errno_text(errno));
    if (::unlink(from.c_str()) != 0) throw WriteError(from, errno_text(errno));
    return;
  }
  if (::lstat(to.c_str(), &st) == 0) throw WriteError(to, errno_text(EEXIST));
  if (::rename(from.c_str(), to.c_str()) != 0) throw WriteError(to, errno_text(errno));
}

void replace_file_atomically(const fs::path& path, std::string_view bytes, const fs::path& temp_dir) {
  const fs::path folder = temp_dir.empty() ? path.parent_path() : temp_dir;
  const fs::path tmp =
      folder / (path.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" + random_token());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw WriteError(path, errno_text(errno));  // not created: nothing of ours to remove
  ::close(fd);
  run_files::Scoped registered(tmp);
  try {
    write_file_durably(tmp, bytes);
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) throw WriteError(path, ec.message());
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  sync_directory(path.has_parent_path() ? path.parent_path() : fs::path("."));
}

void sync_tree(const fs::path& root) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(root, ec))) {
    const int fd = ::open(root.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) throw WriteError(root, errno_text(errno));
    if (::fsync(fd) != 0) {
      const int e = errno;
      ::close(fd);
      throw WriteError(root, errno_text(e));
    }
    ::close(fd);
    return;
  }
  for (const auto& entry : fs::directory_iterator(root)) {
    const auto status = entry.symlink_status();
    if (fs::is_directory(status) || fs::is_regular_file(status)) sync_tree(entry.path());
  }
  sync_directory(root);
}

// ---- run_files ----------------------------------------------------------------------------------

namespace run_files {
namespace {
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::vector<fs::path>& paths() {
  static std::vector<fs::path> p;
  return p;
}
std::vector<int>& children() {
  static std::vector<int> c;
  return c;
}
}  // namespace

void add(const fs::path& path) {
  std::lock_guard lock(registry_mutex());
  paths().push_back(path);
}

void forget(const fs::path& path) {
  std::lock_guard lock(registry_mutex());
  auto& p = paths();
  const auto it = std::find(p.rbegin(), p.rend(), path);
  if (it != p.rend()) p.erase(std::next(it).base());
}

void add_child(int pid) {
  std::lock_guard lock(registry_mutex());
  children().push_back(pid);
}

void forget_child(int pid) {
  std::lock_guard lock(registry_mutex());
  auto& c = children();
  c.erase(std::remove(c.begin(), c.end(), pid), c.end());
}

void signal_children(int sig) {
  std::lock_guard lock(registry_mutex());
  for (int pid : children()) ::kill(static_cast<pid_t>(pid), sig);
}

void remove_registered() {
  std::lock_guard lock(registry_mutex());
  for (int pid : children()) ::kill(static_cast<pid_t>(pid), SIGTERM);
  for (const auto& p : paths()) {
    std::error_code ec;
    fs::remove_all(p, ec);
  }
  paths().clear();
}

std::mutex& commit_lock() {
  static std::mutex m;
  return m;
}

}  // namespace run_files
}  // namespace tokenflow
