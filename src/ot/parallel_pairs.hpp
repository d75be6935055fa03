// When a pass over the pairs of a transport problem runs on threads (tokenflow/parallel.hpp).
#pragma once

#include <Eigen/Core>
#include <algorithm>

#include "tokenflow/parallel.hpp"

namespace tokenflow {

// Whether a pass over `pairs` pairs uses threads: the `if` clause of its parallel region (enough
// pairs, and the calling thread's governor finds that threads pay now).
inline bool parallel_pairs(double pairs) { return pairs >= static_cast<double>(parallel_min_pairs()) && threads_pay(); }

// The chunk of a pass's items (rows, blocks of rows) that a thread takes at a time, for items of
// `pairs_per_item` pairs: about 8192 pairs (a few microseconds), at least one item. The passes
// hand out chunks dynamically (schedule(dynamic, chunk)): when another process holds part of a
// core, the thread there takes fewer chunks instead of the others waiting for its static half at
// the barrier (a call then took 2 to 3 times as long as on one thread). Every item writes its own
// outputs, so the bits do not depend on which thread ran it.
inline int pair_chunk(double pairs_per_item) {
  return static_cast<int>(std::clamp(8192.0 / std::max(pairs_per_item, 1.0), 1.0, 1048576.0));
}

}  // namespace tokenflow
