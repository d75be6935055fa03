// Strong and weak scaling of the MPI driver (docs/scaling.md). Run under mpirun (or alone):
//   tokenflow_bench_mpi velocity N D REPS   softmax attention velocity of N tokens in R^D (f64,
//                                           Q = K = V = W = I, k = D < 16: the tile kernel on every
//                                           rank count); prints the median seconds per evaluation
//                                           and the median seconds of its all-gather of N D doubles
//   tokenflow_bench_mpi allgather REPS      the all-gather of B bytes in total, B = 8 .. 64 MiB:
//                                           median seconds per call (latency and bandwidth)
// Rank 0 prints one line per measurement: ranks, OpenMP threads per rank, then the numbers.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../src/distributed/world/world.hpp"
#include "tokenflow/attention.hpp"
#include "tokenflow/distributed.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace dist = tokenflow::distributed;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int ranks() { return dist::world() ? dist::world()->size() : 1; }

template <class F>
double seconds(const F& f) {
  if (dist::world()) dist::world()->barrier();
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void velocity(Eigen::Index n, int d, int reps) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> normal;
  tokenflow::Points<double> x(n, d);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = normal(rng);
  const tokenflow::Measure<double> mu = tokenflow::make_measure<double>(x, Eigen::VectorXd(), Eigen::VectorXd());
  tokenflow::AttentionSpec spec;
  const tokenflow::AttentionParams p = tokenflow::make_attention(spec, d);
  tokenflow::AttentionField<double> field(p, mu);
  field.set_communicator(dist::world());
  tokenflow::Points<double> out;
  field.velocity(0.0, x, out);  // warm-up
  std::vector<double> t_velocity, t_gather;
  const auto offsets = tokenflow::block_offsets(n, ranks(), 24);
  for (int r = 0; r < reps; ++r) {
    t_velocity.push_back(seconds([&] { field.velocity(0.0, x, out); }));
    t_gather.push_back(seconds([&] { tokenflow::allgather_rows(dist::world(), out.data(), offsets, d); }));
  }
  if (dist::is_root())
    std::printf("velocity ranks=%d threads=%d n=%ld d=%d median_s=%.6g allgather_s=%.6g\n", ranks(),
                omp_get_max_threads(), static_cast<long>(n), d, median(t_velocity), median(t_gather));
}

void allgather(int reps) {
  for (std::size_t bytes = 8; bytes <= (std::size_t{64} << 20); bytes *= 8) {
    const std::size_t per_rank = std::max<std::size_t>(1, bytes / static_cast<std::size_t>(ranks()));
    std::vector<char> data(per_rank * static_cast<std::size_t>(ranks()));
    std::vector<std::size_t> offsets(static_cast<std::size_t>(ranks()) + 1);
    for (int r = 0; r <= ranks(); ++r) offsets[static_cast<std::size_t>(r)] = per_rank * static_cast<std::size_t>(r);
    std::vector<double> t;
    for (int r = 0; r < reps; ++r)
      t.push_back(seconds([&] {
        if (dist::world()) dist::world()->allgather_in_place(data.data(), offsets);
      }));
    if (dist::is_root())
      std::printf("allgather ranks=%d bytes=%zu median_s=%.6g\n", ranks(), data.size(), median(t));
  }
}

}  // namespace

int main(int argc, char** argv) {
  dist::init_world(argc, argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "velocity" && argc == 5) {
    velocity(std::atol(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]));
  } else if (mode == "allgather" && argc == 3) {
    allgather(std::atoi(argv[2]));
  } else {
    if (dist::is_root()) std::fprintf(stderr, "usage: tokenflow_bench_mpi velocity N D REPS | allgather REPS\n");
    dist::finalize_world();
    return 2;
  }
  dist::finalize_world();
  return 0;
}
