// reproduce clustering: clustering of self-attention dynamics on the circle at large n, where the
// particles approximate the mean-field PDE. n tokens uniform on S^1 (n = 10^5; 10^4 with --tour,
// 2000 with --quick) move by dx_i/dt = P_{x_i}(sum_j softmax_j(beta <x_i, x_j>) x_j), Q = K = V =
// I, beta = 9, to T = 20 (rk4, dt = 0.1). The uniform measure is a stationary point of the
// mean-field flow; the sampling's fluctuations of order n^{-1/2} grow and the tokens gather into a
// few clusters (Geshkovski, Letrouit, Polyanskiy, Rigollet 2023, section 6: metastable clusters
// whose number grows with beta). Every velocity goes through attention.summation = "auto": the fast
// summation from n = 4096 on (on the circle the softmax's Gauss form has equal weights, so its
// certificate holds for every token).
// --random-weights: Q and K drawn with entries N(0, 1/2) (Random, seed kRandomWeightsSeed), V = I,
// the same beta: a non-symmetric QK^T, summed through the whitened form of the fast summation.
// Clusters are counted as groups of tokens separated by empty arcs wider than 0.05 rad (single
// linkage on the angles); writes the simulate directory run/ (a frame every 1.0) and
// clusters.npy (the count per frame).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common.hpp"
#include "reproductions.hpp"
#include "run_simulation.hpp"
#include "tokenflow/io.hpp"

namespace tokenflow::cli {

namespace {

constexpr double kGapRadians = 0.05;

// Groups of points of the circle separated by empty arcs wider than gap (1 when no arc is).
long angular_groups(const Points<double>& x, double gap) {
  std::vector<double> angle(static_cast<std::size_t>(x.rows()));
  for (Eigen::Index i = 0; i < x.rows(); ++i) angle[static_cast<std::size_t>(i)] = std::atan2(x(i, 1), x(i, 0));
  std::sort(angle.begin(), angle.end());
  long groups = 0;
  for (std::size_t i = 0; i + 1 < angle.size(); ++i) groups += angle[i + 1] - angle[i] > gap;
  groups += angle.front() + 2.0 * M_PI - angle.back() > gap;  // the arc across +-pi
  return std::max(groups, 1L);
}

}  // namespace

nlohmann::json reproduce_clustering(const ReproductionContext& ctx) {
  const long n = ctx.quick ? 2000 : ctx.tour ? 10000 : 100000;
  const double beta = 9.0, T = 20.0, dt = 0.1;
  const int save_every = 10;
  Eigen::MatrixXd Q = Eigen::MatrixXd::Identity(2, 2), K = Q;
  std::string weights = "Q = K = V = I";
  if (ctx.random_weights) {
    Random rng(kRandomWeightsSeed);
    Q = normal_matrix(rng, 2, 2, std::sqrt(0.5));
    K = normal_matrix(rng, 2, 2, std::sqrt(0.5));
    weights = fmt::format("Q, K with entries N(0, 1/2) (--random-weights, Random({})), V = I",
                          kRandomWeightsSeed);
  }
  const std::string toml =
      fmt::format(R"(# reproduce clustering: n tokens uniform on the circle, {}, scale = beta.
seed = 7
[init]
kind = "sphere"
n = {}
d = 2
[attention]
kind = "softmax"
Q = {}
K = {}
V = [[1.0, 0.0], [0.0, 1.0]]
scale = {:.17g}
normalize = "sphere"
summation = "auto"
[run]
T = {:.17g}
dt = {:.17g}
integrator = "rk4"
save_every = {}
)",
                  weights, n, toml_matrix(Q), toml_matrix(K), beta, T, dt, save_every);
  const auto dir = ctx.dir / "run";
  std::filesystem::create_directory(dir);
  write_text(dir / "config.toml", toml);
  const PreparedSimulation p = prepare_simulation(Config::from_text(toml, "clustering/run/config.toml"));
  const auto summary = nlohmann::json::parse(run_simulation(p, dir, ctx.label));
  // The count per saved frame, from trajectory.npy.
  const NpyArray trajectory = read_npy((dir / "trajectory.npy").string());
  const std::size_t frames = trajectory.shape.at(0), rows = trajectory.shape.at(1);
  std::vector<double> clusters(frames);
  for (std::size_t f = 0; f < frames; ++f) {
    Points<double> x(static_cast<Eigen::Index>(rows), 2);
    for (std::size_t i = 0; i < rows; ++i)
      for (int e = 0; e < 2; ++e) x(static_cast<Eigen::Index>(i), e) = trajectory.data[(f * rows + i) * 2 + e];
    clusters[f] = static_cast<double>(angular_groups(x, kGapRadians));
  }
  write_npy(ctx.dir / "clusters.npy", clusters.data(), {frames});
  nlohmann::json numbers;
  numbers["n"] = n;
  numbers["beta"] = beta;
  numbers["T"] = T;
  numbers["dt"] = dt;
  numbers["gap_radians"] = kGapRadians;
  numbers["Q"] = to_json(Q);
  numbers["K"] = to_json(K);
  numbers["final_clusters"] = clusters.back();
  numbers["clusters"] = clusters;
  numbers["simulate_status"] = summary["status"];
  numbers["simulate_seconds"] = summary["wall_seconds"];
  numbers["summation"] = summary["summation"];
  return numbers;
}

}  // namespace tokenflow::cli
