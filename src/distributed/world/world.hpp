// The process group of a CLI run: MPI's world when tokenflow is built with MPI (TOKENFLOW_MPI) and
// started by a launcher (mpirun) with several ranks; one process otherwise. Used by the CLI and the
// tests only (the library knows tokenflow/distributed.hpp's Communicator, never MPI).
#pragma once

#include <string>

#include "tokenflow/distributed.hpp"

namespace tokenflow::distributed {

// Whether this build has the MPI driver (CMake found MPI and TOKENFLOW_MPI is on).
bool built_with_mpi();
// How many ranks a launcher started, from its environment (OpenMPI's OMPI_COMM_WORLD_SIZE, the PMI
// of MPICH/Slurm PMI_SIZE); 1 when not started by one. launcher_rank: this process's rank (0).
int launcher_ranks();
int launcher_rank();
// The one line a build without MPI prints (exit code 2) when started on several ranks.
std::string no_mpi_message(int ranks);

// Starts MPI when built with it and launcher_ranks() > 1; afterwards world() is the world
// communicator (null on one process). finalize_world() ends MPI (if started); abort_world(code)
// stops every rank (MPI_Abort) when one rank fails while the others may be waiting on it.
void init_world(int& argc, char**& argv);
const Communicator* world();
bool is_root();  // rank 0, or not distributed
void finalize_world();
[[noreturn]] void abort_world(int code);

}  // namespace tokenflow::distributed
