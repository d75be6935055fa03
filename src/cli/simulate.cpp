// tokenflow simulate: the particle flow of DESIGN.md section 2.
#include <fmt/format.h>

#include <fstream>
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "tokenflow/checkpoint.hpp"
#include "tokenflow/dynamics.hpp"
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
  s["wall_seconds"] = clock.seconds();
  write_summary(out, s);
}

template <class T>
void run_typed(const SimulationConfig& config, const Config& source, const Measure<T>& mu, OutputDir& out,
               const Stopwatch& clock, const SimulationState<T>* resume_from) {
  const AttentionParams attention = read_attention(config, source, static_cast<int>(mu.d()));
  // Checkpoints go straight into DIR (atomically), so that they survive a kill before commit.
  const auto checkpoint_path = out.final_path("checkpoint.bin");
  const std::string config_toml = source.to_toml();
  CheckpointCallback<T> checkpoint;
  if (config.run.checkpoint_every > 0)
    checkpoint = [&](const SimulationState<T>& state) {
      write_checkpoint_file(checkpoint_path, CheckpointKind::simulate,
                            simulation_checkpoint_payload(config_toml, mu, state));
    };
  ProgressBar bar(resume_from ? "resume" : "simulate");
  const SimulationResult<T> r = simulate(
      attention, config.run, mu,
      [&](const Progress& p) {
        bar.update(p.T > 0 ? p.t / p.T : 1.0, fmt::format("t={:.4g} step {}", p.t, p.steps));
        return true;
      },
      checkpoint, resume_from);
  bar.finish();
  write_results(out, r, mu, clock, config, attention);
  out.commit();
  std::error_code ec;
  std::filesystem::remove(checkpoint_path, ec);  // the run is complete: nothing left to resume
}

template <class T>
void resume_typed(const std::string& payload, const std::string& file, const SimulationConfig& config,
                  const Config& source, OutputDir& out, const Stopwatch& clock) {
  Measure<T> mu;
  SimulationState<T> state;
  read_simulation_checkpoint(payload, file, mu, state);
  run_typed<T>(config, source, mu, out, clock, &state);
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
    if (config.dtype == Dtype::f32) {
      const Measure<float> mu32{mu.points.cast<float>(), mu.weights.cast<float>(), mu.positions.cast<float>()};
      run_typed<float>(config, source, mu32, out, clock, nullptr);
    } else {
      run_typed<double>(config, source, mu, out, clock, nullptr);
    }
  });
}

void resume_simulation(const std::filesystem::path& dir) {
  Stopwatch clock;
  const auto path = dir / "checkpoint.bin";
  const std::string payload = read_checkpoint_file(path, CheckpointKind::simulate);
  const SimulationCheckpointHeader header = read_simulation_checkpoint_header(payload, path.string());
  const Config source = Config::from_text(header.config_toml, path.string());
  const SimulationConfig config = read_simulation_config(source);
  OutputDir out(dir);
  if (header.float32) resume_typed<float>(payload, path.string(), config, source, out, clock);
  else resume_typed<double>(payload, path.string(), config, source, out, clock);
}

}  // namespace tokenflow::cli
