// parallel_for (internal to the library: src/model, src/ot): an OpenMP loop whose bodies may throw.
#pragma once

#include <exception>
#include <mutex>

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

}  // namespace tokenflow
