// ThreadGovernor (tokenflow/parallel.hpp): the decisions from clock readings. The readings are
// simulated: a pass loop whose wall and CPU time advance as threads that get the cores (cores
// used ~ 2), or that wait for a descheduled one (cores used ~ 1 or less), would make them.
#include <gtest/gtest.h>


#include <random>

#include "test_util.hpp"
#include "tokenflow/parallel.hpp"

namespace tokenflow {
namespace {

// The governors off for the whole test binary (each test process runs this at start): the tests
// that compare one thread with several must run their passes on several threads however busy the
// machine is, where a governor would run them on one. The governor's decisions are tested below
// on simulated clocks, and with the governor on in tests/python/test_threads.py.
const bool kGovernorsOff = (set_adaptive_threads(false), true);

// The simulated process's CPU clock (the governor reads it through a plain function pointer).
double simulated_cpu = 0.0;
double read_simulated_cpu() { return simulated_cpu; }

// Runs `passes` passes of `seconds` wall time each from `wall`, each using `cores_threads` cores
// when the governor allows threads and 1 core when it does not; returns how many used threads.
int run_passes(ThreadGovernor& governor, double& wall, int passes, double seconds, double cores_threads) {
  int threaded = 0;
  for (int i = 0; i < passes; ++i) {
    const bool threads = governor.decide(wall, read_simulated_cpu);
    threaded += threads;
    wall += seconds;
    simulated_cpu += seconds * (threads ? cores_threads : 1.0);
  }
  return threaded;
}

TEST(ThreadGovernor, KeepsThreadsWhileTheyGetTheCores) {
  std::mt19937_64 rng(testing::fresh_seed());
  std::uniform_real_distribution<double> cores(ThreadGovernor::kThreadsPay + 0.05, 2.0), pass(1e-4, 5e-3);
  for (int trial = 0; trial < 20; ++trial) {
    ThreadGovernor governor;
    double wall = 1000.0 * trial;
    simulated_cpu = 0.0;
    const int passes = 2000;
    EXPECT_EQ(run_passes(governor, wall, passes, pass(rng), cores(rng)), passes) << "trial " << trial;
    EXPECT_FALSE(governor.serial());
  }
}

TEST(ThreadGovernor, GoesSerialWhenThreadsDoNotPayAndTriesAgainRarely) {
  std::mt19937_64 rng(testing::fresh_seed());
  std::uniform_real_distribution<double> cores(0.3, ThreadGovernor::kThreadsPay - 0.05), pass(1e-4, 2e-3);
  for (int trial = 0; trial < 20; ++trial) {
    ThreadGovernor governor;
    double wall = 0.0;
    simulated_cpu = 0.0;
    const double seconds = pass(rng);
    const int passes = static_cast<int>(20.0 / seconds);  // 20 s of passes
    const int threaded = run_passes(governor, wall, passes, seconds, cores(rng));
    // Each try costs at most one window (plus the pass that closes it); the tries come at most
    // every kFirstWait at first and every kLongestWait once the waits have doubled: over 20 s,
    // at most 20 / kLongestWait + log2(kLongestWait / kFirstWait) + 1 tries.
    const double tries = 20.0 / ThreadGovernor::kLongestWait + 5.0 + 1.0;
    const double most = tries * (ThreadGovernor::kWindow + 2.0 * seconds) / seconds;
    EXPECT_LE(threaded, most) << "trial " << trial << ", pass " << seconds << " s";
    EXPECT_GT(threaded, 0);
  }
}

TEST(ThreadGovernor, ReturnsToThreadsWhenTheCoresAreFreeAgain) {
  ThreadGovernor governor;
  double wall = 0.0;
  simulated_cpu = 0.0;
  run_passes(governor, wall, 10000, 1e-3, 1.0);  // 10 s of a shared core: serial, longest waits
  EXPECT_TRUE(governor.serial());
  // The cores are free: within the longest wait and one window, every pass uses threads again.
  const int settle = static_cast<int>((ThreadGovernor::kLongestWait + 2.0 * ThreadGovernor::kWindow) / 1e-3);
  run_passes(governor, wall, settle, 1e-3, 1.9);
  EXPECT_EQ(run_passes(governor, wall, 1000, 1e-3, 1.9), 1000);
}

TEST(ThreadGovernor, ALongGapIsNotJudged) {
  // The caller's own work between two passes (serial, 1 core) is not the passes' doing: a gap
  // longer than kGap starts a new window.
  ThreadGovernor governor;
  double wall = 0.0;
  simulated_cpu = 0.0;
  for (int call = 0; call < 100; ++call) {
    EXPECT_EQ(run_passes(governor, wall, 5, 2e-3, 1.9), 5) << "call " << call;
    wall += 2.0 * ThreadGovernor::kGap;  // the caller's work: 1 core
    simulated_cpu += 2.0 * ThreadGovernor::kGap;
  }
}

TEST(ThreadGovernor, OffOrOneThreadAlwaysAllowsThreads) {
  EXPECT_TRUE(kGovernorsOff);
  EXPECT_FALSE(adaptive_threads());  // as this binary sets it
  const bool before = set_adaptive_threads(false);
  EXPECT_TRUE(threads_pay());
  EXPECT_FALSE(adaptive_threads());
  set_adaptive_threads(before);
  EXPECT_EQ(adaptive_threads(), before);
}

}  // namespace
}  // namespace tokenflow
