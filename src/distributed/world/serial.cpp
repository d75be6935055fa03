// The process group of a build without MPI: always one process.
#include <cstdlib>

#include "world.hpp"

namespace tokenflow::distributed {

bool built_with_mpi() { return false; }
void init_world(int&, char**&) {}
const Communicator* world() { return nullptr; }
bool is_root() { return true; }
void finalize_world() {}
void abort_world(int code) { std::exit(code); }

}  // namespace tokenflow::distributed
