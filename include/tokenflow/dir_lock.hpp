// tokenflow/dir_lock.hpp: one tokenflow process at a time in an output folder.
//
// DirLock takes an exclusive flock(2) on DIR itself (a descriptor of the folder, opened O_CLOEXEC)
// without waiting: when another process holds it, the constructor throws InputError (exit 2 in the
// CLI) naming that process's pid, which the kernel reports in /proc/locks (a holder that finishes
// between the try and that read is no refusal: the lock is tried again). No file is created for
// the lock, so no name in DIR is ever taken, truncated or removed by it (a file of the user's named
// like an earlier version's lock, `.tokenflow-lock`, stays as it is). The lock belongs to this
// process alone: a child process (the figure renderer) never carries the descriptor past its exec,
// and the kernel releases the lock when the process ends however it ends (a SIGKILL included). The
// destructor removes DIR when the constructor created it and DIR is empty again.
//
// A folder removed and made again between the open and the lock is caught the usual way: after
// flock succeeds the holder checks that the path DIR still names the folder it locked, and tries
// again otherwise.
#pragma once

#include <filesystem>
#include <string>

namespace tokenflow {

class DirLock {
 public:
  // Creates DIR when it does not exist (its parents too). `key` names the option that gave DIR
  // ("--out") in messages.
  explicit DirLock(std::filesystem::path dir, std::string key = "--out");
  ~DirLock();
  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&&) = delete;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& key() const { return key_; }
  // Whether the constructor created DIR (then the destructor removes it when it is empty).
  bool created_dir() const { return created_dir_; }
  // Keep DIR even when it is empty at the end (a run committed outputs into it).
  void keep_dir() { created_dir_ = false; }

 private:
  std::filesystem::path dir_;
  std::string key_;
  int fd_ = -1;
  bool created_dir_ = false;
};

}  // namespace tokenflow
