// reproduce sphere: clustering of self-attention dynamics on the sphere (Geshkovski, Letrouit,
// Polyanskiy, Rigollet, "A mathematical perspective on Transformers", 2023): tokens on S^{d-1}
// moving by dx_i/dt = P_{x_i}(sum_j softmax_j(beta <x_i, x_j>) x_j), Q = K = V = I, beta = scale.
//   1. snapshots: n = 64, d = 3, beta = 1, T = 15 (a whole `simulate` directory, snapshots/);
//   2. the fraction of clustered pairs against beta in [0.1, 9] and t in [0, T] for n = 32, d = 2,
//      averaged over random initial conditions.
#include <fmt/format.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <omp.h>

#include "common.hpp"
#include "reproductions.hpp"
#include "run_simulation.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/io.hpp"

namespace tokenflow::cli {

namespace {

std::string sphere_config(long n, int d, double beta, std::uint64_t seed, double T, double dt, int save_every) {
  const std::string identity = d == 2 ? "[[1.0, 0.0], [0.0, 1.0]]" : "[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]";
  return fmt::format(R"(# Tokens uniform on the sphere S^{{d-1}}, Q = K = V = I, scale = beta, dynamics on the sphere.
seed = {seed}
[init]
kind = "sphere"
n = {n}
d = {d}
[attention]
kind = "softmax"
Q = {I}
K = {I}
V = {I}
scale = {beta:.17g}
normalize = "sphere"
[run]
T = {T:.17g}
dt = {dt:.17g}
integrator = "rk4"
save_every = {save_every}
)",
                     fmt::arg("seed", seed), fmt::arg("n", n), fmt::arg("d", d), fmt::arg("I", identity),
                     fmt::arg("beta", beta), fmt::arg("T", T), fmt::arg("dt", dt), fmt::arg("save_every", save_every));
}

// Fraction of the n (n - 1) / 2 pairs closer than tol.
double clustered_pair_fraction(const Points<double>& x, double tol) {
  const Eigen::Index n = x.rows();
  if (n < 2) return 1.0;
  long close = 0;
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = i + 1; j < n; ++j) close += (x.row(i) - x.row(j)).norm() < tol;
  return static_cast<double>(close) / (0.5 * static_cast<double>(n) * static_cast<double>(n - 1));
}

}  // namespace

nlohmann::json reproduce_sphere(const ReproductionContext& ctx) {
  nlohmann::json numbers;

  // ---- 1. snapshots: n = 64, d = 3, beta = 1, T = 15 ------------------------------------------
  {
    // 64 tokens: one thread is faster than several (each velocity is only 64 x 64 pairs).
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::string toml = sphere_config(64, 3, 1.0, 0, 15.0, 0.05, 10);
    const auto dir = ctx.dir / "snapshots";
    std::filesystem::create_directory(dir);
    write_text(dir / "config.toml", toml);
    const std::string summary =
        run_simulation(prepare_simulation(Config::from_text(toml, "sphere/snapshots/config.toml")), dir,
                       ctx.label + " snapshots");
    const auto s = nlohmann::json::parse(summary);
    omp_set_num_threads(threads);
    numbers["snapshots"] = {{"n", 64}, {"d", 3}, {"beta", 1.0}, {"T", 15.0},
                            {"final_clusters", s["final"]["clusters"]}, {"status", s["status"]}};
  }

  // ---- 2. clustered pairs against beta: n = 32, d = 2 ------------------------------------------
  const int betas_count = ctx.quick ? 8 : 36, seeds = ctx.quick ? 2 : 8;
  const double T = 30.0, dt = 0.05, pair_tol = 1e-2;
  const int save_every = 10;  // a frame every 0.5
  std::vector<double> betas(static_cast<std::size_t>(betas_count));
  for (int b = 0; b < betas_count; ++b) betas[b] = 0.1 + (9.0 - 0.1) * b / (betas_count - 1);
  const auto frames = static_cast<std::size_t>(std::lround(T / dt)) / save_every + 1;
  // fraction[seed][beta][frame]
  std::vector<double> fraction(static_cast<std::size_t>(seeds) * betas.size() * frames, 0.0);
  std::vector<double> times(frames, 0.0);
  const int runs = betas_count * seeds;
  std::atomic<int> finished{0};
  std::exception_ptr failure;
  std::mutex mutex;
  ProgressBar bar(ctx.label + " beta sweep");
  // One run per thread (runs are independent; each writes only its own slots, so the result does
  // not depend on the thread count). Nested parallel regions inside run on one thread.
#pragma omp parallel for schedule(dynamic)
  for (int k = 0; k < runs; ++k) {
    omp_set_num_threads(1);  // the parallel regions inside this run: one thread
    try {
      const int seed = k / betas_count, b = k % betas_count;
      const std::string toml = sphere_config(32, 2, betas[b], static_cast<std::uint64_t>(1000 + seed), T, dt, save_every);
      const PreparedSimulation p = prepare_simulation(Config::from_text(toml, "sphere beta sweep"));
      const SimulationResult<double> r = simulate(p.attention, p.config.run, p.initial, [&](const Progress&) {
        std::lock_guard<std::mutex> lock(mutex);
        return !interrupted() && !failure;
      });
      if (r.frames.size() != frames) throw std::runtime_error("sphere: unexpected number of frames");
      for (std::size_t f = 0; f < frames; ++f) {
        fraction[(static_cast<std::size_t>(seed) * betas.size() + b) * frames + f] = clustered_pair_fraction(r.frames[f], pair_tol);
        if (k == 0) times[f] = r.times[f];
      }
      const int done = ++finished;
      std::lock_guard<std::mutex> lock(mutex);
      bar.update(static_cast<double>(done) / runs, fmt::format("{}/{} runs", done, runs));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!failure) failure = std::current_exception();
    }
  }
  bar.finish();
  if (failure) std::rethrow_exception(failure);

  write_npy(ctx.dir / "betas.npy", betas.data(), {betas.size()});
  write_npy(ctx.dir / "times.npy", times.data(), {times.size()});
  write_npy(ctx.dir / "clustered_fraction.npy", fraction.data(),
            {static_cast<std::size_t>(seeds), betas.size(), frames});
  write_text(ctx.dir / "beta_sweep.toml", sphere_config(32, 2, 1.0, 1000, T, dt, save_every));

  // Mean over seeds at the last frame, per beta.
  nlohmann::json final_fraction = nlohmann::json::array();
  for (std::size_t b = 0; b < betas.size(); ++b) {
    double sum = 0.0;
    for (int s = 0; s < seeds; ++s) sum += fraction[(static_cast<std::size_t>(s) * betas.size() + b) * frames + frames - 1];
    final_fraction.push_back(sum / seeds);
  }
  numbers["beta_sweep"] = {{"n", 32},       {"d", 2},         {"T", T},
                           {"dt", dt},      {"seeds", seeds}, {"pair_tol", pair_tol},
                           {"betas", betas}, {"final_fraction", final_fraction}};
  return numbers;
}

}  // namespace tokenflow::cli
