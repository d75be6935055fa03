// reproduce metastability: dynamic metastability of softmax attention (Geshkovski, Koubbi,
// Polyanskiy, Rigollet, "Dynamic metastability in the self-attention model", arXiv:2410.06833,
// 2024). Tokens on the circle with Q = K = V = I and scale beta collapse to one cluster only after
// staying near configurations of several clusters for times exponential in beta; against the
// authors' rescaled time (arclength / log beta) the energy climbs a staircase of plateaus.
//   staircase_beta<B>.npy  the authors' start (n = 5, angles {0, 1/4, 1, 2, 7/2} log(beta)/sqrt(beta))
//                          through run_circle_flow: per step t (physical), s (rescaled), E, clusters
//   escape.npy             two groups (2 and 3 tokens, 0.02 wide) delta0 = 0.5 apart, per beta: beta,
//                          measured escape time of the two-cluster plateau, closed form (Eq. M4),
//                          Laplace asymptotics
//   sphere/                a whole `tokenflow simulate` directory: 5 tokens on S^2 (beta = 30,
//                          dopri5 to T = 2e5, long runs of the engine itself); sphere.npy per frame
//                          t, E (2 e^{-beta} interaction_energy), clusters
//   long_beta<B>.npy       the authors' protocol through the attention engine (Eq. M5: up to 10^6
//                          steps of length 1e-5 log beta along the normalized velocity, merging below
//                          1e-3 rad; one cluster after 7 10^3 to 2.1 10^4 steps, under a second in all):
//                          per record (every 1000 steps and every merge) s (rescaled), E, clusters,
//                          t (the steps' Euler clock), 1 where the engine's velocity made the steps
//                          (0: Eq. (M1) past the engine's float64 floor)
//   long_unmerged_beta<B>.npy  --long: the authors' whole 10^6 steps through the engine without merging
//                          (about 4 s per beta): the same columns
// Summary: plateaus (per beta: clusters, s and t at start and end, escape time, level), and
// log_escape_time_slope (least squares of log T against beta) with log_escape_time_fit (the fit,
// the same fit of the closed form, the asymptotic slope 1 - cos delta0); long_runs (per beta the plateaus
// of the long run beside the exact flow's levels, steps per second, the engine's floor); with --long,
// long_runs_unmerged (per beta the 10^6 unmerged steps: final E, steps per second).
#include <fmt/format.h>

#include <omp.h>

#include <cmath>
#include <numeric>

#include "common.hpp"
#include "reproductions.hpp"
#include "run_simulation.hpp"
#include "tokenflow/attention.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/metastability.hpp"

namespace tokenflow::cli {

namespace {

constexpr double kDelta0 = 0.5, kSphereBeta = 30.0;
constexpr long kAuthorsSteps = 1'000'000;

nlohmann::json plateau_json(const Plateau& p) {
  return {{"clusters", p.clusters},           {"s_start", p.s_start},
          {"s_end", p.s_end},                 {"t_start", p.t_start},
          {"t_end", p.t_end},                 {"escape_time", p.t_end - p.t_start},
          {"log10_escape_time", std::log10(p.t_end - p.t_start)},
          {"energy_level", p.energy_level},   {"energy_end", p.energy_end}};
}

// The authors' start at one beta: the path into staircase_beta<B>.npy, its plateaus into the summary.
nlohmann::json staircase(double beta, const std::filesystem::path& dir) {
  CircleFlowOptions o;
  o.beta = beta;
  const std::vector<double> angles = staircase_angles(beta);
  const CircleFlowPath path = run_circle_flow(angles, std::vector<double>(angles.size(), 1.0), o);
  if (path.status != "one_cluster")
    throw std::runtime_error("reproduce metastability: the staircase at beta = " + fmt::format("{:g}", beta) +
                             " ended with status " + path.status);
  std::vector<double> table;
  for (std::size_t k = 0; k < path.time.size(); ++k)
    table.insert(table.end(), {path.time[k], path.rescaled[k], path.energy[k], double(path.clusters[k])});
  write_npy(dir / fmt::format("staircase_beta{:g}.npy", beta), table.data(), {path.time.size(), 4});
  nlohmann::json plateaus = nlohmann::json::array();
  for (const Plateau& p : find_plateaus(path))
    if (p.clusters > 1) plateaus.push_back(plateau_json(p));  // the last one, one cluster, lasts forever
  return {{"beta", beta}, {"angles", angles}, {"steps", path.steps}, {"plateaus", plateaus}};
}

// Which field made a plateau's steps: the engine's velocity up to s_engine, Eq. (M1) after.
const char* plateau_field(const Plateau& p, double s_engine) {
  return p.s_end <= s_engine ? "engine" : p.s_start >= s_engine ? "angles" : "engine, then angles";
}

// n = 5 tokens: one thread (a parallel region per step costs more than the step: 4 us a step on one
// thread, 20 times that on two threads of a busy machine); the thread count is restored after.
class OneThread {
 public:
  OneThread() : threads_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(threads_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int threads_;
};

// Eq. (M5) from the staircase's start at one beta, timed; its records go to `file`
// (per record s, E, clusters, t, 1 where the engine made the steps).
struct TimedPath {
  NormalizedStepPath path;
  double seconds = 0.0;
};
TimedPath timed_normalized_steps(const NormalizedStepOptions& o, const std::filesystem::path& file) {
  const std::vector<double> angles = staircase_angles(o.beta);
  Stopwatch clock;
  TimedPath out{run_normalized_steps(angles, std::vector<double>(angles.size(), 1.0), o), 0.0};
  out.seconds = clock.seconds();
  const NormalizedStepPath& path = out.path;
  std::vector<double> table;
  for (std::size_t k = 0; k < path.step.size(); ++k)
    table.insert(table.end(), {path.rescaled[k], path.energy[k], double(path.clusters[k]), path.time[k],
                               path.step[k] <= path.engine_steps ? 1.0 : 0.0});
  write_npy(file, table.data(), {path.step.size(), 5});
  return out;
}

nlohmann::json run_numbers(const NormalizedStepOptions& o, const TimedPath& run) {
  const NormalizedStepPath& path = run.path;
  return {{"beta", o.beta},
          {"h", 1e-5 * std::log(o.beta)},
          {"merge_distance", o.merge_distance},
          {"steps", path.steps},
          {"status", path.status},
          {"rescaled_time", path.rescaled.back()},
          {"final_clusters", path.clusters.back()},
          {"final_energy", path.energy.back()},
          {"engine_steps", path.engine_steps},
          {"engine_floor_clusters", path.floor_clusters},
          {"engine_until_s", double(path.engine_steps) * 1e-5},
          {"max_direction_gap", path.max_direction_gap},
          {"max_norm_error", path.max_norm_error},
          {"max_arclength_gap", std::abs(path.arclength.back() - path.rescaled.back())},
          {"wall_seconds", run.seconds},
          {"steps_per_second", double(path.steps) / run.seconds}};
}

// The authors' protocol (Eq. M5) through the engine at one beta: long_beta<B>.npy, and the plateaus
// beside the exact flow's (`exact`: that beta's staircase plateaus).
nlohmann::json long_run(const NormalizedStepOptions& o, const nlohmann::json& exact, const std::filesystem::path& dir) {
  const TimedPath run = timed_normalized_steps(o, dir / fmt::format("long_beta{:g}.npy", o.beta));
  nlohmann::json numbers = run_numbers(o, run);
  const double s_engine = numbers["engine_until_s"];
  nlohmann::json plateaus = nlohmann::json::array();
  bool match = true;
  std::size_t k = 0;
  for (const Plateau& p : find_plateaus(run.path)) {
    if (p.clusters == 1) continue;
    const bool has_exact = k < exact.size() && exact[k]["clusters"] == p.clusters;
    const double exact_level = has_exact ? exact[k]["energy_level"].get<double>() : NAN;
    match = match && has_exact && std::abs(exact_level - p.energy_level) < 1e-12;
    plateaus.push_back({{"clusters", p.clusters}, {"s_start", p.s_start}, {"s_end", p.s_end},
                        {"energy_level", p.energy_level}, {"energy_end", p.energy_end},
                        {"exact_flow_level", has_exact ? nlohmann::json(exact_level) : nlohmann::json(nullptr)},
                        {"field", plateau_field(p, s_engine)}});
    ++k;
  }
  numbers["plateaus"] = plateaus;
  numbers["levels_match_exact_flow"] = match && k == exact.size();
  return numbers;
}

// Per beta the merging run (long_runs) and, with --long, the authors' whole 10^6 steps through the
// engine without merging (long_runs_unmerged, long_unmerged_beta<B>.npy): the collapsed pairs then
// oscillate at the step length and take nearly all of it, so the staircase stalls where it is.
nlohmann::json long_runs(const std::vector<double>& betas, const nlohmann::json& staircase_plateaus,
                         const ReproductionContext& ctx) {
  const OneThread one_thread;
  ProgressBar bar(ctx.label + " long runs");
  nlohmann::json runs = nlohmann::json::array(), unmerged = nlohmann::json::array();
  for (std::size_t b = 0; b < betas.size(); ++b) {
    NormalizedStepOptions o;
    o.beta = betas[b];
    o.steps = kAuthorsSteps;
    o.progress = [&](long done) {
      bar.update((double(b) + double(done) / double(kAuthorsSteps)) / double(betas.size()),
                 fmt::format("beta = {:g}, step {} of {}", betas[b], done, kAuthorsSteps));
      return !interrupted();
    };
    runs.push_back(long_run(o, staircase_plateaus[fmt::format("{:g}", betas[b])], ctx.dir));
    if (!ctx.long_runs) continue;
    o.merge_distance = 0.0;
    const TimedPath run = timed_normalized_steps(o, ctx.dir / fmt::format("long_unmerged_beta{:g}.npy", betas[b]));
    unmerged.push_back(run_numbers(o, run));
    unmerged.back()["final_energy_times_25"] = run.path.energy.back() * 25.0;
  }
  bar.finish();
  return ctx.long_runs ? nlohmann::json{{"merged", runs}, {"unmerged", unmerged}} : nlohmann::json{{"merged", runs}};
}

// Two groups delta0 apart: the measured escape time of the two-cluster plateau.
double two_group_escape(double beta) {
  CircleFlowOptions o;
  o.beta = beta;
  const CircleFlowPath path =
      run_circle_flow({0.0, 0.02, kDelta0, kDelta0 + 0.01, kDelta0 + 0.02}, {1, 1, 1, 1, 1}, o);
  const std::vector<Plateau> plateaus = find_plateaus(path);
  if (path.status != "one_cluster" || plateaus.size() < 2 || plateaus[plateaus.size() - 2].clusters != 2)
    throw std::runtime_error("reproduce metastability: the two groups did not end in one cluster through two");
  return plateaus[plateaus.size() - 2].t_end - plateaus[plateaus.size() - 2].t_start;
}

nlohmann::json escape_series(const std::vector<double>& betas, const std::filesystem::path& dir) {
  std::vector<double> table, log_measured, log_closed;
  double worst = 0.0;
  for (double beta : betas) {
    const double measured = two_group_escape(beta);
    // The groups are symmetric about 0.01 and delta0 + 0.01: the clusters form delta0 apart.
    const double closed = two_cluster_escape_time(0.4, 0.6, beta, kDelta0, CircleFlowOptions{}.merge_gap);
    const double asymptotic = two_cluster_escape_asymptotic(0.4, 0.6, beta, kDelta0);
    table.insert(table.end(), {beta, measured, closed, asymptotic});
    log_measured.push_back(std::log(measured));
    log_closed.push_back(std::log(closed));
    worst = std::max(worst, std::abs(measured / closed - 1.0));
  }
  write_npy(dir / "escape.npy", table.data(), {betas.size(), 4});
  const LineFit fit = fit_line(betas, log_measured), closed = fit_line(betas, log_closed);
  return {{"slope", fit.slope},
          {"intercept", fit.intercept},
          {"max_residual", fit.max_residual},
          {"betas", betas},
          {"log_escape_times", log_measured},
          {"slope_closed_form", closed.slope},
          {"slope_asymptotic", 1.0 - std::cos(kDelta0)},
          {"max_relative_gap_to_closed_form", worst},
          {"delta0", kDelta0},
          {"weights", {0.4, 0.6}}};
}

// Tokens i, j share a cluster when beta (1 - <x_i, x_j>) < 1 (connected components).
int count_clusters(const Points<double>& x, double beta) {
  const Eigen::Index n = x.rows();
  std::vector<Eigen::Index> root(static_cast<std::size_t>(n));
  std::iota(root.begin(), root.end(), 0);
  auto find = [&](Eigen::Index i) {
    while (root[i] != i) i = root[i];
    return i;
  };
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = i + 1; j < n; ++j)
      if (beta * (1.0 - x.row(i).dot(x.row(j))) < 1.0) root[find(j)] = find(i);
  int count = 0;
  for (Eigen::Index i = 0; i < n; ++i) count += find(i) == i;
  return count;
}

// The engine on the sphere: `simulate` from a perturbed staircase start in R^3.
nlohmann::json sphere_run(const ReproductionContext& ctx) {
  const std::filesystem::path dir = ctx.dir / "sphere";
  std::filesystem::create_directories(dir);
  const std::vector<double> angles = staircase_angles(kSphereBeta);
  Points<double> x0(5, 3);
  for (Eigen::Index i = 0; i < 5; ++i) {
    const double lat = 0.05 * static_cast<double>(i % 2 == 0 ? 1 : -1);  // off the great circle
    x0.row(i) << std::cos(angles[i]) * std::cos(lat), std::sin(angles[i]) * std::cos(lat), std::sin(lat);
  }
  write_points(dir / "x0.npy", x0);
  const double T = ctx.quick ? 2e3 : 2e5;
  write_text(dir / "config.toml",
             sphere_particle_config(fmt::format("reproduce metastability: 5 tokens on S^2, Q = K = V = I, beta = {}",
                                                kSphereBeta),
                                    kSphereBeta, T, 1e-10, 20));
  const PreparedSimulation sim = prepare_simulation(Config::from_file((dir / "config.toml").string()));
  const auto summary = nlohmann::json::parse(run_simulation(sim, dir, ctx.label + " sphere"));
  if (summary.at("status") != "finished")
    throw std::runtime_error("reproduce metastability: the sphere run ended with status " +
                             summary.at("status").get<std::string>());
  const NpyArray traj = read_npy(dir / "trajectory.npy"), times = read_npy(dir / "times.npy");
  AttentionField<double> field(sim.attention, sim.initial);
  std::vector<double> table;
  for (std::size_t f = 0; f < times.size(); ++f) {
    const Points<double> x = Eigen::Map<const Points<double>>(traj.data.data() + f * 15, 5, 3);
    const double e = 2.0 * std::exp(-kSphereBeta) * field.interaction_energy(times.data[f], x);
    table.insert(table.end(), {times.data[f], e, double(count_clusters(x, kSphereBeta))});
  }
  write_npy(dir / "sphere.npy", table.data(), {times.size(), 3});
  return {{"beta", kSphereBeta}, {"T", T}, {"steps", summary.at("steps")}, {"frames", times.size()},
          {"final_clusters", table.back()}, {"final_energy", table[table.size() - 2]}};
}

}  // namespace

nlohmann::json reproduce_metastability(const ReproductionContext& ctx) {
  const std::vector<double> betas = ctx.quick ? std::vector<double>{500, 2000}
                                              : std::vector<double>{500, 1000, 1500, 2000, 3000, 4000};
  nlohmann::json plateaus = nlohmann::json::object(), runs = nlohmann::json::array();
  for (double beta : betas) {
    nlohmann::json r = staircase(beta, ctx.dir);
    plateaus[fmt::format("{:g}", beta)] = r["plateaus"];
    runs.push_back(std::move(r));
  }
  const nlohmann::json fit = escape_series(betas, ctx.dir);
  nlohmann::json numbers = {{"plateaus", plateaus},
          {"log_escape_time_slope", fit["slope"]},
          {"log_escape_time_fit", fit},
          {"staircase", runs},
          {"betas", betas},
          {"sphere", sphere_run(ctx)}};
  // Cheap in every form (they reach one cluster within 2.1 10^4 steps, 7 10^4 to 1.8 10^5 steps per second).
  const nlohmann::json long_numbers = long_runs(betas, plateaus, ctx);
  numbers["long_runs"] = long_numbers["merged"];
  if (ctx.long_runs) numbers["long_runs_unmerged"] = long_numbers["unmerged"];
  return numbers;
}

}  // namespace tokenflow::cli
