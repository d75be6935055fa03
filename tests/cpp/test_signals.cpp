// SIGINT and SIGTERM at random moments, for every long-running command: the run stops, prints
// "tokenflow: interrupted", exits 130 / 143, leaves no staging folder or temporary file, commits
// nothing, and keeps its checkpoint where it writes one.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "test_util.hpp"
#include "tokenflow/io.hpp"

namespace tokenflow {
namespace {

namespace fs = std::filesystem;

struct Stopped {
  int code;            // exit code, or 128 + signal when the signal's default action ended it
  std::string stderr_text;
  double seconds;      // from the signal to the end
};

// Starts `build/tokenflow args` (words split on spaces), sends `sig` after `delay` seconds and waits
// at most `limit` seconds for the end (then SIGKILL, and the test fails).
Stopped run_and_signal(const std::vector<std::string>& args, int sig, double delay, double limit = 90) {
  const auto err = testing::temp_dir("signal-stderr") / "stderr.txt";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::setenv("CI", "1", 1);
    // A test runner may start us with SIGINT ignored (a background job of a script): the CLI must
    // see the signal as a user would.
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    std::vector<std::string> all{TOKENFLOW_CLI};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(delay));
  ::kill(pid, sig);
  const auto sent = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() - sent > std::chrono::duration<double>(limit)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "still running " << limit << " s after the signal";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  std::ifstream in(err);
  std::stringstream ss;
  ss << in.rdbuf();
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return {code, ss.str(), seconds};
}

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> w;
  std::istringstream in(s);
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

bool has_debris(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return false;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".staging-", 0) == 0 || n.rfind(".rollback-", 0) == 0 || n.find(".tmp-") != std::string::npos) return true;
  }
  return false;
}

struct LongRun {
  std::string name;
  std::string args;         // without --out
  bool checkpoints = false;  // writes DIR/checkpoint.bin, which must be kept
};

void PrintTo(const LongRun& r, std::ostream* os) { *os << r.name; }

class SignalledRun : public ::testing::TestWithParam<LongRun> {};

// Point clouds for the OT commands: 3000 x 3 each, Gaussian.
fs::path ot_inputs() {
  static const fs::path dir = [] {
    const auto d = testing::temp_dir("signal-ot-inputs");
    std::mt19937_64 rng(testing::fresh_seed());
    const Eigen::MatrixXd x = testing::random_matrix(rng, 3000, 3, 1.0), y = testing::random_matrix(rng, 3000, 3, 1.0);
    write_npy(d / "x.npy", x.data(), {3000, 3});  // a Gaussian cloud is symmetric in its layout
    write_npy(d / "y.npy", y.data(), {3000, 3});
    return d;
  }();
  return dir;
}

TEST_P(SignalledRun, StopsCleanlyWithTheSignalsExitCode) {
  const LongRun& run = GetParam();
  std::mt19937_64 rng(testing::fresh_seed());
  const int sig = std::uniform_int_distribution<int>(0, 1)(rng) ? SIGINT : SIGTERM;
  // A random moment from just after start-up to well into the computation.
  const double delay = std::uniform_real_distribution<double>(0.2, 2.5)(rng);
  std::string args = run.args;
  const std::string inputs = ot_inputs().string();
  for (std::size_t p; (p = args.find("@IN@")) != std::string::npos;) args.replace(p, 4, inputs);
  const auto out = testing::temp_dir("signal-" + run.name) / "run";
  auto argv = words(args);
  argv.push_back("--out");
  argv.push_back(out.string());
  const Stopped r = run_and_signal(argv, sig, delay);
  SCOPED_TRACE(std::string(sig == SIGINT ? "SIGINT" : "SIGTERM") + " after " + std::to_string(delay) + " s");
  EXPECT_EQ(r.code, 128 + sig) << r.stderr_text;
  // Killed by the default action only before main() could take the signal: then nothing exists yet.
  const bool before_main = r.stderr_text.empty() && !fs::exists(out);
  if (!before_main) {
    EXPECT_NE(r.stderr_text.find("tokenflow: interrupted"), std::string::npos) << r.stderr_text;
  }
  EXPECT_FALSE(has_debris(out));
  EXPECT_FALSE(fs::exists(out / "summary.json"));
  if (run.checkpoints && fs::exists(out)) {
    // Whatever checkpoint was written is whole (the reader verifies its hash) and listed as ours.
    if (fs::exists(out / "checkpoint.bin")) {
      std::ifstream manifest(out / ".tokenflow-outputs");
      std::stringstream ss;
      ss << manifest.rdbuf();
      EXPECT_NE(ss.str().find("checkpoint.bin"), std::string::npos);
    }
  }
  // Commands that poll stop within their grace (2 s); a checkpointing step of these sizes is short.
  EXPECT_LT(r.seconds, 30.0);
}

INSTANTIATE_TEST_SUITE_P(
    EveryLongCommand, SignalledRun,
    ::testing::Values(
        LongRun{"simulate", "simulate --set init.n=3000 --set run.T=1000 --set run.checkpoint_every=20", true},
        LongRun{"train",
                "train --set task.n=6 --set model.width=8 --set model.layers=1 --set model.heads=2 --set model.k=4"
                " --set train.steps=100000000 --set train.checkpoint_every=50",
                true},
        LongRun{"ot", "ot --x @IN@/x.npy --y @IN@/y.npy --epsilon 0.002 --tol 1e-12 --max-iter 100000000", false},
        LongRun{"wasserstein",
                "wasserstein --x @IN@/x.npy --y @IN@/y.npy --method sinkhorn --epsilon 0.002 --tol 1e-12 --max-iter 100000000",
                false},
        // A skew V rotates the moments: neither blow-up nor convergence for 10^9 steps.
        LongRun{"gaussian",
                "gaussian --set attention.V=[[0.0,-1.0],[1.0,0.0]] --set init.cov=[[2.0,0.5],[0.5,1.0]]"
                " --set init.mean=[1.0,0.0] --set run.integrator=rk4 --set run.dt=1e-4 --set run.T=100000",
                false},
        // 25 rk4 steps (about 15 s): the default single step now ends in 1.5 s, before the latest signal.
        LongRun{"meanfield", "meanfield --set run.T=0.5 --set run.dt=0.02", false},
        LongRun{"stability", "stability --set init.n=8192 --set run.T=100", false},
        LongRun{"reproduce", "reproduce meanfield --no-figures", false},
        LongRun{"demo", "demo --no-figures", false}),
    [](const ::testing::TestParamInfo<LongRun>& run) { return run.param.name; });

}  // namespace
}  // namespace tokenflow
