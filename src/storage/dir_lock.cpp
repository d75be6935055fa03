// One tokenflow process at a time in an output folder (tokenflow/dir_lock.hpp).
#include "tokenflow/dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "tokenflow/error.hpp"

namespace tokenflow {
namespace fs = std::filesystem;

namespace {

// The pid of the process holding an flock on the file `fd` names, from /proc/locks ("" when it
// cannot be told: no /proc, or the holder let go meanwhile). A line reads
//   "3: FLOCK  ADVISORY  WRITE 1234 fe:00:408224 0 EOF"   (pid, major:minor:inode; "->" for waiters)
std::string holder_pid(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return {};
  std::ifstream locks("/proc/locks");
  std::string line;
  while (std::getline(locks, line)) {
    char kind[16] = {}, arrow[4] = {};
    long long pid = 0;
    unsigned major = 0, minor = 0;
    unsigned long long inode = 0;
    // Blocked waiters carry "->" before their kind; we lock without waiting, so they are not ours.
    if (std::sscanf(line.c_str(), "%*d: %3[-]", arrow) == 1) continue;
    if (std::sscanf(line.c_str(), "%*d: %15s %*s %*s %lld %x:%x:%llu", kind, &pid, &major, &minor, &inode) != 5)
      continue;
    if (std::strcmp(kind, "FLOCK") == 0 && inode == static_cast<unsigned long long>(st.st_ino) &&
        major == ::major(st.st_dev) && minor == ::minor(st.st_dev) && pid > 0)
      return std::to_string(pid);
  }
  return {};
}

[[noreturn]] void refuse_busy(const fs::path& dir, const std::string& key, int fd, const std::string& pid) {
  ::close(fd);
  throw InputError("", key,
                   dir.string() + " is in use by another tokenflow process" + (pid.empty() ? "" : " (pid " + pid + ")") +
                       "; wait for it to finish or choose another " + key);
}

// Takes the flock on fd without waiting: 0, or the errno of a failure other than a holder. When
// another process holds the lock it is refused naming that process (holder_pid); a holder that
// let go between the try and the read of /proc/locks (it finished) is no reason to refuse, so the
// lock is tried again, and refused without a pid only when none can be told for 100 ms.
int lock_or_refuse(const fs::path& dir, const std::string& key, int fd) {
  for (int attempt = 0;; ++attempt) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
    const int e = errno;
    if (e == EINTR) continue;
    if (e != EWOULDBLOCK) return e;
    const std::string pid = holder_pid(fd);
    if (!pid.empty() || attempt >= 20) refuse_busy(dir, key, fd, pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool same_inode(int fd, const fs::path& path) {
  struct stat held {}, named {};
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
         held.st_ino == named.st_ino;
}

}  // namespace

DirLock::DirLock(fs::path dir, std::string key) : dir_(std::move(dir)), key_(std::move(key)) {
  if (dir_.empty()) throw InputError("", key_, "an output directory is required");
  for (;;) {
    std::error_code ec;
    const auto status = fs::status(dir_, ec);
    if (fs::exists(status)) {
      if (!fs::is_directory(status)) throw InputError("", key_, dir_.string() + " is not a directory");
    } else {
      created_dir_ = fs::create_directories(dir_, ec) || created_dir_;
      if (ec) throw InputError("", key_, "cannot create " + dir_.string() + ": " + ec.message());
    }
    fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY);
    if (fd_ < 0) {
      const int e = errno;
      if (e == ENOENT) continue;  // removed by the process that had created it: make it again
      if (created_dir_) fs::remove(dir_, ec);
      throw InputError("", key_, "cannot open " + dir_.string() + " to lock it: " + std::strerror(e));
    }
    if (const int e = lock_or_refuse(dir_, key_, fd_); e != 0) {
      ::close(fd_);
      if (created_dir_) fs::remove(dir_, ec);
      throw InputError("", key_, "cannot lock " + dir_.string() + ": " + std::strerror(e));
    }
    if (same_inode(fd_, dir_)) break;
    ::close(fd_);  // the folder we locked is gone (its creator removed it when empty): once more
    fd_ = -1;
  }
}

DirLock::DirLock(DirLock&& other) noexcept
    : dir_(std::move(other.dir_)), key_(std::move(other.key_)), fd_(other.fd_), created_dir_(other.created_dir_) {
  other.fd_ = -1;
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  std::error_code ec;
  if (created_dir_) fs::remove(dir_, ec);  // only when empty; still locked, so no run is inside
  ::close(fd_);
}

}  // namespace tokenflow
