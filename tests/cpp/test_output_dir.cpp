// Output directories never destroy what tokenflow did not write; commits are all or nothing;
// outputs are written durably and a full disk is an error, not an empty file.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "test_util.hpp"
#include "tokenflow/checkpoint.hpp"
#include "tokenflow/dir_lock.hpp"
#include "tokenflow/durable_file.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/io.hpp"

namespace tokenflow {
namespace {

namespace fs = std::filesystem;

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

using testing::read_file_bytes;

// One run that writes `files` (name -> content; a name with '/' goes into a subfolder).
void run_writing(const fs::path& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  OutputDir out(dir, {"test", {}, {}});
  for (const auto& [name, text] : files) put(out.staged(name), text);
  out.commit();
}

// Whether DIR holds a name tokenflow makes for its own bookkeeping (a staging area, a temporary
// file, kept results) or that earlier versions made (a lock file, a rollback folder).
bool has_bookkeeping_debris(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".staging-", 0) == 0 || n.rfind(".rollback-", 0) == 0 || n.find(".tmp-") != std::string::npos ||
        n == ".tokenflow-lock" || n.rfind("tokenflow-results-", 0) == 0)
      return true;
  }
  return false;
}

// The staging areas (.staging-*) in DIR.
std::vector<fs::path> staging_areas(const fs::path& dir) {
  std::vector<fs::path> found;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(".staging-", 0) == 0) found.push_back(e.path());
  return found;
}

TEST(OutputDirSafety, FilesOfTheUserBesideTheOutputsAreKept) {
  const auto dir = testing::temp_dir("od-beside");
  put(dir / "notes.txt", "mine");
  put(dir / "data" / "x.csv", "mine too");
  run_writing(dir, {{"summary.json", "{}"}, {"a.npy", "1"}});
  run_writing(dir, {{"summary.json", "{}"}, {"a.npy", "2"}});
  EXPECT_EQ(read_file_bytes(dir / "notes.txt"), "mine");
  EXPECT_EQ(read_file_bytes(dir / "data" / "x.csv"), "mine too");
  EXPECT_EQ(read_file_bytes(dir / "a.npy"), "2");
  EXPECT_FALSE(has_bookkeeping_debris(dir));
}

TEST(OutputDirSafety, AFolderOfTheUserWithAnOutputNameKeepsItsFiles) {
  // demo writes DIR/sphere/; a user's DIR/sphere/ keeps its files through the run and a rerun, and
  // is never removed (tokenflow did not create it).
  const auto dir = testing::temp_dir("od-subfolder");
  put(dir / "sphere" / "keep.txt", "mine");
  run_writing(dir, {{"sphere/summary.json", "1"}, {"summary.json", "1"}});
  run_writing(dir, {{"summary.json", "2"}});
  EXPECT_EQ(read_file_bytes(dir / "sphere" / "keep.txt"), "mine");
  EXPECT_FALSE(fs::exists(dir / "sphere" / "summary.json"));  // the first run's, not written again
  EXPECT_EQ(read_file_bytes(dir / "summary.json"), "2");
  EXPECT_FALSE(has_bookkeeping_debris(dir));
  // A folder that tokenflow created goes once it is empty.
  run_writing(dir, {{"made/x.npy", "1"}, {"summary.json", "3"}});
  EXPECT_NE(read_file_bytes(dir / ".tokenflow-outputs").find("dir made\n"), std::string::npos);
  run_writing(dir, {{"summary.json", "4"}});
  EXPECT_FALSE(fs::exists(dir / "made"));
}

// The file system gives a deleted file's inode to the next file it creates. An output folder's
// manifest is read (so remembered as an input of this process) and then replaced by rename; the
// next run's summary.json may receive the old manifest's inode, and was then refused as "an output
// of the last run which is an input of this run" (seen in CI). An input is matched by its inode
// only while the path it was read through still names it; a file that merely inherited the inode
// of a deleted input is not that input, while an input still in place is protected.
TEST(OutputDirSafety, ANewFileWithTheInodeOfADeletedInputIsNotThatInput) {
  const auto dir = testing::temp_dir("od-inode-reuse");
  const fs::path input = dir / "input.txt";
  put(input, "read once");
  (void)read_input_file(input, "init.path");
  ASSERT_TRUE(input_file_named_by(input).has_value());
  EXPECT_EQ(input_file_named_by(input)->key, "init.path");
  struct stat st {};
  ASSERT_EQ(::stat(input.c_str(), &st), 0);
  const ino_t freed = st.st_ino;
  fs::remove(input);
  // Files until one receives the freed inode (ext4 and tmpfs reuse it at once; bounded tries).
  fs::path heir;
  for (int k = 0; k < 64 && heir.empty(); ++k) {
    const fs::path candidate = dir / ("new" + std::to_string(k) + ".txt");
    put(candidate, "new");
    ASSERT_EQ(::stat(candidate.c_str(), &st), 0);
    if (st.st_ino == freed) heir = candidate;
    EXPECT_FALSE(input_file_named_by(candidate).has_value()) << candidate;
  }
  if (heir.empty()) GTEST_SKIP() << "this file system did not reuse the freed inode in 64 files";
  // An input still in place keeps its protection, also through another name (a hard link).
  const fs::path kept = dir / "kept.txt";
  put(kept, "read and kept");
  (void)read_input_file(kept, "init.path");
  fs::create_hard_link(kept, dir / "kept-link.txt");
  EXPECT_TRUE(input_file_named_by(dir / "kept-link.txt").has_value());
  EXPECT_FALSE(input_file_named_by(heir).has_value());
}

TEST(OutputDirSafety, ASummaryTheUserWroteIsRefusedBeforeAnyWork) {
  const auto dir = testing::temp_dir("od-summary");
  put(dir / "summary.json", "my own notes");
  EXPECT_THROW(OutputDir out(dir, OutputPlan{"test", {"summary.json"}, {}}), InputError);
  EXPECT_EQ(read_file_bytes(dir / "summary.json"), "my own notes");
  EXPECT_FALSE(has_bookkeeping_debris(dir));
}

TEST(OutputDirSafety, ARerunReplacesTheLastRunsOutputsAsAWhole) {
  const auto dir = testing::temp_dir("od-rerun");
  run_writing(dir, {{"summary.json", "1"}, {"positions.npy", "1"}, {"trajectory.npy", "old n"}, {"snapshots/0.npy", "1"}});
  put(dir / "notes.txt", "mine");
  run_writing(dir, {{"summary.json", "2"}, {"positions.npy", "2"}, {"snapshots/5.npy", "2"}});
  EXPECT_FALSE(fs::exists(dir / "trajectory.npy"));  // the earlier run's, not written again
  EXPECT_FALSE(fs::exists(dir / "snapshots" / "0.npy"));
  EXPECT_EQ(read_file_bytes(dir / "snapshots" / "5.npy"), "2");
  EXPECT_EQ(read_file_bytes(dir / "positions.npy"), "2");
  EXPECT_EQ(read_file_bytes(dir / "notes.txt"), "mine");
  EXPECT_EQ(testing::output_entries(dir), 4);  // summary, positions, snapshots, notes
}

TEST(OutputDirSafety, AFailedCommitRollsBackToWhatTheFolderHeld) {
  const auto dir = testing::temp_dir("od-rollback");
  run_writing(dir, {{"summary.json", "one"}, {"a.npy", "one"}, {"sub/b.npy", "one"}});
  put(dir / "notes.txt", "mine");
  const std::string manifest_before = read_file_bytes(dir / ".tokenflow-outputs");
  // The last step of a commit writes the manifest through a temporary file in the staging area's
  // scratch folder: a file in that folder's place makes it fail after every output has been moved.
  const auto kept = dir / ("tokenflow-results-" + std::to_string(::getpid()));
  {
    OutputDir out(dir, {"test", {}, {}});
    put(out.staged("summary.json"), "two");
    put(out.staged("c.npy"), "two");
    fs::remove_all(out.scratch());
    put(out.scratch(), "a file where the scratch folder was");
    try {
      out.commit();
      ADD_FAILURE() << "the commit went through";
    } catch (const WriteError& e) {
      // The computed results are kept in one place, and the message says where.
      EXPECT_NE(std::string(e.what()).find(kept.string()), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(read_file_bytes(kept / "c.npy"), "two");
  fs::remove_all(kept);
  EXPECT_EQ(read_file_bytes(dir / "summary.json"), "one");
  EXPECT_EQ(read_file_bytes(dir / "a.npy"), "one");
  EXPECT_EQ(read_file_bytes(dir / "sub" / "b.npy"), "one");
  EXPECT_FALSE(fs::exists(dir / "c.npy"));
  EXPECT_EQ(read_file_bytes(dir / "notes.txt"), "mine");
  EXPECT_EQ(read_file_bytes(dir / ".tokenflow-outputs"), manifest_before);
  EXPECT_FALSE(has_bookkeeping_debris(dir));
}

TEST(OutputDirSafety, ACheckpointIsListedBeforeItExistsAndAResumeMayReplaceIt) {
  const auto dir = testing::temp_dir("od-checkpoint");
  const OutputPlan plan{"test", {}, {"checkpoint.bin"}};
  {
    OutputDir out(dir, plan);
    const auto path = out.final_path("checkpoint.bin");
    EXPECT_NE(read_file_bytes(dir / ".tokenflow-outputs").find("inplace checkpoint.bin\n"), std::string::npos);
    replace_file_atomically(path, "state 1", out.scratch());
    // killed here: no commit
  }
  ASSERT_TRUE(fs::exists(dir / "checkpoint.bin"));
  {
    OutputDir resumed(dir, plan);
    replace_file_atomically(resumed.final_path("checkpoint.bin"), "state 2", resumed.scratch());
    put(resumed.staged("summary.json"), "done");
    resumed.commit();
  }
  EXPECT_EQ(read_file_bytes(dir / "checkpoint.bin"), "state 2");
  EXPECT_EQ(read_file_bytes(dir / "summary.json"), "done");
  // A checkpoint.bin that tokenflow did not write is refused.
  const auto other = testing::temp_dir("od-checkpoint-foreign");
  put(other / "checkpoint.bin", "mine");
  EXPECT_THROW(OutputDir(other, plan), InputError);
  EXPECT_EQ(read_file_bytes(other / "checkpoint.bin"), "mine");
}

TEST(OutputDirSafety, AManifestCannotPointOutsideTheFolder) {
  const auto dir = testing::temp_dir("od-hostile-manifest");
  put(dir.parent_path() / "victim.txt", "outside");
  put(dir / ".tokenflow-outputs", "../victim.txt\n");
  EXPECT_THROW(OutputDir out(dir, {"test", {}, {}}), InputError);
  for (const std::string record : {"file 8 0 0000000000000000 ../victim.txt", "dir ..", "inplace /etc/passwd",
                                   "file 8 0 0000000000000000 sub/../../victim.txt"}) {
    put(dir / ".tokenflow-outputs", "tokenflow-outputs 2\ncommand test\n" + record + "\n");
    EXPECT_THROW(OutputDir out(dir, {"test", {}, {}}), InputError) << record;
  }
  EXPECT_EQ(read_file_bytes(dir.parent_path() / "victim.txt"), "outside");
}

// A staging area as a run killed at some point leaves it: DIR/.staging-PID-TOKEN with its marker.
fs::path killed_runs_staging(const fs::path& dir, pid_t pid) {
  const std::string id = std::to_string(pid) + "-" + random_token();
  const fs::path staging = dir / (".staging-" + id);
  fs::create_directories(staging / "new");
  fs::create_directories(staging / "tmp");
  put(staging / ("tokenflow-run-" + id), "");
  return staging;
}

// Files and folders of the user's named as tokenflow's bookkeeping is named, or was by earlier
// versions: with the pid of a finished process, of this one, and a staging name with a token but
// without the marker (name -> content).
std::map<std::string, std::string> plant_lookalikes(const fs::path& dir, pid_t gone) {
  const std::string g = std::to_string(gone), me = std::to_string(::getpid());
  std::map<std::string, std::string> planted{
      {".staging-42/thesis.tex", "my thesis"},
      {".staging-" + g + "/c.npy", "mine"},
      {".staging-" + me + "/notes.txt", "mine"},
      {".staging-" + g + "-" + random_token() + "/new/summary.json", "not tokenflow's: no marker"},
      {".rollback-7/data.txt", "my data"},
      {".rollback-7/old/notes.txt", "my notes"},
      {".rollback-7/next-manifest", "tokenflow-outputs 2\ncommand test\n"},
      {".rollback-" + g + "/old/a.npy", "mine"},
      {".tokenflow-lock", "12345\n"},
      {".tokenflow-outputs.tmp-5", "half"},
      {".tokenflow-outputs.tmp-" + me, "mine"},
      {"checkpoint.bin.tmp-5", "mine"},
      {"summary.json.tmp-" + me, "mine"},
      {"notes.txt.tmp-" + g, "mine"},
      {"tokenflow-results-" + me + "/summary.json", "kept by the user"},
      {"sub/.staging-1/x", "mine"},
  };
  for (const auto& [name, text] : planted) put(dir / name, text);
  return planted;
}

void expect_untouched(const fs::path& dir, const std::map<std::string, std::string>& planted) {
  for (const auto& [name, text] : planted) {
    EXPECT_TRUE(fs::is_regular_file(dir / name)) << name << " was moved or removed";
    if (fs::is_regular_file(dir / name)) {
      EXPECT_EQ(read_file_bytes(dir / name), text) << name << " was changed";
    }
  }
  EXPECT_FALSE(fs::exists(dir / "notes.txt")) << "a file was moved out of a folder of the user's";
}

TEST(OutputDirSafety, ACommitCutByAKillIsRestoredByTheNextRun) {
  const auto dir = testing::temp_dir("od-debris");
  run_writing(dir, {{"summary.json", "one"}, {"a.npy", "one"}});
  const std::string manifest_one = read_file_bytes(dir / ".tokenflow-outputs");
  // A process that is gone: its pid is free.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const auto planted = plant_lookalikes(dir, child);
  // As a kill between "move aside" and the manifest leaves it: the journal (the manifest the commit
  // was writing), a.npy aside, the new a.npy and b.npy already in place.
  fs::path staging = killed_runs_staging(dir, child);
  fs::create_directories(staging / "old");
  fs::rename(dir / "a.npy", staging / "old" / "a.npy");
  put(dir / "a.npy", "two");
  put(dir / "b.npy", "two");
  OutputManifest next;
  next.command = "test";
  next.files["a.npy"] = *record_file(dir / "a.npy");
  next.files["b.npy"] = *record_file(dir / "b.npy");
  put(staging / "journal", output_manifest_text(next));
  // A run killed before its commit, and one killed between its mkdir and its marker.
  put(killed_runs_staging(dir, child) / "new" / "c.npy", "half");
  fs::create_directory(dir / (".staging-" + std::to_string(child) + "-" + random_token()));
  { OutputDir out(dir, {"test", {}, {}}); }
  EXPECT_EQ(read_file_bytes(dir / "a.npy"), "one");
  EXPECT_FALSE(fs::exists(dir / "b.npy"));
  EXPECT_EQ(read_file_bytes(dir / ".tokenflow-outputs"), manifest_one);
  expect_untouched(dir, planted);
  // Only the user's look-alikes are left: every staging area tokenflow made is gone.
  EXPECT_EQ(staging_areas(dir).size(), 4u);

  // Killed after the commit point: the new outputs stay, only the clean-up is finished.
  staging = killed_runs_staging(dir, child);
  fs::create_directories(staging / "old");
  put(staging / "old" / "a.npy", "one");
  put(dir / "a.npy", "two");
  next.files.erase("b.npy");
  next.files["a.npy"] = *record_file(dir / "a.npy");
  put(staging / "journal", output_manifest_text(next));
  write_output_manifest(dir, next, {});
  { OutputDir out(dir, {"test", {}, {}}); }
  EXPECT_EQ(read_file_bytes(dir / "a.npy"), "two");
  expect_untouched(dir, planted);
  EXPECT_EQ(staging_areas(dir).size(), 4u);
}

// The user's files named like tokenflow's bookkeeping survive runs, reruns, refusals, in-place
// checkpoints and a failed commit, in content and place.
TEST(OutputDirSafety, FilesNamedLikeTokenflowsBookkeepingAreNeverTouched) {
  const auto dir = testing::temp_dir("od-lookalikes");
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  const auto planted = plant_lookalikes(dir, child);
  run_writing(dir, {{"summary.json", "one"}, {"sub/a.npy", "one"}});
  expect_untouched(dir, planted);
  run_writing(dir, {{"summary.json", "two"}});
  expect_untouched(dir, planted);
  {
    OutputDir out(dir, {"test", {}, {"checkpoint.bin"}});
    replace_file_atomically(out.final_path("checkpoint.bin"), "state", out.scratch());
    put(out.staged("summary.json"), "three");
    out.commit();
  }
  expect_untouched(dir, planted);
  EXPECT_EQ(read_file_bytes(dir / "summary.json"), "three");
  EXPECT_THROW(OutputDir(dir, {"other", {}, {}}), InputError);
  expect_untouched(dir, planted);
  EXPECT_EQ(staging_areas(dir).size(), 4u);  // the user's four
  // A file of the user's named .tokenflow-outputs (no header) is refused, not read or replaced.
  const auto other = testing::temp_dir("od-lookalike-manifest");
  put(other / "thesis.tex", "mine");
  for (const std::string& text : {std::string("thesis.tex\n"), std::string(), std::string("# notes\n")}) {
    put(other / ".tokenflow-outputs", text);
    try {
      run_writing(other, {{"thesis.tex", "tokenflow's"}});
      ADD_FAILURE() << "a manifest tokenflow did not write was trusted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("not a manifest tokenflow wrote"), std::string::npos) << e.what();
    }
    EXPECT_EQ(read_file_bytes(other / "thesis.tex"), "mine");
    EXPECT_EQ(read_file_bytes(other / ".tokenflow-outputs"), text);
  }
}

// The same rules seen from the CLI, as a user meets them.
TEST(OutputDirCli, ReproduceAndDemoKeepTheUsersSubfolders) {
  const auto dir = testing::temp_dir("od-cli-subfolders");
  put(dir / "reproduce" / "snapshots" / "keep.txt", "mine");  // reproduce sphere writes snapshots/
  auto r = testing::run_cli("reproduce sphere --quick --no-figures --out " + (dir / "reproduce").string());
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(read_file_bytes(dir / "reproduce" / "snapshots" / "keep.txt"), "mine");
  EXPECT_TRUE(fs::exists(dir / "reproduce" / "snapshots" / "positions.npy"));
  EXPECT_FALSE(has_bookkeeping_debris(dir / "reproduce"));

  put(dir / "demo" / "sphere" / "keep.txt", "mine");  // demo writes sphere/
  r = testing::run_cli("demo --quick --no-figures --out " + (dir / "demo").string());
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(read_file_bytes(dir / "demo" / "sphere" / "keep.txt"), "mine");
  EXPECT_TRUE(fs::exists(dir / "demo" / "summary.json"));
  EXPECT_FALSE(has_bookkeeping_debris(dir / "demo"));
}

TEST(OutputDirCli, AFolderNamedLikeAnOutputIsRefusedBeforeComputing) {
  const auto dir = testing::temp_dir("od-cli-blocked");
  fs::create_directories(dir / "positions.npy");
  const auto r = testing::run_cli("simulate --set init.n=32 --set run.T=0.05 --out " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find((dir / "positions.npy").string()), std::string::npos) << r.stderr_text;
  EXPECT_FALSE(fs::exists(dir / "summary.json"));  // no summary that reports success
  EXPECT_TRUE(fs::is_directory(dir / "positions.npy"));
  EXPECT_FALSE(has_bookkeeping_debris(dir));  // refused before any work: no results folder either
}

TEST(OutputDirCli, ARerunLeavesNoOutputOfTheEarlierRun) {
  const auto dir = testing::temp_dir("od-cli-rerun") / "run";
  ASSERT_EQ(testing::run_cli("simulate --set init.n=48 --set run.T=0.05 --set run.save_every=1 --out " + dir.string()).exit_code, 0);
  ASSERT_TRUE(fs::exists(dir / "trajectory.npy"));
  put(dir / "notes.txt", "mine");
  ASSERT_EQ(testing::run_cli("simulate --set init.n=32 --set run.T=0.05 --out " + dir.string()).exit_code, 0);
  EXPECT_FALSE(fs::exists(dir / "trajectory.npy"));
  EXPECT_FALSE(fs::exists(dir / "times.npy"));
  EXPECT_EQ(read_npy(dir / "positions.npy").shape[0], 32u);
  EXPECT_EQ(read_file_bytes(dir / "notes.txt"), "mine");
}

// ---- the ledger: what a user meets, through the real CLI ------------------------------------------

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> w;
  std::istringstream in(s);
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

// Starts build/tokenflow with `args` in the background (stdout and stderr to /dev/null, CI=1).
pid_t start_cli_in_background(const std::string& args) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::setenv("CI", "1", 1);
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    std::vector<std::string> all{TOKENFLOW_CLI};
    for (auto& w : split_words(args)) all.push_back(w);
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// Polls `done` every 10 ms for at most `seconds`.
bool poll_until(const std::function<bool()>& done, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

int exit_code_of(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Every regular file under `dir` (relative path -> bytes): what a run must leave as it was.
std::map<std::string, std::string> files_under_dir(const fs::path& dir) {
  std::map<std::string, std::string> all;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) all[e.path().lexically_relative(dir).generic_string()] = read_file_bytes(e.path());
  return all;
}

long line_count(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

TEST(OutputDir, UserFileInsideWrittenSubfolderSurvivesRerun) {
  const auto dir = testing::temp_dir("od-ledger-note") / "R";
  const std::string cmd = "reproduce sphere --quick --no-figures --out " + dir.string();
  ASSERT_EQ(testing::run_cli(cmd).exit_code, 0);
  put(dir / "snapshots" / "mynotes.txt", "x\n");
  const auto r = testing::run_cli(cmd);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(read_file_bytes(dir / "snapshots" / "mynotes.txt"), "x\n");
  // The manifest lists the subfolder's files one by one, and not the user's.
  const std::string manifest = read_file_bytes(dir / ".tokenflow-outputs");
  EXPECT_NE(manifest.find(" snapshots/positions.npy\n"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("command reproduce sphere\n"), std::string::npos) << manifest;
  EXPECT_EQ(manifest.find("mynotes"), std::string::npos) << manifest;
  EXPECT_FALSE(has_bookkeeping_debris(dir));
}

TEST(OutputDir, AnotherCommandIsRefusedBeforeComputing) {
  const auto base = testing::temp_dir("od-ledger-other");
  const auto s = base / "S";
  ASSERT_EQ(testing::run_cli("simulate --set init.n=50 --set run.save_every=1 --out " + s.string()).exit_code, 0);
  const auto before = files_under_dir(s);
  const std::string refusal = s.string() + " holds the outputs of `simulate`; choose another --out";
  // The user's case: the other command reads the run's own outputs.
  auto r = testing::run_cli("wasserstein --x " + (s / "initial.npy").string() + " --y " + (s / "positions.npy").string() +
                            " --out " + s.string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find(refusal), std::string::npos) << r.stderr_text;
  EXPECT_EQ(line_count(r.stderr_text), 1) << r.stderr_text;
  // Before computing: an ot that would iterate for minutes (10^8 iterations at epsilon 0.002 and
  // tol 1e-12 on 3000 points; SignalledRun relies on it running for seconds) is refused at once.
  std::mt19937_64 rng(testing::fresh_seed());
  const Eigen::MatrixXd x = testing::random_matrix(rng, 3000, 3, 1.0), y = testing::random_matrix(rng, 3000, 3, 1.0);
  write_npy(base / "x.npy", x.data(), {3000, 3});
  write_npy(base / "y.npy", y.data(), {3000, 3});
  const auto started = std::chrono::steady_clock::now();
  r = testing::run_cli("ot --x " + (base / "x.npy").string() + " --y " + (base / "y.npy").string() +
                       " --epsilon 0.002 --tol 1e-12 --max-iter 100000000 --out " + s.string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find(refusal), std::string::npos) << r.stderr_text;
  EXPECT_LT(seconds, 10.0);
  EXPECT_EQ(files_under_dir(s), before);
  EXPECT_FALSE(has_bookkeeping_debris(s));
  // resume continues the same run: it is not another command (here there is nothing to resume).
  r = testing::run_cli("resume --out " + s.string());
  EXPECT_EQ(r.stderr_text.find("holds the outputs"), std::string::npos) << r.stderr_text;
}

TEST(OutputDir, InputInsideOutIsNeverRemoved) {
  const auto base = testing::temp_dir("od-ledger-input");
  const auto s = base / "S";
  ASSERT_EQ(testing::run_cli("simulate --set init.n=40 --set run.T=0.05 --out " + s.string()).exit_code, 0);
  auto before = files_under_dir(s);
  // A rerun of the same command that reads the last run's positions would replace them.
  auto r = testing::run_cli("simulate --set init.kind=file --set init.path=" + (s / "positions.npy").string() +
                            " --set run.T=0.05 --out " + s.string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find((s / "positions.npy").string()), std::string::npos) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("init.path"), std::string::npos) << r.stderr_text;
  EXPECT_EQ(line_count(r.stderr_text), 1) << r.stderr_text;
  EXPECT_EQ(files_under_dir(s), before);
  // The same with flags: ot's potentials given back to ot.
  std::mt19937_64 rng(testing::fresh_seed());
  const Eigen::MatrixXd x = testing::random_matrix(rng, 20, 2, 1.0), y = testing::random_matrix(rng, 15, 2, 1.0);
  write_npy(base / "x.npy", x.data(), {20, 2});
  write_npy(base / "y.npy", y.data(), {15, 2});
  const auto d = base / "D";
  ASSERT_EQ(testing::run_cli("ot --x " + (base / "x.npy").string() + " --y " + (base / "y.npy").string() + " --out " + d.string())
                .exit_code,
            0);
  before = files_under_dir(d);
  r = testing::run_cli("ot --x " + (d / "f.npy").string() + " --y " + (d / "g.npy").string() + " --out " + d.string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find((d / "f.npy").string() + ": --x: "), std::string::npos) << r.stderr_text;
  EXPECT_EQ(files_under_dir(d), before);
  // A file of the user's inside DIR is read and kept.
  write_npy(d / "mine.npy", x.data(), {20, 2});
  r = testing::run_cli("ot --x " + (d / "mine.npy").string() + " --y " + (base / "y.npy").string() + " --out " + d.string());
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(read_npy(d / "mine.npy").shape, (std::vector<std::size_t>{20, 2}));
  EXPECT_FALSE(has_bookkeeping_debris(d));
}

TEST(OutputDir, SecondProcessIsRefusedNamingThePid) {
  const auto dir = testing::temp_dir("od-ledger-busy") / "run";
  const pid_t first = start_cli_in_background("simulate --set init.n=3000 --set run.T=1000 --out " + dir.string());
  const std::string pid = std::to_string(first);
  // The run has locked DIR once its staging area is there.
  ASSERT_TRUE(poll_until([&] { return fs::exists(dir) && !staging_areas(dir).empty(); }, 60))
      << "the first run did not take the lock";
  for (const std::string cmd : {"simulate --set init.n=10 --set run.T=0.05", "gaussian"}) {
    const auto r = testing::run_cli(cmd + " --out " + dir.string());
    EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.stderr_text;
    EXPECT_NE(r.stderr_text.find(dir.string() + " is in use by another tokenflow process (pid " + pid + ")"),
              std::string::npos)
        << r.stderr_text;
    EXPECT_EQ(line_count(r.stderr_text), 1) << r.stderr_text;
  }
  ::kill(first, SIGTERM);
  EXPECT_EQ(exit_code_of(first), 128 + SIGTERM);
  // Nothing of either run is left, and the folder is free again.
  EXPECT_FALSE(fs::exists(dir / "summary.json"));
  if (fs::exists(dir)) {
    EXPECT_FALSE(has_bookkeeping_debris(dir));
  }
  const auto r = testing::run_cli("simulate --set init.n=10 --set run.T=0.05 --out " + dir.string());
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
}

TEST(OutputDir, ResumeAgainstRunningSimulateIsRefused) {
  const auto dir = testing::temp_dir("od-ledger-resume") / "run";
  const pid_t first = start_cli_in_background("simulate --set init.n=3000 --set run.T=1000 --set run.checkpoint_every=5 --out " + dir.string());
  ASSERT_TRUE(poll_until([&] { return fs::exists(dir / "checkpoint.bin"); }, 120)) << "no checkpoint was written";
  const auto r = testing::run_cli("resume --out " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("(pid " + std::to_string(first) + ")"), std::string::npos) << r.stderr_text;
  EXPECT_EQ(line_count(r.stderr_text), 1) << r.stderr_text;
  ::kill(first, SIGKILL);
  exit_code_of(first);
  // The running simulate's checkpoint is whole (its hash verifies) and listed as tokenflow's; the
  // lock went with the killed process.
  EXPECT_NO_THROW(read_checkpoint_file(dir / "checkpoint.bin", CheckpointKind::simulate));
  EXPECT_NE(read_file_bytes(dir / ".tokenflow-outputs").find("inplace checkpoint.bin\n"), std::string::npos);
  EXPECT_NO_THROW(DirLock lock(dir));
}

TEST(OutputDir, RefusedCommitLeavesNoDebris) {
  const auto base = testing::temp_dir("od-ledger-debris");
  // Refused before any work, into a folder that did not exist: it still does not.
  auto r = testing::run_cli("resume --out " + (base / "new").string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_FALSE(fs::exists(base / "new"));
  // Refused before any work, into a folder of the user's: it is as it was.
  const auto mine = base / "mine";
  put(mine / "summary.json", "my notes");
  put(mine / "sub" / "a.txt", "more");
  const auto before = files_under_dir(mine);
  r = testing::run_cli("simulate --set init.n=10 --set run.T=0.05 --out " + mine.string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find((mine / "summary.json").string()), std::string::npos) << r.stderr_text;
  EXPECT_EQ(files_under_dir(mine), before);
  EXPECT_FALSE(has_bookkeeping_debris(mine));
  EXPECT_EQ(testing::output_entries(mine), 2);  // summary.json and sub/: nothing else
  // Refused at the commit (a name taken while the run computed): the results are kept in one
  // folder, the message says where, and there is nothing else.
  const auto late = base / "late";
  fs::create_directories(late);
  const auto kept = late / ("tokenflow-results-" + std::to_string(::getpid()));
  {
    OutputDir out(late, {"test", {"summary.json"}, {}});
    put(out.staged("summary.json"), "{}");
    put(out.staged("sub/late.npy"), "computed");
    put(late / "sub" / "late.npy", "mine");
    try {
      out.commit();
      ADD_FAILURE() << "the commit went through";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("this run's outputs are in " + kept.string()), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(read_file_bytes(late / "sub" / "late.npy"), "mine");
  EXPECT_EQ(read_file_bytes(kept / "sub" / "late.npy"), "computed");
  fs::remove_all(kept);
  EXPECT_FALSE(has_bookkeeping_debris(late));
  EXPECT_FALSE(fs::exists(late / ".tokenflow-outputs"));
}

TEST(OutputDir, EditedOutputIsRefused) {
  const auto dir = testing::temp_dir("od-ledger-edited") / "S";
  const std::string cmd = "simulate --set init.n=40 --set run.T=0.05 --out " + dir.string();
  ASSERT_EQ(testing::run_cli(cmd).exit_code, 0);
  // One byte of the data changed, the size kept (so the hash decides).
  const std::string original = read_file_bytes(dir / "positions.npy");
  std::mt19937_64 rng(testing::fresh_seed());
  std::string edited = original;
  const std::size_t at = std::uniform_int_distribution<std::size_t>(128, edited.size() - 1)(rng);
  edited[at] = static_cast<char>(edited[at] ^ 0x01);
  std::ofstream(dir / "positions.npy", std::ios::binary | std::ios::trunc) << edited;
  const auto before = files_under_dir(dir);
  auto r = testing::run_cli(cmd);
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find((dir / "positions.npy").string() + ": --out: changed since tokenflow wrote it"),
            std::string::npos)
      << r.stderr_text;
  EXPECT_EQ(files_under_dir(dir), before);
  EXPECT_FALSE(has_bookkeeping_debris(dir));
  // The same bytes written again (a new modification time) are still tokenflow's.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::ofstream(dir / "positions.npy", std::ios::binary | std::ios::trunc) << original;
  r = testing::run_cli(cmd);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
}

TEST(OutputDir, LockIsNotInheritedByChildProcesses) {
  const auto dir = testing::temp_dir("od-ledger-cloexec");
  pid_t child = -1;
  {
    DirLock lock(dir);
    child = ::fork();
    if (child == 0) {
      ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Once the child runs `sleep`, it holds no descriptor of ours.
    ASSERT_TRUE(poll_until([&] { return read_file_bytes("/proc/" + std::to_string(child) + "/comm") == "sleep\n"; }, 10));
    try {
      DirLock second(dir);
      ADD_FAILURE() << "a second lock was granted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("(pid " + std::to_string(::getpid()) + ")"), std::string::npos) << e.what();
    }
  }
  // Released by this process while its child still runs.
  EXPECT_NO_THROW(DirLock again(dir));
  EXPECT_FALSE(fs::exists(dir / ".tokenflow-lock"));
  ::kill(child, SIGKILL);
  exit_code_of(child);
}

// A small tmpfs as a full disk. Mounting needs root (CI and the developers' machines run as root);
// elsewhere the test is skipped and says so.
class FullDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    mount_point_ = testing::temp_dir("full-disk");
    if (::mount("tmpfs", mount_point_.c_str(), "tmpfs", 0, "size=64k") != 0)
      GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) ::umount(mount_point_.c_str());
  }
  fs::path mount_point_;
  bool mounted_ = false;
};

TEST_F(FullDisk, ADurableWriteThatDoesNotFitSaysNoSpaceLeft) {
  const std::string big(1 << 20, 'x');
  try {
    write_file_durably(mount_point_ / "big.bin", big);
    FAIL() << "a 1 MiB write into a 64 KiB tmpfs succeeded";
  } catch (const WriteError& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("big.bin"), std::string::npos) << e.what();
  }
}

TEST_F(FullDisk, CliRunsExitOneAndCommitNothing) {
  // positions.npy of n = 5000 in R^2 is 80 KB: it cannot fit in 64 KiB (one Euler step: quick).
  const std::string big = "simulate --set init.n=5000 --set run.integrator=euler --set run.dt=0.01 --set run.T=0.01";
  const auto out = mount_point_ / "run";
  const auto r = testing::run_cli(big + " --out " + out.string());
  EXPECT_EQ(r.exit_code, 1) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("No space left on device"), std::string::npos) << r.stderr_text;
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
  EXPECT_FALSE(fs::exists(out / "summary.json"));
  EXPECT_FALSE(fs::exists(out));  // created by the run and empty again: removed
  // A folder that held an earlier run keeps it whole.
  const auto kept = mount_point_ / "kept";
  ASSERT_EQ(testing::run_cli("simulate --set init.n=16 --set run.T=0.01 --out " + kept.string()).exit_code, 0);
  const std::string before = read_file_bytes(kept / "summary.json");
  const auto again = testing::run_cli(big + " --out " + kept.string());
  EXPECT_EQ(again.exit_code, 1) << again.stderr_text;
  EXPECT_EQ(read_file_bytes(kept / "summary.json"), before);
  EXPECT_FALSE(has_bookkeeping_debris(kept));
}

}  // namespace
}  // namespace tokenflow
