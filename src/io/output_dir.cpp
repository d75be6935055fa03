// Output directories that never destroy what tokenflow did not write (tokenflow/io.hpp).
//
// The rule: DIR/.tokenflow-outputs (the manifest) lists the names the last run wrote in DIR. A run
// writes only names that are free or listed there; it replaces the listed names as a whole (a rerun
// never leaves another run's outputs beside its own) and never touches anything else in DIR. The
// commit is all or nothing: the old outputs are moved aside into DIR/.rollback-PID, the new ones
// are renamed in, the manifest is replaced, the folder is synced; any failure on the way moves
// everything back to what DIR held before.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tokenflow/durable_file.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/run_files.hpp"

namespace tokenflow {
namespace fs = std::filesystem;

namespace {

constexpr const char* kManifest = ".tokenflow-outputs";
constexpr std::uintmax_t kManifestMaxBytes = 1 << 20;

bool exists_no_follow(const fs::path& p) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(p, ec));
}

// A manifest line names one entry of DIR: no path separators, no "." or "..", none of the names
// tokenflow uses for its own bookkeeping (a hand-edited manifest cannot make a run move files
// outside DIR or its staging folders).
bool plain_output_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos && name != kManifest && name.rfind(".staging-", 0) != 0 &&
         name.rfind(".rollback-", 0) != 0;
}

// The process that owns DIR/<prefix>PID (name[prefix_length:] is the pid) is gone (so its folder is debris of a killed run).
bool owner_is_gone(const std::string& name, std::size_t prefix_length) {
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + prefix_length, &end, 10);
  return pid > 0 && *end == '\0' && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

void rename_or_throw(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) throw WriteError(to, ec.message());
}

}  // namespace

OutputDir::OutputDir(fs::path dir) : dir_(std::move(dir)) {
  if (dir_.empty()) throw InputError("", "--out", "an output directory is required");
  std::error_code ec;
  if (exists_no_follow(dir_) || fs::exists(dir_, ec)) {
    if (!fs::is_directory(dir_, ec)) throw InputError("", "--out", dir_.string() + " is not a directory");
  } else {
    fs::create_directories(dir_, ec);
    if (ec) throw InputError("", "--out", "cannot create " + dir_.string() + ": " + ec.message());
    created_dir_ = true;
  }
  previous_ = read_manifest();
  recover_debris();
  // Every command writes summary.json: a name that tokenflow did not write is refused before any
  // work is done (other names are checked again at commit).
  refuse_foreign("summary.json");
  staging_ = dir_ / (".staging-" + std::to_string(::getpid()));
  fs::remove_all(staging_, ec);
  fs::create_directory(staging_, ec);
  if (ec) throw InputError("", "--out", "cannot write in " + dir_.string() + ": " + ec.message());
  run_files::add(staging_);
}

OutputDir::~OutputDir() {
  std::error_code ec;
  if (!staging_.empty()) {
    run_files::forget(staging_);
    fs::remove_all(staging_, ec);
  }
  if (!committed_ && created_dir_ && fs::is_empty(dir_, ec)) fs::remove(dir_, ec);
}

void OutputDir::recover_debris() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".staging-", 0) == 0 && owner_is_gone(name, 9)) {
      fs::remove_all(entry.path(), ec);  // a killed run's uncommitted outputs
    } else if (const auto tmp = name.rfind(".tmp-"); tmp != std::string::npos && tmp > 0 &&
               (previous_.count(name.substr(0, tmp)) || name.substr(0, tmp) == kManifest) &&
               owner_is_gone(name, tmp + 5)) {
      fs::remove(entry.path(), ec);  // a checkpoint or manifest half-written by a killed run
    } else if (name.rfind(".rollback-", 0) == 0 && owner_is_gone(name, 10)) {
      // A commit cut short by a kill: the earlier outputs it had moved aside go back where they
      // were, unless a name is taken again by now.
      for (const auto& old : fs::directory_iterator(entry.path(), ec)) {
        const fs::path home = dir_ / old.path().filename();
        if (!exists_no_follow(home)) fs::rename(old.path(), home, ec);
      }
      fs::remove_all(entry.path(), ec);
    }
  }
}

std::set<std::string> OutputDir::read_manifest() const {
  std::set<std::string> names;
  const fs::path path = dir_ / kManifest;
  std::error_code ec;
  const auto status = fs::symlink_status(path, ec);
  if (!fs::exists(status)) return names;
  if (!fs::is_regular_file(status) || fs::file_size(path, ec) > kManifestMaxBytes)
    throw InputError(path.string(), "--out", "is not a manifest tokenflow wrote (not a small regular file)");
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (!plain_output_name(line))
      throw InputError(path.string(), "--out", "lists \"" + line.substr(0, 80) + "\", which is not a name in this folder");
    names.insert(line);
  }
  return names;
}

void OutputDir::write_manifest(const std::set<std::string>& names) const {
  std::string text =
      "# tokenflow: the outputs of the last run in this folder. A run into this folder replaces these\n"
      "# (and only these); everything else here is left as it is.\n";
  for (const auto& n : names) text += n + "\n";
  replace_file_atomically(dir_ / kManifest, text);
}

void OutputDir::refuse_foreign(const std::string& name) const {
  if (exists_no_follow(dir_ / name) && !previous_.count(name) && !claimed_.count(name))
    throw InputError(
        "", "--out",
        (dir_ / name).string() +
            " exists and tokenflow did not write it (it is not listed in " + (dir_ / kManifest).string() +
            "); a run replaces only its own outputs: choose another --out or move it away");
}

fs::path OutputDir::staged(const std::string& name) const { return staging_ / name; }

fs::path OutputDir::final_path(const std::string& name) {
  if (!claimed_.count(name)) {
    refuse_foreign(name);
    claimed_.insert(name);
    // Listed before the file exists: a run killed after writing it leaves a manifest that lets
    // `tokenflow resume` (or a rerun) replace it.
    std::set<std::string> listed = previous_;
    listed.insert(claimed_.begin(), claimed_.end());
    write_manifest(listed);
  }
  return dir_ / name;
}

void OutputDir::commit() {
  std::lock_guard commit_guard(run_files::commit_lock());
  std::set<std::string> staged_names;
  for (const auto& entry : fs::directory_iterator(staging_)) staged_names.insert(entry.path().filename().string());

  for (const auto& n : staged_names) {
    if (!exists_no_follow(dir_ / n) || previous_.count(n) || claimed_.count(n)) continue;
    // Nothing computed is lost: the results stay in a folder of their own.
    const fs::path kept = dir_ / ("tokenflow-results-" + std::to_string(::getpid()));
    std::error_code ec;
    fs::rename(staging_, kept, ec);
    if (!ec) {
      run_files::forget(staging_);
      staging_.clear();
    }
    throw InputError("", "--out",
                     (dir_ / n).string() + " exists and tokenflow did not write it; nothing in " + dir_.string() +
                         " was changed" + (ec ? std::string() : ", and this run's outputs are in " + kept.string()));
  }

  // Files written by other processes (the figures) and any write that a delayed allocation could
  // not place fail here, before anything in DIR changes.
  sync_tree(staging_);

  const fs::path rollback = dir_ / (".rollback-" + std::to_string(::getpid()));
  std::vector<std::string> moved_aside, placed;
  try {
    std::error_code ec;
    fs::remove_all(rollback, ec);
    if (!fs::create_directory(rollback, ec) || ec) throw WriteError(rollback, ec ? ec.message() : "exists");
    // Aside: the last run's outputs (except what this run wrote in place, its checkpoint) and
    // whatever holds a name this run writes.
    std::set<std::string> aside;
    for (const auto& n : previous_)
      if (!claimed_.count(n) || staged_names.count(n)) aside.insert(n);
    for (const auto& n : staged_names) aside.insert(n);
    for (const auto& n : aside) {
      if (!exists_no_follow(dir_ / n)) continue;
      rename_or_throw(dir_ / n, rollback / n);
      moved_aside.push_back(n);
    }
    for (const auto& n : staged_names) {
      rename_or_throw(staging_ / n, dir_ / n);
      placed.push_back(n);
    }
    std::set<std::string> listed = staged_names;
    listed.insert(claimed_.begin(), claimed_.end());
    write_manifest(listed);  // syncs DIR: the renames above are durable with it
  } catch (...) {
    std::error_code ec;
    for (auto it = placed.rbegin(); it != placed.rend(); ++it) fs::rename(dir_ / *it, staging_ / *it, ec);
    for (auto it = moved_aside.rbegin(); it != moved_aside.rend(); ++it) fs::rename(rollback / *it, dir_ / *it, ec);
    fs::remove_all(rollback, ec);
    throw;
  }
  std::error_code ec;
  fs::remove_all(rollback, ec);
  run_files::forget(staging_);
  fs::remove_all(staging_, ec);
  staging_.clear();
  committed_ = true;
}

}  // namespace tokenflow
