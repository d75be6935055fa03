// reproduce equiangular: the equiangular reduction of softmax attention on the sphere (Rigollet,
// "The Mean-Field Dynamics of Transformers", arXiv:2512.01868, 2025). n tokens with equal pairwise
// inner products rho stay equiangular under dx_i/dt = P_{x_i}(sum_j softmax_j(beta <x_i, x_j>) x_j),
// and rho(t) solves Eq. (E1) of include/tokenflow/equiangular.hpp; near the cluster 1 - rho(t)
// decays like e^{-2t} (rate_theory = 2).
//   runs/n<N>-beta<B>/  whole `tokenflow simulate` directories (init.kind = "file": x0.npy from
//                       equiangular_points, Q = K = V = I, scale = beta, normalize = "sphere",
//                       dopri5 at tol 1e-12, a frame every step) from rho0 = 0.2 to a gap of 1e-10;
//                       reduction.npy in each: per frame t, rho (ODE), 1 - rho (ODE), the
//                       particles' mean gap, max_ij |<x_i, x_j> - rho(t)|
//   ode.npy             per case a fine grid: t, rho, 1 - rho (rows case-major: cases x 400 x 3)
// Summary: max_abs_gap (particles against the ODE, over cases, frames and pairs), rate_fitted (the
// least-squares slope of -log(1 - rho) over the particles' frames with 1e-9 <= 1 - rho <= 1e-4,
// the case farthest from 2), rate_theory, and per case the same with the bias bound of the window.
#include <fmt/format.h>

#include <cmath>

#include "common.hpp"
#include "reproductions.hpp"
#include "run_simulation.hpp"
#include "tokenflow/equiangular.hpp"
#include "tokenflow/io.hpp"

namespace tokenflow::cli {

namespace {

constexpr double kRho0 = 0.2, kFinalGap = 1e-10, kParticleTol = 1e-12;
constexpr double kFitLow = 1e-9, kFitHigh = 1e-4;  // the gap window of the rate fit

struct Case {
  long n;
  double beta;
};

std::string case_config(const Case& c, double T) {
  return sphere_particle_config(fmt::format("reproduce equiangular: {} equiangular tokens (rho0 = {}) in R^{}, Q = K = V = I, "
                                            "beta = {}",
                                            c.n, kRho0, c.n, c.beta),
                                c.beta, T, kParticleTol, 1);
}

// Least-squares slope of y against x.
double slope(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

// One case: the particles through `simulate`, the ODE at the particles' frame times.
nlohmann::json run_case(const Case& c, const std::filesystem::path& dir, const std::string& label,
                        std::vector<double>& ode_grid) {
  const EquiangularModel model{static_cast<double>(c.n), c.beta};
  const double T = equiangular_clustering_time(model, kRho0, 1.0 - kFinalGap) + 0.5;
  std::filesystem::create_directories(dir);
  const Points<double> x0 = equiangular_points(c.n, kRho0);
  write_npy(dir / "x0.npy", x0.data(), {static_cast<std::size_t>(c.n), static_cast<std::size_t>(c.n)});
  const std::string toml = case_config(c, T);
  write_text(dir / "config.toml", toml);
  const auto summary = nlohmann::json::parse(
      run_simulation(prepare_simulation(Config::from_file((dir / "config.toml").string())), dir, label));
  if (summary.at("status") != "finished")
    throw std::runtime_error("reproduce equiangular: the particle run ended with status " +
                             summary.at("status").get<std::string>());

  const NpyArray traj = read_npy(dir / "trajectory.npy"), times = read_npy(dir / "times.npy");
  const std::size_t frames = times.size(), n = static_cast<std::size_t>(c.n);
  const EquiangularPath path = solve_equiangular(model, kRho0, times.data);
  std::vector<double> table, fit_t, fit_log;
  double max_gap = 0.0;
  for (std::size_t f = 0; f < frames; ++f) {
    const Points<double> x = Eigen::Map<const Points<double>>(traj.data.data() + f * n * n, c.n, c.n);
    const double deviation = equiangular_deviation(x, path.rho[f]), gap = mean_pair_gap(x);
    max_gap = std::max(max_gap, deviation);
    table.insert(table.end(), {times.data[f], path.rho[f], path.gap[f], gap, deviation});
    if (gap >= kFitLow && gap <= kFitHigh) {
      fit_t.push_back(times.data[f]);
      fit_log.push_back(std::log(gap));
    }
  }
  write_npy(dir / "reduction.npy", table.data(), {frames, 5});

  std::vector<double> grid;
  for (int k = 0; k < 400; ++k) grid.push_back(T * k / 399.0);
  const EquiangularPath fine = solve_equiangular(model, kRho0, grid);
  for (int k = 0; k < 400; ++k) ode_grid.insert(ode_grid.end(), {grid[k], fine.rho[k], fine.gap[k]});

  // |G(u) - 2| <= 2 u (1 + beta / n) (1 + u (beta + 1)) on the window (Eq. (E2) expanded to first
  // order in u, with its remainder): the fitted rate lies within that of 2.
  const double bias = 2.0 * kFitHigh * (1.0 + c.beta / static_cast<double>(c.n)) * (1.0 + kFitHigh * (c.beta + 1.0));
  const double rate = fit_t.size() >= 2 ? -slope(fit_t, fit_log) : std::nan("");
  return {{"n", c.n},
          {"d", c.n},
          {"beta", c.beta},
          {"rho0", kRho0},
          {"T", T},
          {"frames", frames},
          {"steps", summary.at("steps")},
          {"max_abs_gap", max_gap},
          {"rate_fitted", rate},
          {"rate_fit_frames", fit_t.size()},
          {"rate_bias_bound", bias},
          {"dir", dir.filename().string()}};
}

}  // namespace

nlohmann::json reproduce_equiangular(const ReproductionContext& ctx) {
  const std::vector<Case> cases = ctx.quick ? std::vector<Case>{{8, 1.0}, {8, 4.0}}
                                            : std::vector<Case>{{16, 1.0}, {16, 4.0}, {64, 4.0}, {64, 9.0}};
  nlohmann::json per_case = nlohmann::json::array();
  std::vector<double> ode_grid;
  double max_gap = 0.0, worst_rate = std::nan("");
  for (const Case& c : cases) {
    const std::string name = fmt::format("n{}-beta{:g}", c.n, c.beta);
    auto r = run_case(c, ctx.dir / "runs" / name, ctx.label + " " + name, ode_grid);
    max_gap = std::max(max_gap, r["max_abs_gap"].get<double>());
    const double rate = r["rate_fitted"].get<double>();
    if (!(std::abs(rate - kEquiangularRate) <= std::abs(worst_rate - kEquiangularRate))) worst_rate = rate;
    per_case.push_back(std::move(r));
  }
  write_npy(ctx.dir / "ode.npy", ode_grid.data(), {cases.size(), 400, 3});
  return {{"max_abs_gap", max_gap},
          {"rate_fitted", worst_rate},
          {"rate_theory", kEquiangularRate},
          {"target_gap", 1e-8},
          {"rho0", kRho0},
          {"particle_tol", kParticleTol},
          {"fit_window", {kFitLow, kFitHigh}},
          {"cases", per_case}};
}

}  // namespace tokenflow::cli
