// tokenflow/run_files.hpp: what a run has on disk that is not committed yet.
//
// A run registers its staging folder and its temporary files here while they exist. When the CLI
// is stopped by a signal before the run can unwind by itself, its signal watcher calls
// remove_registered() so that nothing of the run is left behind (a checkpoint already renamed
// into place is not registered, and stays). Commits hold commit_lock() so that a signal never
// cuts a commit in half: the watcher takes the same lock before it removes anything.
#pragma once

#include <filesystem>
#include <mutex>

namespace tokenflow::run_files {

void add(const std::filesystem::path& path);
void forget(const std::filesystem::path& path);

// Removes every registered path (folders recursively); safe to call from any thread.
void remove_registered();

// Child processes of the run (the figure renderer): stopped with SIGTERM by remove_registered().
void add_child(int pid);
void forget_child(int pid);
// Sends `sig` to the registered child processes (a signal sent to tokenflow alone reaches them too).
void signal_children(int sig);

std::mutex& commit_lock();

// Registers a path for the lifetime of the object.
class Scoped {
 public:
  explicit Scoped(std::filesystem::path path) : path_(std::move(path)) { add(path_); }
  ~Scoped() { forget(path_); }
  Scoped(const Scoped&) = delete;
  Scoped& operator=(const Scoped&) = delete;

 private:
  std::filesystem::path path_;
};

}  // namespace tokenflow::run_files
