// Output directories never destroy what tokenflow did not write; commits are all or nothing;
// outputs are written durably and a full disk is an error, not an empty file.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "test_util.hpp"
#include "tokenflow/durable_file.hpp"
#include "tokenflow/error.hpp"
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
  OutputDir out(dir);
  for (const auto& [name, text] : files) put(out.staged(name), text);
  out.commit();
}

bool has_bookkeeping_debris(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".staging-", 0) == 0 || n.rfind(".rollback-", 0) == 0 || n.find(".tmp-") != std::string::npos) return true;
  }
  return false;
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

TEST(OutputDirSafety, AFolderOfTheUserWithAnOutputNameIsNeverRemoved) {
  // demo writes DIR/sphere/; a user's DIR/sphere/ must survive (the run is refused, its results kept).
  const auto dir = testing::temp_dir("od-subfolder");
  put(dir / "sphere" / "keep.txt", "mine");
  try {
    OutputDir out(dir);
    put(out.staged("sphere/summary.json"), "{}");
    put(out.staged("summary.json"), "{}");
    out.commit();
    FAIL() << "the commit over a folder of the user went through";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "sphere").string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tokenflow did not write it"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file_bytes(dir / "sphere" / "keep.txt"), "mine");
  EXPECT_FALSE(fs::exists(dir / "summary.json"));
  // Nothing computed is lost: the outputs are kept whole in a folder of their own.
  const auto kept = dir / ("tokenflow-results-" + std::to_string(::getpid()));
  EXPECT_TRUE(fs::exists(kept / "sphere" / "summary.json"));
  EXPECT_FALSE(has_bookkeeping_debris(dir));
}

TEST(OutputDirSafety, ASummaryTheUserWroteIsRefusedBeforeAnyWork) {
  const auto dir = testing::temp_dir("od-summary");
  put(dir / "summary.json", "my own notes");
  EXPECT_THROW(OutputDir out(dir), InputError);
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
  // The last step of a commit writes the manifest through DIR/.tokenflow-outputs.tmp-PID: a folder
  // of that name makes it fail after every output has been moved.
  const auto blocker = dir / (".tokenflow-outputs.tmp-" + std::to_string(::getpid()));
  fs::create_directory(blocker);
  {
    OutputDir out(dir);
    put(out.staged("summary.json"), "two");
    put(out.staged("c.npy"), "two");
    EXPECT_THROW(out.commit(), WriteError);
  }
  fs::remove(blocker);
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
  {
    OutputDir out(dir);
    const auto path = out.final_path("checkpoint.bin");
    EXPECT_NE(read_file_bytes(dir / ".tokenflow-outputs").find("checkpoint.bin\n"), std::string::npos);
    replace_file_atomically(path, "state 1");
    // killed here: no commit
  }
  ASSERT_TRUE(fs::exists(dir / "checkpoint.bin"));
  {
    OutputDir resumed(dir);
    replace_file_atomically(resumed.final_path("checkpoint.bin"), "state 2");
    put(resumed.staged("summary.json"), "done");
    resumed.commit();
  }
  EXPECT_EQ(read_file_bytes(dir / "checkpoint.bin"), "state 2");
  EXPECT_EQ(read_file_bytes(dir / "summary.json"), "done");
  // A checkpoint.bin that tokenflow did not write is refused.
  const auto other = testing::temp_dir("od-checkpoint-foreign");
  put(other / "checkpoint.bin", "mine");
  OutputDir out(other);
  EXPECT_THROW(out.final_path("checkpoint.bin"), InputError);
  EXPECT_EQ(read_file_bytes(other / "checkpoint.bin"), "mine");
}

TEST(OutputDirSafety, AManifestCannotPointOutsideTheFolder) {
  const auto dir = testing::temp_dir("od-hostile-manifest");
  put(dir.parent_path() / "victim.txt", "outside");
  put(dir / ".tokenflow-outputs", "../victim.txt\n");
  EXPECT_THROW(OutputDir out(dir), InputError);
  EXPECT_EQ(read_file_bytes(dir.parent_path() / "victim.txt"), "outside");
}

TEST(OutputDirSafety, ACommitCutByAKillIsRestoredByTheNextRun) {
  const auto dir = testing::temp_dir("od-debris");
  run_writing(dir, {{"summary.json", "one"}, {"a.npy", "one"}});
  // A process that is gone: its pid is free.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  // As a kill between "move aside" and "move in" leaves it: a.npy aside, not yet replaced.
  const auto rollback = dir / (".rollback-" + std::to_string(child));
  fs::create_directory(rollback);
  fs::rename(dir / "a.npy", rollback / "a.npy");
  put(dir / (".staging-" + std::to_string(child)) / "a.npy", "half");
  // and a checkpoint it was writing when it was killed (a name of its manifest) + ".tmp-PID";
  // a file of the user's with a similar name stays.
  put(dir / ("a.npy.tmp-" + std::to_string(child)), "half");
  put(dir / ("notes.txt.tmp-" + std::to_string(child)), "mine");
  OutputDir out(dir);
  EXPECT_EQ(read_file_bytes(dir / "a.npy"), "one");
  EXPECT_FALSE(fs::exists(dir / ("a.npy.tmp-" + std::to_string(child))));
  EXPECT_EQ(read_file_bytes(dir / ("notes.txt.tmp-" + std::to_string(child))), "mine");
  EXPECT_FALSE(fs::exists(rollback));
  EXPECT_FALSE(fs::exists(dir / (".staging-" + std::to_string(child))));
}

// The same rules seen from the CLI, as a user meets them.
TEST(OutputDirCli, ReproduceAndDemoKeepTheUsersSubfolders) {
  const auto dir = testing::temp_dir("od-cli-subfolders");
  put(dir / "reproduce" / "snapshots" / "keep.txt", "mine");  // reproduce sphere writes snapshots/
  auto r = testing::run_cli("reproduce sphere --quick --no-figures --out " + (dir / "reproduce").string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("snapshots exists and tokenflow did not write it"), std::string::npos) << r.stderr_text;
  EXPECT_EQ(read_file_bytes(dir / "reproduce" / "snapshots" / "keep.txt"), "mine");
  EXPECT_FALSE(fs::exists(dir / "reproduce" / "summary.json"));
  EXPECT_FALSE(has_bookkeeping_debris(dir / "reproduce"));

  put(dir / "demo" / "sphere" / "keep.txt", "mine");  // demo writes sphere/
  r = testing::run_cli("demo --quick --no-figures --out " + (dir / "demo").string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_EQ(read_file_bytes(dir / "demo" / "sphere" / "keep.txt"), "mine");
  EXPECT_FALSE(fs::exists(dir / "demo" / "summary.json"));
  EXPECT_FALSE(has_bookkeeping_debris(dir / "demo"));
}

TEST(OutputDirCli, AFolderNamedLikeAnOutputStopsTheCommitBeforeAnyChange) {
  const auto dir = testing::temp_dir("od-cli-blocked");
  fs::create_directories(dir / "positions.npy");
  const auto r = testing::run_cli("simulate --set init.n=32 --set run.T=0.05 --out " + dir.string());
  EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
  EXPECT_EQ(std::count(r.stderr_text.begin(), r.stderr_text.end(), '\n'), 1) << r.stderr_text;
  EXPECT_FALSE(fs::exists(dir / "summary.json"));  // no summary that reports success
  EXPECT_TRUE(fs::is_directory(dir / "positions.npy"));
  long kept = 0;
  for (const auto& e : fs::directory_iterator(dir))
    kept += e.path().filename().string().rfind("tokenflow-results-", 0) == 0 && fs::exists(e.path() / "positions.npy");
  EXPECT_EQ(kept, 1);
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
