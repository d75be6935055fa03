// reproduce energy-dissipation: the gradient-flow structure of softmax attention, measured along
// `simulate` trajectories.
//
// E(mu) = 1/2 sum_ij a_i a_j exp(s_ij), s_ij = x_j^T A x_i. Along dx_i/dt = Gamma_i = C ybar_i the
// chain rule gives dE/dt = sum_i <grad_{x_i} E, Gamma_i> (Eq. 1 of tokenflow/energy.hpp), and for A
// symmetric and C = c A (c > 0) the flow is the gradient flow of E in the metric g_i = a_i Z_i / c,
// so dE/dt = |dE|^2 = c sum_i a_i Z_i |A ybar_i|^2 (Eq. 2): the energy-dissipation identity
//   E(t_1) - E(t_0) = int_{t_0}^{t_1} |dE|^2(mu_t) dt.                                 Eq. (3)
// Runs from the same tokens (d = 2, A = [[0.3, 0.2], [0.2, -0.2]] symmetric and indefinite, T = 2;
// a larger A makes E grow by orders of magnitude and the gaps reach their order only at small dt):
//   inside/   C = A (c = 1): Eq. (3) holds; each run of the integrator study below is measured;
//   outside/  C = R A, R the rotation by 90 degrees: <u, R u> = 0 in d = 2, so dE/dt = 0 exactly
//             while |dE|^2 = sum_i a_i Z_i |A ybar_i|^2 > 0 (c = |C|_F / |A|_F = 1): Eq. (3)
//             fails by the whole right-hand side.
// At every frame: E, dE/dt (Eq. 1) and |dE|^2 (Eq. 2) from energy_rates (plain float64). The gap
// of Eq. (3) is measured cumulatively, from t = 0 to every even frame, with the right-hand side by
// Simpson's rule over pairs of steps (non-uniform for dopri5):
//   gap = max_k |(E_k - E_0) - int_0^{t_k} |dE|^2| / int_0^T |dE|^2.
// The exact flow has gap 0; the computed one has the integrator's error in E_k (order p: euler 1,
// rk4 4) plus Simpson's, O(h^4), so the gap falls like dt^p: an observed order of 1 for euler, 4 for
// rk4 (`integrators.csv`: integrator, dt, steps, gap). dopri5 at tol 1e-10 is the tight run: its
// steps are long (about 0.1, where Simpson's error is 1e-6), so each step is integrated by
// three-point Gauss-Legendre instead (error O(h^7); the states at the nodes integrated from the
// step's start by rk4 at 1/16 of the way), and the gap is dopri5's error.
// Writes, per run directory (inside/rk4_<k>, inside/euler_<k>, inside/dopri5, outside/rk4):
// config.toml (a `tokenflow simulate` config), times.npy, energy.npy, rate.npy, slope_squared.npy;
// and layers/ (two time-dependent layers, see layered_identity_gap): config.toml and per layer
// layer<l>_times.npy, layer<l>_energy.npy, layer<l>_slope_squared.npy.
#include <fmt/format.h>

#include <cmath>

#include "common.hpp"
#include "reproductions.hpp"
#include "run_simulation.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/energy.hpp"
#include "tokenflow/io.hpp"

namespace tokenflow::cli {

namespace {

constexpr const char* kSymmetricA = "[[0.3, 0.2], [0.2, -0.2]]";
constexpr const char* kRotatedA = "[[-0.2, 0.2], [0.3, 0.2]]";  // R A, R = [[0, -1], [1, 0]]

std::string dissipation_config(long n, const char* V, const std::string& integrator, double dt, double T) {
  return fmt::format(R"(# reproduce energy-dissipation: softmax, A = K (Q = I, scale = 1) symmetric, V = {V}
seed = 3
[init]
kind = "gaussian"
n = {n}
mean = [0.0, 0.0]
cov = [[1.0, 0.3], [0.3, 0.6]]
[attention]
kind = "softmax"
scale = 1.0
Q = [[1.0, 0.0], [0.0, 1.0]]
K = {A}
V = {V}
[run]
T = {T}
dt = {dt:.17g}
integrator = "{integrator}"
save_every = 1
tol = 1e-10
)",
                     fmt::arg("V", V), fmt::arg("n", n), fmt::arg("A", kSymmetricA), fmt::arg("T", T),
                     fmt::arg("dt", dt), fmt::arg("integrator", integrator));
}

struct DissipationRun {
  std::vector<double> times, energy, rate, slope_squared;
  std::vector<double> step_integrals;  // dopri5: int |dE|^2 over each step (Gauss-Legendre)
  long steps = 0;
};

// The state a time tau after x (the same layer): rk4 with 16 substeps, whose error (tau / 16)^5
// per substep is far below dopri5's tolerance for the steps taken here (tau < 0.2).
Measure<double> state_after(const PreparedSimulation& sim, const Points<double>& x, double tau) {
  Measure<double> mu = sim.initial;
  mu.points = x;
  RunSpec run = sim.config.run;
  run.T = tau;
  run.dt = tau / 16;
  run.integrator = Integrator::rk4;
  run.save_every = 0;
  mu.points = simulate<double>(sim.attention, run, mu).positions;
  return mu;
}

// int_{t}^{t + h} |dE|^2 by three-point Gauss-Legendre (error O(h^7)), the states at the nodes
// integrated from x.
double gauss_legendre_step(const PreparedSimulation& sim, const Points<double>& x, double h) {
  const double r = std::sqrt(15.0) / 10.0;
  const double nodes[3] = {0.5 - r, 0.5, 0.5 + r}, weights[3] = {5.0 / 18, 8.0 / 18, 5.0 / 18};
  double sum = 0.0;
  for (int q = 0; q < 3; ++q) sum += weights[q] * energy_rates(sim.attention, state_after(sim, x, nodes[q] * h)).slope_squared;
  return h * sum;
}

DissipationRun run_and_measure(const std::string& toml, const std::filesystem::path& dir, const std::string& label) {
  std::filesystem::create_directories(dir);
  write_text(dir / "config.toml", toml);
  const PreparedSimulation sim = prepare_simulation(Config::from_text(toml, (dir / "config.toml").string()));
  ProgressBar bar(label);
  const SimulationResult<double> r = simulate<double>(sim.attention, sim.config.run, sim.initial, [&](const Progress& p) {
    bar.update(p.t / p.T);
    return !interrupted();
  });
  bar.finish();
  if (r.status != "finished") throw std::runtime_error("energy-dissipation: the run in " + dir.string() + " ended " + r.status);
  DissipationRun m;
  m.steps = r.steps;
  for (std::size_t k = 0; k < r.frames.size(); ++k) {
    Measure<double> mu = sim.initial;
    mu.points = r.frames[k];
    const EnergyRates e = energy_rates(sim.attention, mu, r.times[k]);
    m.times.push_back(r.times[k]);
    m.energy.push_back(e.energy);
    m.rate.push_back(e.rate);
    m.slope_squared.push_back(e.slope_squared);
    if (sim.config.run.integrator == Integrator::dopri5 && k + 1 < r.frames.size())
      m.step_integrals.push_back(gauss_legendre_step(sim, r.frames[k], r.times[k + 1] - r.times[k]));
  }
  for (const auto& [name, v] : {std::pair<const char*, const std::vector<double>*>{"times", &m.times},
                                {"energy", &m.energy}, {"rate", &m.rate}, {"slope_squared", &m.slope_squared}})
    write_npy(dir / (std::string(name) + ".npy"), v->data(), {v->size()});
  return m;
}

// Simpson's rule on [t0, t2] with t1 inside (steps h0 = t1 - t0, h1 = t2 - t1 may differ).
double simpson(double t0, double t1, double t2, double f0, double f1, double f2) {
  const double h0 = t1 - t0, h1 = t2 - t1, h = h0 + h1;
  return h / 6.0 * ((2.0 - h1 / h0) * f0 + h * h / (h0 * h1) * f1 + (2.0 - h0 / h1) * f2);
}

struct IdentityGap {
  double gap = 0.0;         // max over even frames of the cumulative gap / total dissipation
  double dissipation = 0.0;  // int_0^T |dE|^2 (to the last even frame)
  double energy_change = 0.0;
};

// The cumulative gap of Eq. (3) with the steps' Gauss-Legendre integrals (dopri5).
IdentityGap identity_gap_per_step(const DissipationRun& m) {
  IdentityGap g;
  double integral = 0.0;
  std::vector<double> gaps;
  for (std::size_t k = 0; k + 1 < m.times.size(); ++k) {
    integral += m.step_integrals[k];
    gaps.push_back(std::abs((m.energy[k + 1] - m.energy[0]) - integral));
  }
  g.dissipation = integral;
  g.energy_change = m.energy.back() - m.energy[0];
  for (double v : gaps) g.gap = std::max(g.gap, v / integral);
  return g;
}

// The cumulative gap of Eq. (3) (see the header comment).
IdentityGap identity_gap(const DissipationRun& m) {
  if (!m.step_integrals.empty()) return identity_gap_per_step(m);
  IdentityGap g;
  std::vector<double> gaps;
  double integral = 0.0;
  std::size_t k = 0;
  for (; k + 2 < m.times.size(); k += 2) {
    integral += simpson(m.times[k], m.times[k + 1], m.times[k + 2], m.slope_squared[k], m.slope_squared[k + 1],
                        m.slope_squared[k + 2]);
    gaps.push_back(std::abs((m.energy[k + 2] - m.energy[0]) - integral));
  }
  g.dissipation = integral;
  g.energy_change = m.energy[k] - m.energy[0];
  for (double v : gaps) g.gap = std::max(g.gap, v / integral);
  return g;
}

// max_k |dE/dt - |dE|^2| / max_k |dE|^2: Eq. (1) against Eq. (2) at the same states (no integrator).
double pointwise_gap(const DissipationRun& m) {
  double num = 0.0, den = 0.0;
  for (std::size_t k = 0; k < m.rate.size(); ++k) {
    num = std::max(num, std::abs(m.rate[k] - m.slope_squared[k]));
    den = std::max(den, m.slope_squared[k]);
  }
  return num / den;
}

// Time-dependent parameters (`[[layers]]`, one head each, A_l symmetric, C_l = c_l A_l): on each
// layer's interval the flow is the gradient flow of that layer's energy E_l, so Eq. (3) holds
// interval by interval with E_l (E jumps at the cuts, where the energy itself changes). The run
// uses dt = 2^-6, so the steps land exactly on the cut at t = 1 and each layer has an even number
// of steps for Simpson's rule; the energies of a layer are evaluated with that layer at every frame
// of its closed interval (the frame at the cut belongs to both). Returns the larger of the two
// layers' gaps.
constexpr const char* kLayerTwoA = "[[-0.2, 0.1], [0.1, 0.3]]";
constexpr const char* kLayerTwoV = "[[-0.4, 0.2], [0.2, 0.6]]";  // c = 2

double layered_identity_gap(const ReproductionContext& ctx, long n, double T) {
  const double cut = 1.0, dt = 0x1p-6;
  const std::string toml = fmt::format(R"(# reproduce energy-dissipation: time-dependent single-head layers, A_l symmetric, V_l = c_l A_l
seed = 3
[init]
kind = "gaussian"
n = {n}
mean = [0.0, 0.0]
cov = [[1.0, 0.3], [0.3, 0.6]]
[attention]
kind = "softmax"
scale = 1.0
Q = [[1.0, 0.0], [0.0, 1.0]]
K = {A2}
V = {V2}
[run]
T = {T}
dt = {dt:.17g}
integrator = "rk4"
save_every = 1
[[layers]]
until = {cut}
K = {A1}
V = {A1}
)",
                                       fmt::arg("n", n), fmt::arg("A2", kLayerTwoA), fmt::arg("V2", kLayerTwoV),
                                       fmt::arg("T", T), fmt::arg("dt", dt), fmt::arg("cut", cut), fmt::arg("A1", kSymmetricA));
  const auto dir = ctx.dir / "layers";
  std::filesystem::create_directories(dir);
  write_text(dir / "config.toml", toml);
  const PreparedSimulation sim = prepare_simulation(Config::from_text(toml, (dir / "config.toml").string()));
  ProgressBar bar(ctx.label + " layers");
  const SimulationResult<double> r = simulate<double>(sim.attention, sim.config.run, sim.initial, [&](const Progress& p) {
    bar.update(p.t / p.T);
    return !interrupted();
  });
  bar.finish();
  if (r.status != "finished") throw std::runtime_error("energy-dissipation: the layered run ended " + r.status);
  double gap = 0.0;
  for (const auto& [lo, hi] : {std::pair<double, double>{0.0, cut}, {cut, T}}) {
    DissipationRun m;
    for (std::size_t k = 0; k < r.frames.size(); ++k) {
      if (r.times[k] < lo || r.times[k] > hi) continue;
      Measure<double> mu = sim.initial;
      mu.points = r.frames[k];
      const EnergyRates e = energy_rates(sim.attention, mu, lo);  // the layer of [lo, hi)
      m.times.push_back(r.times[k]);
      m.energy.push_back(e.energy);
      m.slope_squared.push_back(e.slope_squared);
    }
    const std::string layer = lo == 0.0 ? "layer1" : "layer2";
    write_npy(dir / (layer + "_times.npy"), m.times.data(), {m.times.size()});
    write_npy(dir / (layer + "_energy.npy"), m.energy.data(), {m.energy.size()});
    write_npy(dir / (layer + "_slope_squared.npy"), m.slope_squared.data(), {m.slope_squared.size()});
    gap = std::max(gap, identity_gap(m).gap);
  }
  return gap;
}

}  // namespace

nlohmann::json reproduce_energy_dissipation(const ReproductionContext& ctx) {
  const long n = ctx.quick ? 32 : 128;
  const double T = 2.0;
  const std::vector<double> dts = ctx.quick ? std::vector<double>{0.2, 0.1, 0.05, 0.025}
                                            : std::vector<double>{0.2, 0.1, 0.05, 0.025, 0.0125};
  std::string table = "integrator,dt,steps,gap\n";
  nlohmann::json per_integrator = nlohmann::json::object();
  for (const std::string integrator : {"rk4", "euler"}) {
    nlohmann::json rows = nlohmann::json::array();
    std::vector<double> gaps;
    for (std::size_t k = 0; k < dts.size(); ++k) {
      const auto m = run_and_measure(dissipation_config(n, kSymmetricA, integrator, dts[k], T),
                                     ctx.dir / "inside" / fmt::format("{}_{}", integrator, k),
                                     fmt::format("{} inside {} dt={}", ctx.label, integrator, dts[k]));
      gaps.push_back(identity_gap(m).gap);
      table += fmt::format("{},{:.17g},{},{:.17g}\n", integrator, dts[k], m.steps, gaps.back());
    }
    // Observed order between consecutive dt (halved each time): log2(gap(dt) / gap(dt / 2)).
    std::vector<double> orders;
    for (std::size_t k = 0; k + 1 < gaps.size(); ++k) orders.push_back(std::log2(gaps[k] / gaps[k + 1]));
    per_integrator[integrator] = {{"dt", dts}, {"gap", gaps}, {"observed_order", orders}};
  }
  write_text(ctx.dir / "integrators.csv", table);
  const auto dopri = run_and_measure(dissipation_config(n, kSymmetricA, "dopri5", 0.05, T), ctx.dir / "inside" / "dopri5",
                                     ctx.label + " inside dopri5");
  const auto outside = run_and_measure(dissipation_config(n, kRotatedA, "rk4", dts.back(), T), ctx.dir / "outside" / "rk4",
                                       ctx.label + " outside rk4");
  const IdentityGap dopri_gap = identity_gap(dopri), outside_gap = identity_gap(outside);
  const auto& rk4 = per_integrator["rk4"];
  return {{"n", n},
          {"d", 2},
          {"T", T},
          {"A", kSymmetricA},
          {"V_inside", kSymmetricA},
          {"V_outside", kRotatedA},
          {"max_relative_gap", rk4["gap"].back()},
          {"max_relative_gap_dt", dts.back()},
          {"gap_outside", outside_gap.gap},
          {"outside_energy_change", outside_gap.energy_change},
          {"outside_dissipation", outside_gap.dissipation},
          {"integrators", per_integrator},
          {"dopri5", {{"tol", 1e-10}, {"steps", dopri.steps}, {"gap", dopri_gap.gap}}},
          {"inside_energy_change", dopri_gap.energy_change},
          {"inside_dissipation", dopri_gap.dissipation},
          {"layers_gap", layered_identity_gap(ctx, n, T)},
          {"layers_dt", 0x1p-6},
          {"pointwise_relative_gap_inside", pointwise_gap(dopri)},
          {"pointwise_relative_gap_outside", pointwise_gap(outside)}};
}

}  // namespace tokenflow::cli
