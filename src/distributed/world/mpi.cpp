// The process group of a build with MPI: MPI_COMM_WORLD behind tokenflow::Communicator.
// MPI is started only under a launcher with several ranks, so a plain `tokenflow ...` never
// touches it. Thread level FUNNELED: OpenMP threads never call MPI, only the main thread does.
#include <mpi.h>

#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "world.hpp"

namespace tokenflow::distributed {

namespace {

void check(int code, const char* what) {
  if (code != MPI_SUCCESS) throw std::runtime_error(std::string("MPI: ") + what + " failed");
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allgather_in_place(void* data, const std::vector<std::size_t>& byte_offsets) const override {
    if (byte_offsets.size() != static_cast<std::size_t>(size_) + 1)
      throw std::logic_error("allgather_in_place: one offset per rank and one more expected");
    // MPI counts are int: blocks of up to 2^31 - 1 bytes, in MPI_BYTE.
    std::vector<int> counts(static_cast<std::size_t>(size_)), displs(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      const std::size_t begin = byte_offsets[static_cast<std::size_t>(r)];
      const std::size_t count = byte_offsets[static_cast<std::size_t>(r) + 1] - begin;
      if (begin > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
          count > static_cast<std::size_t>(std::numeric_limits<int>::max()))
        throw std::runtime_error("MPI: a block of more than 2 GiB cannot be all-gathered");
      counts[static_cast<std::size_t>(r)] = static_cast<int>(count);
      displs[static_cast<std::size_t>(r)] = static_cast<int>(begin);
    }
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displs.data(), MPI_BYTE, comm_),
          "MPI_Allgatherv");
  }
  void broadcast(void* data, std::size_t bytes, int root) const override {
    if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw std::runtime_error("MPI: a broadcast of more than 2 GiB");
    check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, comm_), "MPI_Bcast");
  }
  int max_over_ranks(int value) const override {
    int out = value;
    check(MPI_Allreduce(&value, &out, 1, MPI_INT, MPI_MAX, comm_), "MPI_Allreduce");
    return out;
  }
  void barrier() const override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

std::unique_ptr<MpiCommunicator> g_world;
bool g_started = false;

}  // namespace

bool built_with_mpi() { return true; }

void init_world(int& argc, char**& argv) {
  if (g_started || launcher_ranks() <= 1) return;
  int provided = 0;
  check(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  g_started = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  auto comm = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
  if (comm->size() > 1) g_world = std::move(comm);
}

const Communicator* world() { return g_world.get(); }
bool is_root() { return !g_world || g_world->rank() == 0; }

void finalize_world() {
  g_world.reset();
  if (g_started) MPI_Finalize();
  g_started = false;
}

void abort_world(int code) {
  if (g_started) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace tokenflow::distributed
