// Output folders that never destroy what tokenflow did not write (tokenflow/output_dir.hpp).
#include "tokenflow/output_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "tokenflow/durable_file.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/run_files.hpp"

namespace tokenflow {
namespace fs = std::filesystem;

namespace {

// The staging area DIR/.staging-PID-TOKEN and what it holds.
constexpr const char* kStagingPrefix = ".staging-";
constexpr const char* kMarkerPrefix = "tokenflow-run-";  // + PID-TOKEN: the empty marker file
constexpr const char* kNew = "new";                      // the outputs, staged
constexpr const char* kTmp = "tmp";                      // temporary files of atomic replaces in DIR
constexpr const char* kJournal = "journal";              // the manifest a commit is writing
constexpr const char* kAside = "old";                    // the last run's files, moved aside by a commit

bool exists_no_follow(const fs::path& p) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(p, ec));
}

bool is_real_directory(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(fs::symlink_status(p, ec));
}

bool is_regular_no_follow(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(fs::symlink_status(p, ec));
}

// "a/b/c" -> {"a", "a/b"}
std::vector<std::string> ancestors(const std::string& path) {
  std::vector<std::string> up;
  for (std::size_t slash = path.find('/'); slash != std::string::npos; slash = path.find('/', slash + 1))
    up.push_back(path.substr(0, slash));
  return up;
}

// The regular files under `root`, as relative paths with '/' (sorted).
std::vector<std::string> files_under(const fs::path& root) {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) files.push_back(it->path().lexically_relative(root).generic_string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool all_hex(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// "PID-TOKEN" of a staging area's name ".staging-PID-TOKEN", or "" when the name is not one
// (PID decimal digits, TOKEN exactly 32 lowercase hex digits, as random_token() makes them).
std::string staging_id(const std::string& name) {
  if (name.rfind(kStagingPrefix, 0) != 0) return {};
  const std::string id = name.substr(std::string(kStagingPrefix).size());
  const std::size_t dash = id.find('-');
  if (dash == std::string::npos || !all_digits(id.substr(0, dash))) return {};
  const std::string token = id.substr(dash + 1);
  return token.size() == 32 && all_hex(token) ? id : std::string();
}

// Whether `path` is a staging area a tokenflow run made: a real folder with the name of one and
// its marker (an empty folder of that name is one cut between its mkdir and its marker).
bool is_tokenflow_staging(const fs::path& path) {
  const std::string id = staging_id(path.filename().string());
  if (id.empty() || !is_real_directory(path)) return false;
  std::error_code ec;
  return is_regular_no_follow(path / (kMarkerPrefix + id)) || fs::is_empty(path, ec);
}

}  // namespace

OutputDir::OutputDir(fs::path dir, OutputPlan plan) : OutputDir(DirLock(std::move(dir)), std::move(plan)) {}

OutputDir::OutputDir(DirLock lock, OutputPlan plan) : lock_(std::move(lock)), plan_(std::move(plan)) { open(); }

OutputDir::~OutputDir() {
  if (staging_.empty()) return;
  run_files::forget(staging_);
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

void OutputDir::open() {
  recover_debris();
  previous_ = read_output_manifest(dir());
  refuse_other_command();
  refuse_changed_files();
  refuse_replaced_inputs();
  for (const auto& p : plan_.outputs) refuse_taken(p);
  for (const auto& p : plan_.in_place) refuse_taken(p);
  make_staging();
}

// DIR/.staging-PID-TOKEN with its marker, new/ and tmp/. mkdir never takes a name that exists (a
// taken one, however unlikely, gets another token).
void OutputDir::make_staging() {
  const std::string pid = std::to_string(::getpid());
  std::error_code ec;
  for (int attempt = 0;; ++attempt) {
    const std::string id = pid + "-" + random_token();
    const fs::path path = dir() / (kStagingPrefix + id);
    if (::mkdir(path.c_str(), 0755) != 0) {
      const int e = errno;
      if (e == EEXIST && attempt < 8) continue;
      throw InputError("", lock_.key(), "cannot write in " + dir().string() + ": " + std::strerror(e));
    }
    staging_ = path;
    run_files::add(staging_);
    const int fd = ::open((path / (kMarkerPrefix + id)).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || ::close(fd) != 0 || !fs::create_directory(path / kNew, ec) || !fs::create_directory(path / kTmp, ec)) {
      const std::string why = ec ? ec.message() : std::strerror(errno);
      // (thrown from the constructor: no destructor runs)
      run_files::forget(staging_);
      fs::remove_all(staging_, ec);
      staging_.clear();
      throw InputError("", lock_.key(), "cannot write in " + dir().string() + ": " + why);
    }
    return;
  }
}

fs::path OutputDir::scratch() const { return staging_ / kTmp; }

// Under the lock no other tokenflow process works in DIR: a staging area left there is a killed
// run's. Only folders that prove to be tokenflow's staging areas are touched (a file or folder of
// the user's with a similar name stays as it is).
void OutputDir::recover_debris() {
  std::error_code ec;
  std::vector<fs::path> debris;
  for (const auto& entry : fs::directory_iterator(dir(), ec))
    if (is_tokenflow_staging(entry.path())) debris.push_back(entry.path());
  for (const auto& staging : debris) {
    undo_commit(staging);
    fs::remove_all(staging, ec);
  }
}

// A commit cut short by a kill (the staging area holds its journal). When the manifest is already
// the journal's, the commit happened and only its clean-up is left; otherwise the new files that
// were moved in go (those of the journal, with its content) and the last run's files come back.
void OutputDir::undo_commit(const fs::path& staging) {
  std::error_code ec;
  const fs::path journal = staging / kJournal;
  if (!exists_no_follow(journal)) return;
  const OutputManifest current = read_output_manifest(dir());
  if (is_regular_no_follow(journal)) {
    const OutputManifest next = parse_output_manifest(read_input_file(journal, "--out"), journal.string());
    if (output_manifest_text(next) == output_manifest_text(current)) return;  // committed: clean-up only
    for (const auto& [path, record] : next.files) {
      const bool listed_now = current.files.count(path) || current.in_place.count(path);
      if ((exists_no_follow(staging / kAside / path) || !listed_now) && file_matches(dir() / path, record))
        fs::remove(dir() / path, ec);
    }
    std::set<std::string> created;
    std::set_difference(next.dirs.begin(), next.dirs.end(), current.dirs.begin(), current.dirs.end(),
                        std::inserter(created, created.end()));
    remove_empty_dirs(created);
  }
  for (const auto& path : files_under(staging / kAside)) {
    const fs::path home = dir() / path;
    if (exists_no_follow(home)) continue;
    fs::create_directories(home.parent_path(), ec);
    try {
      rename_no_replace(staging / kAside / path, home);
    } catch (const WriteError&) {
      // taken meanwhile by a file of the user's: the old output goes with the staging area
    }
  }
}

void OutputDir::refuse_other_command() const {
  if (!previous_.command.empty() && previous_.command != plan_.command)
    throw InputError("", lock_.key(),
                     dir().string() + " holds the outputs of `" + previous_.command + "`; choose another " + lock_.key());
}

void OutputDir::refuse_changed_files() const {
  for (const auto& [path, record] : previous_.files) {
    const fs::path p = dir() / path;
    if (exists_no_follow(p) && !file_matches(p, record))
      throw InputError(p.string(), lock_.key(),
                       "changed since tokenflow wrote it, so it is yours now, and a run into this folder would "
                       "replace it: move it away or choose another " + lock_.key());
  }
}

void OutputDir::refuse_replaced_inputs() const {
  if (!any_input_file_read()) return;
  std::vector<std::string> replaced;
  for (const auto& [path, record] : previous_.files) replaced.push_back(path);
  for (const auto& path : previous_.in_place) replaced.push_back(path);
  for (const auto& path : replaced) {
    if (std::find(plan_.in_place.begin(), plan_.in_place.end(), path) != plan_.in_place.end()) continue;
    if (const std::optional<InputFileRead> input = input_file_named_by(dir() / path))
      throw InputError(input->path, input->key,
                       "is " + (dir() / path).string() + ", an output of the last run in " + dir().string() +
                           ", which this run replaces: copy it elsewhere or choose another " + lock_.key());
  }
}

bool OutputDir::replaceable(const std::string& path) const {
  if (previous_.files.count(path) || previous_.in_place.count(path) || claimed_.count(path)) return true;
  return plan_.resumes && std::find(plan_.in_place.begin(), plan_.in_place.end(), path) != plan_.in_place.end();
}

void OutputDir::refuse_taken(const std::string& declared) const {
  const bool folder = !declared.empty() && declared.back() == '/';
  const std::string path = folder ? declared.substr(0, declared.size() - 1) : declared;
  auto taken = [&](const std::string& p) {
    return InputError((dir() / p).string(), lock_.key(),
                      "exists and tokenflow did not write it (" + std::string(kManifestFileName) +
                          " does not list it); this run writes that name and never replaces what it did not "
                          "write: move it away or choose another " + lock_.key());
  };
  for (const auto& a : ancestors(path))
    if (exists_no_follow(dir() / a) && !is_real_directory(dir() / a) && !replaceable(a)) throw taken(a);
  if (!exists_no_follow(dir() / path)) return;
  if (folder ? !is_real_directory(dir() / path) && !replaceable(path) : !replaceable(path)) throw taken(path);
}

// Why the staged file `path` cannot be moved into place now (nullopt: it can).
std::optional<std::string> OutputDir::taken_at_commit(const std::string& path) const {
  for (const auto& a : ancestors(path))
    if (exists_no_follow(dir() / a) && !is_real_directory(dir() / a) && !replaceable(a))
      return (dir() / a).string() + " exists and tokenflow did not write it";
  const fs::path target = dir() / path;
  if (!exists_no_follow(target)) return std::nullopt;
  if (!replaceable(path)) return target.string() + " exists and tokenflow did not write it";
  if (const auto it = previous_.files.find(path); it != previous_.files.end() && !file_matches(target, it->second))
    return target.string() + " changed since tokenflow wrote it (it is yours now)";
  const bool in_place = std::find(plan_.in_place.begin(), plan_.in_place.end(), path) != plan_.in_place.end();
  if (!in_place && input_file_named_by(target)) return target.string() + " is an input of this run";
  return std::nullopt;
}

void OutputDir::keep_results_and_throw(const std::string& why) {
  std::string kept_note;
  if (!staging_.empty()) {
    fs::path kept = dir() / ("tokenflow-results-" + std::to_string(::getpid()));
    for (int k = 2; exists_no_follow(kept); ++k)
      kept = dir() / ("tokenflow-results-" + std::to_string(::getpid()) + "-" + std::to_string(k));
    try {
      rename_no_replace(staging_ / kNew, kept);
      lock_.keep_dir();
      kept_note = "; this run's outputs are in " + kept.string();
    } catch (const WriteError&) {
      // they go with the staging area
    }
  }
  throw InputError("", lock_.key(), why + "; nothing in " + dir().string() + " was changed" + kept_note);
}

fs::path OutputDir::staged(const std::string& name) const { return staging_ / kNew / name; }

fs::path OutputDir::final_path(const std::string& name) {
  if (std::find(plan_.in_place.begin(), plan_.in_place.end(), name) == plan_.in_place.end())
    throw std::logic_error("OutputDir::final_path: " + name + " is not an in-place file of the plan");
  if (!claimed_.count(name)) {
    // Listed before the file exists: a run killed after writing it leaves a manifest that lets
    // `tokenflow resume` (or a rerun) replace it.
    OutputManifest listed = previous_;
    listed.command = plan_.command;
    listed.files.erase(name);
    listed.in_place.insert(name);
    write_output_manifest(dir(), listed, scratch());
    previous_ = std::move(listed);
    claimed_.insert(name);
  }
  return dir() / name;
}

void OutputDir::discard_at_commit(const std::string& name) { discarded_.insert(name); }

OutputManifest OutputDir::next_manifest(const std::vector<std::string>& staged_files) const {
  OutputManifest next;
  next.command = plan_.command;
  for (const auto& f : staged_files)
    if (const auto r = record_file(staging_ / kNew / f)) next.files[f] = *r;
  for (const auto& name : claimed_)
    if (!discarded_.count(name))
      if (const auto r = record_file(dir() / name)) next.files[name] = *r;
  for (const auto& [f, record] : next.files)
    for (const auto& a : ancestors(f))
      if (!is_real_directory(dir() / a) || previous_.dirs.count(a)) next.dirs.insert(a);
  return next;
}

// Moves the last run's files aside and the new ones in, then replaces the manifest (the commit
// point). Throws on any failure, after putting back what it moved.
void OutputDir::move_in(const std::vector<std::string>& staged_files, const OutputManifest& next) {
  const fs::path journal = staging_ / kJournal, old = staging_ / kAside, fresh = staging_ / kNew;
  std::vector<std::string> aside_done, placed;
  std::set<std::string> aside;
  for (const auto& [path, record] : previous_.files) aside.insert(path);
  for (const auto& path : previous_.in_place) aside.insert(path);
  for (const auto& name : claimed_)
    if (!discarded_.count(name)) aside.erase(name);  // the checkpoint this run keeps stays in place
  for (const auto& f : staged_files)
    if (exists_no_follow(dir() / f)) aside.insert(f);
  try {
    std::error_code ec;
    fs::create_directory(old, ec);
    if (ec) throw WriteError(old, ec.message());
    replace_file_atomically(journal, output_manifest_text(next));  // its temporary file beside it
    sync_directory(dir());
    for (const auto& path : aside) {
      if (!is_regular_no_follow(dir() / path)) continue;  // gone, or not a file: left alone
      fs::create_directories((old / path).parent_path());
      rename_no_replace(dir() / path, old / path);
      aside_done.push_back(path);
    }
    std::set<fs::path> parents{dir()};
    for (const auto& f : staged_files) {
      fs::create_directories((dir() / f).parent_path());
      rename_no_replace(fresh / f, dir() / f);  // a name taken meanwhile stops the commit here
      placed.push_back(f);
      parents.insert((dir() / f).parent_path());
    }
    for (const auto& p : parents) sync_directory(p);
    write_output_manifest(dir(), next, scratch());  // the commit point (syncs DIR)
  } catch (...) {
    std::error_code ec;
    for (auto it = placed.rbegin(); it != placed.rend(); ++it) fs::rename(dir() / *it, fresh / *it, ec);
    for (auto it = aside_done.rbegin(); it != aside_done.rend(); ++it) {
      try {
        rename_no_replace(old / *it, dir() / *it);
      } catch (const WriteError&) {
        // taken meanwhile by a file of the user's, which stays
      }
    }
    std::set<std::string> created;
    std::set_difference(next.dirs.begin(), next.dirs.end(), previous_.dirs.begin(), previous_.dirs.end(),
                        std::inserter(created, created.end()));
    remove_empty_dirs(created);
    fs::remove(journal, ec);
    throw;
  }
}

void OutputDir::remove_empty_dirs(const std::set<std::string>& dirs) const {
  std::error_code ec;
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {  // a folder's subfolders sort after it
    const fs::path d = dir() / *it;
    if (is_real_directory(d) && fs::is_empty(d, ec)) fs::remove(d, ec);
  }
}

void OutputDir::commit() {
  std::lock_guard commit_guard(run_files::commit_lock());
  const std::vector<std::string> files = files_under(staging_ / kNew);
  for (const auto& f : files)
    if (const auto why = taken_at_commit(f)) keep_results_and_throw(*why);
  // A listed file that the user changed while the run was computing stays theirs.
  for (const auto& [path, record] : previous_.files)
    if (exists_no_follow(dir() / path) && !file_matches(dir() / path, record))
      keep_results_and_throw((dir() / path).string() + " changed since tokenflow wrote it (it is yours now)");
  try {
    // Files written by other processes (the figures) and any write that a delayed allocation could
    // not place fail here, before anything in DIR changes.
    sync_tree(staging_ / kNew);
    const OutputManifest next = next_manifest(files);
    move_in(files, next);
    std::set<std::string> gone;
    std::set_difference(previous_.dirs.begin(), previous_.dirs.end(), next.dirs.begin(), next.dirs.end(),
                        std::inserter(gone, gone.end()));
    remove_empty_dirs(gone);
    previous_ = next;
  } catch (const std::exception& e) {
    try {
      keep_results_and_throw(e.what());
    } catch (const InputError& kept) {
      throw WriteError(dir(), kept.detail());
    }
  }
  std::error_code ec;
  run_files::forget(staging_);
  fs::remove_all(staging_, ec);
  staging_.clear();
  committed_ = true;
  lock_.keep_dir();
}

}  // namespace tokenflow
