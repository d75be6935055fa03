// tokenflow/parallel.hpp: when the optimal transport passes use threads.
//
// A Sinkhorn solve runs two parallel passes over the n m pairs per iteration, each ending in a
// barrier: thousands of barriers a solve. Threads pay for a pass only when it holds enough pairs;
// below parallel_min_pairs() a pass runs on the calling thread (the soft-mins, kernel mode's
// passes, the plan's measure, the cost matrices of W_p; src/ot). The number of threads above it
// is OpenMP's (OMP_NUM_THREADS, omp_set_num_threads). Unused without OpenMP.
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

}  // namespace tokenflow
