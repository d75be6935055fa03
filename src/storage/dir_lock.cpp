// One tokenflow process at a time in an output folder (tokenflow/dir_lock.hpp).
#include "tokenflow/dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "tokenflow/error.hpp"
#include "tokenflow/run_files.hpp"

namespace tokenflow {
namespace fs = std::filesystem;

namespace {

// The pid the holder wrote into the lock file ("" while it has not written it yet).
std::string holder_pid(int fd) {
  char text[32] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  std::string pid = n > 0 ? std::string(text, static_cast<std::size_t>(n)) : std::string();
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  return pid.find_first_not_of("0123456789") == std::string::npos ? pid : std::string();
}

[[noreturn]] void refuse_busy(const fs::path& dir, const std::string& key, int fd) {
  std::string pid;
  // The holder writes its pid right after it takes the lock: give it a moment.
  for (int attempt = 0; attempt < 50 && pid.empty(); ++attempt) {
    pid = holder_pid(fd);
    if (pid.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::close(fd);
  throw InputError("", key,
                   dir.string() + " is in use by another tokenflow process" + (pid.empty() ? "" : " (pid " + pid + ")") +
                       "; wait for it to finish or choose another " + key);
}

bool same_inode(int fd, const fs::path& path) {
  struct stat held {}, named {};
  return ::fstat(fd, &held) == 0 && ::lstat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
         held.st_ino == named.st_ino;
}

}  // namespace

DirLock::DirLock(fs::path dir, std::string key) : dir_(std::move(dir)), key_(std::move(key)) {
  if (dir_.empty()) throw InputError("", key_, "an output directory is required");
  std::error_code ec;
  const auto status = fs::status(dir_, ec);
  if (fs::exists(status)) {
    if (!fs::is_directory(status)) throw InputError("", key_, dir_.string() + " is not a directory");
  } else {
    created_dir_ = fs::create_directories(dir_, ec);
    if (ec) throw InputError("", key_, "cannot create " + dir_.string() + ": " + ec.message());
  }
  const fs::path file = dir_ / kLockFileName;
  for (;;) {
    fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0644);
    if (fd_ < 0) {
      const int e = errno;
      if (created_dir_) fs::remove(dir_, ec);
      throw InputError(file.string(), key_, std::string("cannot open the folder's lock: ") + std::strerror(e));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EINTR) {
        ::close(fd_);
        continue;
      }
      refuse_busy(dir_, key_, fd_);
    }
    if (same_inode(fd_, file)) break;
    ::close(fd_);  // the last holder removed the file between our open and our lock: once more
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
  }
  // A signal that ends the process removes the file (the kernel releases the lock itself).
  run_files::add(file);
}

DirLock::DirLock(DirLock&& other) noexcept
    : dir_(std::move(other.dir_)), key_(std::move(other.key_)), fd_(other.fd_), created_dir_(other.created_dir_) {
  other.fd_ = -1;
}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  const fs::path file = dir_ / kLockFileName;
  run_files::forget(file);
  std::error_code ec;
  fs::remove(file, ec);  // still locked: a process that opened it meanwhile sees the inode gone
  if (created_dir_) fs::remove(dir_, ec);  // only when empty
  ::close(fd_);
}

}  // namespace tokenflow
