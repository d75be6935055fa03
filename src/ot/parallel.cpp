// When the optimal transport passes use threads (tokenflow/parallel.hpp): the pairs' threshold and
// the calling threads' governors.
#include "tokenflow/parallel.hpp"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "tokenflow/error.hpp"

namespace tokenflow {

namespace {
std::atomic<long long> parallel_min_pairs_{kParallelMinPairsDefault};
std::atomic<bool> adaptive_threads_{true};

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The CPU time of every thread of the process (a waiting OpenMP thread sleeps under the passive
// policy and adds none).
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}
}  // namespace

long long parallel_min_pairs() { return parallel_min_pairs_.load(std::memory_order_relaxed); }

long long set_parallel_min_pairs(long long pairs) {
  if (pairs < 0) throw InputError("", "parallel_min_pairs", "must be >= 0 (0: the default, 2^15 pairs)");
  return parallel_min_pairs_.exchange(pairs == 0 ? kParallelMinPairsDefault : pairs, std::memory_order_relaxed);
}

bool ThreadGovernor::decide(double wall, double (*cpu)()) {
  if (serial_) {
    if (wall < serial_until_) return false;
    serial_ = false;  // try threads again, in a new window
    open_ = false;
  }
  if (!open_ || wall - last_wall_ > kGap) {
    open_ = true;
    window_wall_ = last_wall_ = wall;
    window_cpu_ = cpu();
    return true;
  }
  last_wall_ = wall;
  const double span = wall - window_wall_;
  if (span < kWindow) return true;
  const double now_cpu = cpu();
  const double cores = (now_cpu - window_cpu_) / span;
  window_wall_ = wall;
  window_cpu_ = now_cpu;
  if (cores >= kThreadsPay) {
    wait_ = kFirstWait;
    return true;
  }
  serial_ = true;
  open_ = false;
  serial_until_ = wall + wait_;
  wait_ = std::min(2.0 * wait_, kLongestWait);
  return false;
}

bool threads_pay() {
  if (!adaptive_threads_.load(std::memory_order_relaxed) || omp_get_max_threads() == 1) return true;
  thread_local ThreadGovernor governor;
  return governor.decide(wall_seconds(), process_cpu_seconds);
}

bool set_adaptive_threads(bool on) { return adaptive_threads_.exchange(on, std::memory_order_relaxed); }
bool adaptive_threads() { return adaptive_threads_.load(std::memory_order_relaxed); }

}  // namespace tokenflow
