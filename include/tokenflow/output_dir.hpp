// tokenflow/output_dir.hpp: an output folder that never destroys what tokenflow did not write.
//
// The rules, for a run of `command` into DIR:
// - One process at a time: DIR itself is locked (flock, tokenflow/dir_lock.hpp) from the
//   constructor to the destructor; a second process is refused naming the holder's pid.
// - DIR/.tokenflow-outputs (tokenflow/output_manifest.hpp) lists every file the last run wrote,
//   subfolders file by file, with its size, modification time and hash, the folders it created and
//   the command that wrote them. A rerun replaces exactly those files, and only while they hold
//   what tokenflow wrote; every other file anywhere under DIR stays as it is. Folders tokenflow
//   created are removed only when they are empty.
// - Refused before any work, by the constructor (InputError, exit 2, naming the file):
//   DIR holds the outputs of another command ("DIR holds the outputs of `simulate`; choose another
//   --out"); a listed file changed since tokenflow wrote it (it is the user's now); a file this
//   process has read (tokenflow/input_file.hpp) is one the run would replace or remove; a name in
//   plan.outputs is taken by a file or folder tokenflow did not write; a .tokenflow-outputs that
//   tokenflow did not write.
// - Everything of a run that is not an output lives in ONE folder, its staging area
//   DIR/.staging-PID-TOKEN (TOKEN: 32 random hex digits), made with mkdir (which never takes an
//   existing name) and holding an empty marker file tokenflow-run-PID-TOKEN: new/ (the outputs,
//   staged), tmp/ (the temporary files of atomic replaces in DIR: the manifest, checkpoints),
//   journal and old/ (while it commits). No other name in DIR is ever created for bookkeeping.
// - commit() moves the staged files into place all or nothing: it checks every staged path again
//   (a name taken meanwhile, a listed file changed meanwhile), syncs them, writes the new manifest
//   into the staging area as the journal, moves the last run's files aside into old/, moves the
//   new ones in (never over a name that exists: RENAME_NOREPLACE) and replaces the manifest (the
//   commit point). On a failure DIR is rolled back to what it held, the computed results are kept
//   in DIR/tokenflow-results-PID and the error says so.
// - A run killed on the way leaves its staging area, which the next run into DIR removes (under
//   the lock), undoing or finishing a commit it finds journaled there. Only a folder that proves
//   to be tokenflow's is touched: named .staging-PID-TOKEN exactly and holding the marker of the
//   same PID and TOKEN (or empty: a run killed between its mkdir and its marker). A file or
//   folder of the user's named like tokenflow's bookkeeping (.staging-42, .rollback-7,
//   .tokenflow-lock, NAME.tmp-5 of any version) is never moved, changed or removed.
#pragma once

#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tokenflow/dir_lock.hpp"
#include "tokenflow/output_manifest.hpp"

namespace tokenflow {

struct OutputPlan {
  // Who owns DIR after the commit ("simulate", "reproduce sphere"). `resume` passes the command it
  // continues (simulate or train): it is the same run.
  std::string command;
  // Paths (relative, '/' between folders) the run will write, checked before any work. A path
  // ending in '/' is a folder whose files are known only at the end (its name is checked).
  std::vector<std::string> outputs;
  // Files the run writes into DIR directly while it runs (checkpoints, which must survive a kill).
  // They may be read by the run itself (resume) and are replaced by it.
  std::vector<std::string> in_place;
  // The run continues from its in-place files (resume): they are its own even when the manifest
  // does not list them (a checkpoint copied into DIR by hand), since the user named them.
  bool resumes = false;
};

class OutputDir {
 public:
  // Locks DIR (creating it when needed), cleans a killed run's debris and applies the checks above.
  OutputDir(std::filesystem::path dir, OutputPlan plan);
  // The same with a lock taken earlier (resume takes it before it reads the checkpoint).
  OutputDir(DirLock lock, OutputPlan plan);
  // Removes the staging folder when commit() was not reached, then releases the lock.
  ~OutputDir();
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  // Path where to write `name` (a relative path) now; it appears as dir/name after commit().
  std::filesystem::path staged(const std::string& name) const;
  // The path of an in-place file (one of plan.in_place) in DIR itself. The manifest lists it
  // (content not recorded) before the path is returned, so a killed run's checkpoint is
  // tokenflow's and `resume` or a rerun may replace it. Write it with replace_file_atomically(path,
  // bytes, scratch()), so that its temporary file is in the staging area.
  std::filesystem::path final_path(const std::string& name);
  // The staging area's folder for temporary files (same file system as DIR; goes with the run).
  std::filesystem::path scratch() const;
  // The in-place file `name` is not an output of the finished run: commit() removes it with the
  // last run's files (a checkpoint, once the run is complete).
  void discard_at_commit(const std::string& name);
  void commit();
  const std::filesystem::path& dir() const { return lock_.dir(); }

 private:
  void open();
  void make_staging();
  void recover_debris();
  void undo_commit(const std::filesystem::path& staging);
  void refuse_other_command() const;
  void refuse_changed_files() const;
  void refuse_replaced_inputs() const;
  void refuse_taken(const std::string& path) const;
  std::optional<std::string> taken_at_commit(const std::string& path) const;
  bool replaceable(const std::string& path) const;
  void keep_results_and_throw(const std::string& why);
  OutputManifest next_manifest(const std::vector<std::string>& staged_files) const;
  void move_in(const std::vector<std::string>& staged_files, const OutputManifest& next);
  void remove_empty_dirs(const std::set<std::string>& dirs) const;

  DirLock lock_;
  OutputPlan plan_;
  std::filesystem::path staging_;    // DIR/.staging-PID-TOKEN (empty once removed or kept)
  OutputManifest previous_;          // the last run's outputs, as the manifest lists them
  std::set<std::string> claimed_;    // in-place files this run has written
  std::set<std::string> discarded_;  // in-place files the commit removes
  bool committed_ = false;
};

}  // namespace tokenflow
