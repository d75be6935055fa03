// tokenflow/memory_budget.hpp: the one estimate of what a computation will hold, checked before
// anything of it is allocated.
//
// Every command and Python function that sizes arrays from what it is given (token counts, frames,
// plans, pairs, an archive's members, the shape in a file's header) states here the bytes it will
// hold at once, and check_memory refuses what exceeds the limit before the allocation: an
// InputError naming the key, the size and the limit (exit 2 in the CLI, tokenflow.InputError in
// Python). No command grows until an allocation fails, and no std::bad_alloc or MemoryError is
// what a user sees. The estimates are lower bounds (the arrays named, not every temporary), so a
// refusal is never wrong about the size being too large.
//
// The limit is the smallest of this machine's physical memory, the memory limit of the process's
// control group (cgroup v2 memory.max, v1 memory.limit_in_bytes), the address-space and data
// limits (RLIMIT_AS, RLIMIT_DATA) and TOKENFLOW_MEMORY_LIMIT when it is set (bytes, or a number
// with K, M, G or T: powers of 1024).
#pragma once

#include <cstdint>
#include <string>

namespace tokenflow {

// The bytes a computation may hold at once (above), read once per process.
std::uint64_t memory_limit_bytes();
// Where the limit comes from, for messages: "this machine's 15.6 GiB of memory", "the 64 MiB memory
// limit set by TOKENFLOW_MEMORY_LIMIT", "the 2 GiB memory limit of this process's control group".
std::string memory_limit_text();

// Refuses `bytes` (an estimate of what `what` will hold at once, e.g. "the plan (100000 x 100000
// float64)") when it is above memory_limit_bytes() or not a finite number: InputError(source, key,
// "WHAT needs N, more than LIMIT; ..."), where `advice` (may be empty) says what to change.
void check_memory(long double bytes, const std::string& what, const std::string& source, const std::string& key,
                  const std::string& advice = "");

// Whether `bytes` fits within the limit (for defaults that adapt, such as whether to form a plan).
bool fits_in_memory(long double bytes);

}  // namespace tokenflow
