// The CLI's OpenMP wait policy: passive unless the user chose one.
//
// tokenflow's parallel regions are few and long (two per attention head and step), so a thread that
// waits at their end gains nothing by spinning; on a shared machine the spinning threads (libgomp's
// default spins for about 300 000 iterations before sleeping) take cores from the working ones.
// Measured on the 2-core development machine under load (docs/speed.md): 20 Euler steps at
// n = 4096, d = 64 used 35 % less CPU time and finished sooner with OMP_WAIT_POLICY=passive.
// libgomp reads the variable when it loads, before any code of ours runs, so the CLI sets it and
// executes itself again (once: the new process finds the variable set). Setting OMP_WAIT_POLICY or
// GOMP_SPINCOUNT in the environment keeps the user's choice; if the re-execution fails, the run
// continues with the default policy.
#include <cstdlib>

#if defined(__linux__)
#include <unistd.h>

namespace {

// glibc passes (argc, argv, envp) to the functions of .init_array.
__attribute__((constructor)) void use_passive_openmp_wait_policy(int, char** argv, char**) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Still here: exec failed; carry on with libgomp's default.
}

}  // namespace
#endif
