// reproduce long-context: the long-context phase transition (Rigollet, "The Mean-Field Dynamics of
// Transformers", arXiv:2512.01868, 2025; critical scaling of Chen, Lin, Polyanskiy, Rigollet,
// arXiv:2510.05554). With beta = gamma log n, n equiangular tokens started at rho0 cluster (reach
// rho = 0.99) in a time that grows at most like log n for gamma < 1 / (1 - rho0) and like
// n^{gamma (1 - rho0) - 1} (times a power of log n) above: include/tokenflow/equiangular.hpp.
//   ns.npy, gammas.npy       the grids (n from 10 to 10^30; 10^9 with --quick)
//   times.npy                clustering times of the reduction, rho0 = 0: gammas x ns
//   times_rho0_half.npy      the same from rho0 = 1/2
//   particles.npy            rows n, gamma, T (the reduction's time), rho of the particles at T,
//                            their clustering time, max_ij |<x_i, x_j> - rho_particles|: particles
//                            x_i = e_i in R^n (rho0 = 0) through simulate's library call (dopri5,
//                            tol 1e-10, Q = K = V = I, scale = gamma log n, normalize = "sphere")
//   example/                 config.toml and x0.npy of one particle run (n = 8, gamma = 2), for
//                            `tokenflow simulate --config example/config.toml --out DIR`
// The growth exponent of each gamma is the coefficient a of the least-squares fit
// log T = a log n + b log log n + c over n >= 10^10 (10^3 with --quick; b absorbs the log factors the theory predicts:
// T ~ n^{gamma - 1} log n / 2 from rho0 = 0, ~ n^{gamma/2 - 1} / (gamma log n / 2) from rho0 = 1/2);
// growth_exponents_plain is the slope of log T against log n over the last two decades. The
// critical gamma is where the line fitted to the exponents above 0.05 crosses zero.
#include <fmt/format.h>

#include <Eigen/Dense>
#include <cmath>

#include "common.hpp"
#include "reproductions.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/equiangular.hpp"
#include "tokenflow/io.hpp"
#include "tokenflow/linalg.hpp"

namespace tokenflow::cli {

namespace {

constexpr double kTarget = 0.99;        // clustered: rho >= 0.99
constexpr double kActiveExponent = 0.05;  // exponents above this enter the critical-gamma fit

struct Fit {
  double exponent, log_factor, plain;
};

// log T = a log n + b log log n + c over n >= fit_from; plain: slope over the last two decades.
Fit fit_growth(const std::vector<double>& ns, const std::vector<double>& T, double fit_from) {
  std::vector<int> rows;
  for (std::size_t k = 0; k < ns.size(); ++k)
    if (ns[k] >= fit_from) rows.push_back(static_cast<int>(k));
  Eigen::MatrixXd A(rows.size(), 3);
  Eigen::VectorXd y(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const double ln = std::log(ns[rows[r]]);
    A.row(r) << ln, std::log(ln), 1.0;
    y[r] = std::log(T[rows[r]]);
  }
  const Eigen::Vector3d coef = linalg::least_squares(A, y);
  const std::size_t last = ns.size() - 1;
  std::size_t first = last;
  while (first > 0 && ns[first - 1] >= ns[last] / 100.0 * (1.0 - 1e-9)) --first;
  const double plain = (std::log(T[last]) - std::log(T[first])) / (std::log(ns[last]) - std::log(ns[first]));
  return {coef[0], coef[1], plain};
}

// gamma_c: the zero of the line fitted (least squares) to the exponents above kActiveExponent.
double critical_gamma(const std::vector<double>& gammas, const std::vector<double>& exponents) {
  std::vector<double> g, a;
  for (std::size_t k = 0; k < gammas.size(); ++k)
    if (exponents[k] > kActiveExponent) {
      g.push_back(gammas[k]);
      a.push_back(exponents[k]);
    }
  if (g.size() < 2) return std::nan("");
  double sg = 0, sa = 0, sgg = 0, sga = 0;
  const double m = static_cast<double>(g.size());
  for (std::size_t k = 0; k < g.size(); ++k) {
    sg += g[k];
    sa += a[k];
    sgg += g[k] * g[k];
    sga += g[k] * a[k];
  }
  const double slope = (m * sga - sg * sa) / (m * sgg - sg * sg), intercept = (sa - slope * sg) / m;
  return -intercept / slope;
}

std::string key(double gamma) { return fmt::format("{:g}", gamma); }

// The reduction's clustering times over the grid from rho0, and their fits.
nlohmann::json ode_sweep(double rho0, const std::vector<double>& gammas, const std::vector<double>& ns,
                         double fit_from, const std::filesystem::path& file) {
  std::vector<double> table;
  nlohmann::json exponents = nlohmann::json::object(), plain = nlohmann::json::object(),
                 factors = nlohmann::json::object(), theory = nlohmann::json::object();
  std::vector<double> fitted;
  for (double gamma : gammas) {
    std::vector<double> T;
    for (double n : ns) T.push_back(equiangular_clustering_time(long_context_model(n, gamma), rho0, kTarget));
    table.insert(table.end(), T.begin(), T.end());
    const Fit fit = fit_growth(ns, T, fit_from);
    fitted.push_back(fit.exponent);
    exponents[key(gamma)] = fit.exponent;
    plain[key(gamma)] = fit.plain;
    factors[key(gamma)] = fit.log_factor;
    theory[key(gamma)] = long_context_exponent_theory(gamma, rho0);
  }
  write_npy(file, table.data(), {gammas.size(), ns.size()});
  return {{"rho0", rho0},
          {"critical_gamma", critical_gamma(gammas, fitted)},
          {"critical_gamma_theory", long_context_critical_gamma(rho0)},
          {"growth_exponents", exponents},
          {"growth_exponents_theory", theory},
          {"growth_exponents_plain", plain},
          {"log_factor_exponents", factors}};
}

std::string particle_config(long n, double gamma, double T) {
  return sphere_particle_config(
      fmt::format("reproduce long-context: x_i = e_i in R^{} (x0.npy: the identity, rho0 = 0), beta = gamma log n, "
                  "gamma = {}",
                  n, gamma),
      gamma * std::log(double(n)), T, 1e-10, 0);
}

// One particle run to the reduction's clustering time T; returns the row of particles.npy.
std::vector<double> particle_run(long n, double gamma) {
  const EquiangularModel model = long_context_model(static_cast<double>(n), gamma);
  const double T = equiangular_clustering_time(model, 0.0, kTarget);
  AttentionSpec spec;
  spec.scale = model.beta;
  spec.normalize = "sphere";
  spec.summation = "dense";
  RunSpec run;
  run.T = T;
  run.dt = 0.01;
  run.integrator = Integrator::dopri5;
  run.tol = 1e-10;
  Measure<double> mu;
  mu.points = equiangular_points(n, 0.0);
  mu.weights = Vec<double>::Constant(n, 1.0 / static_cast<double>(n));
  const SimulationResult<double> r =
      simulate(make_attention(spec, static_cast<int>(n)), run, mu, [](const Progress&) { return !interrupted(); });
  if (r.status != "finished") throw std::runtime_error("reproduce long-context: a particle run ended " + r.status);
  const double rho = 1.0 - mean_pair_gap(r.positions);
  // The particles' own crossing time, one Newton step from T (|rho - 0.99| is ~1e-9, so the
  // step's error, O((rho - 0.99)^2 |F'| / F^3), is far below the integration error).
  const double t_cross = T + (kTarget - rho) / equiangular_velocity(model, rho);
  return {static_cast<double>(n), gamma, T, rho, t_cross, equiangular_deviation(r.positions, rho)};
}

}  // namespace

nlohmann::json reproduce_long_context(const ReproductionContext& ctx) {
  const std::vector<double> gammas{0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0};
  std::vector<double> ns;
  // The reduction to n = 10^30 (10^9 with --quick); the exponents are fitted over the upper two
  // thirds of the decades, where the log factors and the bounded part of T weigh least.
  const double top = ctx.quick ? 9.0 : 30.0, fit_from = std::pow(10.0, top / 3.0);
  for (double e = 1.0; e <= top + 1e-9; e += 0.25) ns.push_back(std::pow(10.0, e));
  write_npy(ctx.dir / "ns.npy", ns.data(), {ns.size()});
  write_npy(ctx.dir / "gammas.npy", gammas.data(), {gammas.size()});
  nlohmann::json numbers = ode_sweep(0.0, gammas, ns, fit_from, ctx.dir / "times.npy");
  numbers["rho0_half"] = ode_sweep(0.5, gammas, ns, fit_from, ctx.dir / "times_rho0_half.npy");
  numbers["fit_from_n"] = fit_from;
  numbers["n_max"] = ns.back();
  numbers["target_rho"] = kTarget;

  // Particles from rho0 = 0 at the sizes a laptop runs in seconds (d = n).
  const std::vector<long> sizes = ctx.quick ? std::vector<long>{8, 16, 32} : std::vector<long>{8, 16, 32, 64, 128};
  const std::vector<double> particle_gammas = ctx.quick ? std::vector<double>{0.5, 2.0} : std::vector<double>{0.5, 1.5, 2.0};
  std::vector<double> rows;
  ProgressBar bar(ctx.label + " particles");
  const std::size_t total = sizes.size() * particle_gammas.size();
  std::size_t done = 0;
  double worst_time_gap = 0.0, worst_deviation = 0.0;
  nlohmann::json particle_exponents = nlohmann::json::object(), ode_exponents_same_n = nlohmann::json::object();
  for (double gamma : particle_gammas) {
    std::vector<double> t_particles, t_ode;
    for (long n : sizes) {
      const std::vector<double> row = particle_run(n, gamma);
      rows.insert(rows.end(), row.begin(), row.end());
      t_ode.push_back(row[2]);
      t_particles.push_back(row[4]);
      worst_time_gap = std::max(worst_time_gap, std::abs(row[4] - row[2]) / row[2]);
      worst_deviation = std::max(worst_deviation, row[5]);
      bar.update(static_cast<double>(++done) / static_cast<double>(total), fmt::format("n = {}, gamma = {}", n, gamma));
    }
    const double span = std::log(double(sizes.back())) - std::log(double(sizes.front()));
    particle_exponents[key(gamma)] = (std::log(t_particles.back()) - std::log(t_particles.front())) / span;
    ode_exponents_same_n[key(gamma)] = (std::log(t_ode.back()) - std::log(t_ode.front())) / span;
  }
  bar.finish();
  write_npy(ctx.dir / "particles.npy", rows.data(), {total, 6});
  std::filesystem::create_directories(ctx.dir / "example");
  const Points<double> identity = equiangular_points(8, 0.0);
  write_npy(ctx.dir / "example" / "x0.npy", identity.data(), {8, 8});
  write_text(ctx.dir / "example" / "config.toml",
             particle_config(8, 2.0, equiangular_clustering_time(long_context_model(8, 2.0), 0.0, kTarget)));
  numbers["particles"] = {{"rho0", 0.0},
                          {"sizes", sizes},
                          {"gammas", particle_gammas},
                          {"max_relative_time_gap", worst_time_gap},
                          {"max_equiangular_deviation", worst_deviation},
                          {"exponents", particle_exponents},
                          {"reduction_exponents_same_sizes", ode_exponents_same_n}};
  return numbers;
}

}  // namespace tokenflow::cli
