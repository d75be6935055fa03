// What the MPI and the serial builds of the process group share.
#include <cstdlib>
#include <string>

#include "world.hpp"

namespace tokenflow::distributed {

namespace {
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (end != nullptr && *end == '\0' && x >= 0 && x < (1L << 30)) ? static_cast<int>(x) : fallback;
}
}  // namespace

int launcher_ranks() { return env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", 1)); }
int launcher_rank() { return env_int("OMPI_COMM_WORLD_RANK", env_int("PMI_RANK", 0)); }

std::string no_mpi_message(int ranks) {
  return "started on " + std::to_string(ranks) +
         " MPI ranks, but this tokenflow was built without MPI (install libopenmpi-dev and openmpi-bin, "
         "then rebuild with -DTOKENFLOW_MPI=ON), or run it as one process";
}

}  // namespace tokenflow::distributed
