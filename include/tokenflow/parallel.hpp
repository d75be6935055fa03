// tokenflow/parallel.hpp: when the optimal transport passes use threads.
//
// A Sinkhorn solve runs two parallel passes over the n m pairs per iteration, each ending in a
// barrier: thousands of barriers a solve. Threads pay for a pass only when it holds enough pairs;
// below parallel_min_pairs() a pass runs on the calling thread (the soft-mins, kernel mode's
// passes, the plan's measure, the cost matrices of W_p; src/ot). The number of threads above it
// is OpenMP's (OMP_NUM_THREADS, omp_set_num_threads). Unused without OpenMP.
//
// Above it, threads pay only while they get the cores: when another process shares a core, the
// thread there is descheduled for a scheduler slice (milliseconds) while the others wait for it
// at the pass's barrier, and a solve of many short passes took 3 times as long on two threads as
// on one. So each calling thread keeps a governor (ThreadGovernor): over windows of the passes'
// wall time it compares the process's CPU time with the wall time, that is, the cores the passes
// actually used; below kThreadsPay the passes run on the calling thread for a while (doubling
// while that lasts), then threads are tried again. The results do not depend on it (every pass
// gives the same bits on any number of threads).
#pragma once

namespace tokenflow {

// The default: 2^15 pairs. Measured (docs/python.md, "Threads"): with OpenMP's passive wait
// policy, which the CLI and the Python package set, two threads were faster than one from there
// on, also while other processes kept both cores busy; under the default (spinning) policy on a
// busy machine they were 10 times slower than one at 10^6 pairs and 1.6 times at 4 10^6.
inline constexpr long long kParallelMinPairsDefault = 1LL << 15;

// The passes' threshold in pairs (thread-safe; the same for every thread of the process).
long long parallel_min_pairs();
// Sets it (pairs >= 1; 0 restores kParallelMinPairsDefault); returns the previous value.
long long set_parallel_min_pairs(long long pairs);

// The governor's decisions from clock readings (seconds of wall time and of the process's CPU
// time), so that they can be tested with any readings; threads_pay() feeds it the clocks.
class ThreadGovernor {
 public:
  // A window: at least this much wall time between two readings before it is judged.
  static constexpr double kWindow = 0.02;
  // A gap this long between two decisions (the caller's own work between calls) starts a new
  // window instead of being judged.
  static constexpr double kGap = 0.05;
  // Threads pay when the passes used at least this many cores on average over a window.
  static constexpr double kThreadsPay = 1.3;
  // On the calling thread for kFirstWait after a window that did not pay, doubling up to kLongestWait
  // while the tries fail: a failed try costs one window, at most a few percent of the time.
  static constexpr double kFirstWait = 0.08, kLongestWait = 1.28;

  // Whether the next pass may use threads, given the wall clock now; `cpu` reads the process's
  // CPU time (called only when a window opens or is judged).
  bool decide(double wall, double (*cpu)());
  bool serial() const { return serial_; }

 private:
  bool serial_ = false;
  bool open_ = false;  // a window is open
  double window_wall_ = 0.0, window_cpu_ = 0.0, last_wall_ = 0.0, serial_until_ = 0.0, wait_ = kFirstWait;
};

// The calling thread's governor, fed with the steady clock and the process's CPU time: whether
// its next pass uses threads. Always true when the governor is off.
bool threads_pay();
// Turns the governors of every thread on (the default) or off; returns the previous setting.
bool set_adaptive_threads(bool on);
bool adaptive_threads();

}  // namespace tokenflow
