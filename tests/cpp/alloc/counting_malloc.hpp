// Counting allocation wrappers for the tests/cpp/alloc binary: counting_malloc.cpp replaces the C
// library's allocation entry points (malloc, calloc, realloc, posix_memalign, aligned_alloc,
// memalign; operator new, Eigen's aligned allocations and libgomp all go through them) with
// wrappers around glibc's own that count calls while `counting` is set. Only in that binary (never
// in the main suite, never under AddressSanitizer, which owns malloc).
#pragma once

#include <atomic>

namespace tokenflow::testing::alloc {
extern std::atomic<bool> counting;
extern std::atomic<long> allocations;
}  // namespace tokenflow::testing::alloc
