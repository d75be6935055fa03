// tokenflow simulate: the particle flow of DESIGN.md section 2.
#include <fmt/format.h>

#include <fstream>
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/energy.hpp"
#include "tokenflow/readers.hpp"

namespace tokenflow::cli {

namespace {

constexpr const char* kSimulateKeys = R"(Config keys (TOML; --set key=value overrides any of them):
  dtype = "f64"                 f64 | f32
  seed = 0
  [init]  kind = "gaussian"     gaussian | sphere | file
          n = 4096; mean = [0, 0]; cov = [[1, 0], [0, 1]]     (gaussian)
          d = 3                                               (sphere: uniform on S^{d-1})
          path = "x0.npy"; weights = "a.npy"; positions = "pos.npy"   (file)
  [attention]  kind = "softmax" softmax | l2 | sinkhorn | sigmoid | linear
          heads = 1; Q, K ((heads k) x d), V ((heads kv) x d), W (d x (heads kv)): default I
          scale = 1/sqrt(k); bias = -ln n (sigmoid); epsilon = 1 (sinkhorn)
          mask = "none" | "causal"; sink = 0.0; normalize = "none" | "sphere"
          sinkhorn_tol = 1e-12; sinkhorn_max_iter = 100000 (sinkhorn attention's inner solve)
  [[layers]]  until = t1, and any of Q, K, V, W (valid on [previous until, until);
          [attention]'s matrices apply after the last until)
  [run]   T = 1.0; dt = 0.01; integrator = "rk4" (euler | rk4 | dopri5); save_every = 0
          blowup = 1e8; tol = 1e-10 (dopri5); rank_tol = 1e-3; cluster_tol = 1e-2;
          checkpoint_every = 0
Outputs: initial.npy, positions.npy (final), trajectory.npy + times.npy (save_every > 0),
         diagnostics.csv, summary.json)";

void write_diagnostics(const std::filesystem::path& path, const std::vector<FrameDiagnostics>& frames, Eigen::Index d) {
  std::ofstream out(path);
  out << "t";
  for (Eigen::Index c = 0; c < d; ++c) out << ",mean_" << c;
  for (Eigen::Index c = 0; c < d; ++c) out << ",eig_" << c;
  out << ",effective_rank,rank,clusters,energy,max_norm\n";
  for (const auto& f : frames) {
    out << fmt::format("{:.17g}", f.t);
    for (double v : f.mean) out << fmt::format(",{:.17g}", v);
    for (double v : f.cov_eigenvalues) out << fmt::format(",{:.17g}", v);
    out << fmt::format(",{:.17g},{},{},{:.17g},{:.17g}\n", f.effective_rank, f.rank, f.cluster_count, f.energy,
                       f.max_norm);
  }
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

template <class T>
void write_results(const OutputDir& out, const SimulationResult<T>& r, const Measure<T>& mu,
                   const Stopwatch& clock, const SimulationConfig& config, const AttentionParams& attention) {
  write_points(out.staged("initial.npy"), mu.points);
  write_points(out.staged("positions.npy"), r.positions);
  if (!r.frames.empty()) {
    const auto n = static_cast<std::size_t>(mu.n()), d = static_cast<std::size_t>(mu.d());
    std::vector<T> traj;
    traj.reserve(r.frames.size() * n * d);
    for (const auto& f : r.frames) traj.insert(traj.end(), f.data(), f.data() + f.size());
    write_npy(out.staged("trajectory.npy"), traj.data(), {r.frames.size(), n, d});
    write_npy(out.staged("times.npy"), r.times.data(), {r.times.size()}, std::is_same_v<T, float>);
  }
  write_diagnostics(out.staged("diagnostics.csv"), r.diagnostics, mu.d());
  const FrameDiagnostics& last = r.diagnostics.back();
  Measure<T> final_measure{r.positions, mu.weights, {}};
  nlohmann::json s;
  s["command"] = "simulate";
  s["status"] = r.status;
  s["t_final"] = r.t_final;
  s["steps"] = r.steps;
  if (config.run.integrator == Integrator::dopri5) s["rejected_steps"] = r.rejected_steps;
  s["n"] = mu.n();
  s["d"] = mu.d();
  s["dtype"] = std::is_same_v<T, float> ? "f32" : "f64";
  s["kind"] = to_string(attention.kind);
  s["heads"] = attention.heads;
  s["integrator"] = to_string(config.run.integrator);
  s["frames"] = r.frames.size();
  s["final"] = {{"mean", to_json(weighted_mean(final_measure))},
                {"cov", to_json(weighted_covariance(final_measure))},
                {"cov_eigenvalues", to_json(last.cov_eigenvalues)},
                {"rank", last.rank},
                {"effective_rank", last.effective_rank},
                {"clusters", last.cluster_count},
                {"max_norm", last.max_norm}};
  if (std::isfinite(last.energy)) s["final"]["energy"] = last.energy;
  if (attention.kind == AttentionKind::softmax) {  // E must not decrease when gradient_flow is true
    const EnergyMonotonicity e = energy_monotonicity(r.diagnostics, attention, mu.n(), std::is_same_v<T, float>);
    s["gradient_flow"] = has_energy_gradient_structure(attention);
    s["energy_monotone"] = e.monotone;
    s["energy_largest_relative_decrease"] = e.largest_relative_decrease;
    s["energy_allowance"] = e.allowance;
  }
  s["wall_seconds"] = clock.seconds();
  write_summary(out, s);
}

template <class T>
void run_typed(const SimulationConfig& config, const Config& source, const Measure<double>& mu64,
               OutputDir& out, const Stopwatch& clock) {
  const AttentionParams attention = read_attention(config, source, static_cast<int>(mu64.d()));
  const Measure<T> mu{mu64.points.cast<T>(), mu64.weights.cast<T>(), mu64.positions.cast<T>()};
  ProgressBar bar("simulate");
  const SimulationResult<T> r = simulate(attention, config.run, mu, [&](const Progress& p) {
    bar.update(p.T > 0 ? p.t / p.T : 1.0, fmt::format("t={:.4g} step {}", p.t, p.steps));
    return true;
  });
  bar.finish();
  write_results(out, r, mu, clock, config, attention);
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto options = std::make_shared<CommonOptions>();
  CLI::App* cmd = app.add_subcommand("simulate", "Particles moving by dx/dt = Gamma_mu(x) (the Transformer PDE)");
  cmd->add_option("--config", options->config_path, "TOML config file")->check(CLI::ExistingFile);
  cmd->add_option("--set", options->sets, "Override a key: --set run.T=2 (repeatable)")->take_all();
  cmd->add_option("--out", options->out, "Output directory")->required();
  cmd->footer(kSimulateKeys);
  cmd->callback([options] {
    Stopwatch clock;
    const Config source = load_config(*options);
    const SimulationConfig config = read_simulation_config(source);
    const Measure<double> mu = make_initial_measure(config, source);
    // Check the attention parameters before anything is written.
    (void)read_attention(config, source, static_cast<int>(mu.d()));
    OutputDir out(options->out);
    if (config.dtype == Dtype::f32) run_typed<float>(config, source, mu, out, clock);
    else run_typed<double>(config, source, mu, out, clock);
    out.commit();
  });
}

}  // namespace tokenflow::cli
