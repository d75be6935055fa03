// tokenflow/dir_lock.hpp: one tokenflow process at a time in an output folder.
//
// DirLock takes an exclusive flock(2) on DIR/.tokenflow-lock (tokenflow's own bookkeeping, like
// DIR/.tokenflow-outputs) without waiting: when another process holds it, the constructor throws
// InputError (exit 2 in the CLI) naming that process's pid, which the holder writes into the file.
// The lock belongs to this process alone: the descriptor is opened O_CLOEXEC, so a child process
// (the figure renderer) never carries it past its exec, and the kernel releases it when the process
// ends however it ends (a SIGKILL included). The destructor removes the lock file and then, when
// the constructor created DIR and DIR is empty again, DIR itself.
//
// Races on the file's name are closed the usual way: after flock succeeds the holder checks that
// DIR/.tokenflow-lock still names the inode it locked (a releasing process may have just removed
// it) and tries again otherwise.
#pragma once

#include <filesystem>
#include <string>

namespace tokenflow {

inline constexpr const char* kLockFileName = ".tokenflow-lock";

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
