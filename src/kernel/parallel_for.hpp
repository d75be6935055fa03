// parallel_for (internal to the library: src/model, src/ot): an OpenMP loop whose bodies may throw,
// and StopPoll, the stop request polled inside such loops.
#pragma once

#include <omp.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <utility>

namespace tokenflow {

// Runs body(i) for i in [0, count) in parallel; the first exception is rethrown afterwards
// (exceptions must not leave an OpenMP region).
template <class Body>
void parallel_for(long count, const Body& body, bool dynamic = true) {
  std::exception_ptr error;
  std::mutex error_mutex;
  auto guarded = [&](long i) {
    try {
      body(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  if (dynamic) {
#pragma omp parallel for schedule(dynamic, 1)
    for (long i = 0; i < count; ++i) guarded(i);
  } else {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < count; ++i) guarded(i);
  }
  if (error) std::rethrow_exception(error);
}

// A caller's keep_going() (the CLI's signal flag, Python's PyErr_CheckSignals) polled between the
// items of a parallel loop: only by OpenMP thread 0 (the calling thread, the one Python's signal
// handlers run on) and at most every 20 ms; once it returned false, stopped() is true for every
// thread, which skips its remaining items. An empty keep_going never stops.
class StopPoll {
 public:
  explicit StopPoll(std::function<bool()> keep_going) : keep_going_(std::move(keep_going)) {}
  bool stopped() {
    if (stopped_.load(std::memory_order_relaxed)) return true;
    if (!keep_going_ || omp_get_thread_num() != 0) return false;
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) return false;
    next_ = now + std::chrono::milliseconds(20);
    if (keep_going_()) return false;
    stopped_ = true;
    return true;
  }

 private:
  std::function<bool()> keep_going_;
  std::atomic<bool> stopped_{false};
  std::chrono::steady_clock::time_point next_{};
};

}  // namespace tokenflow
