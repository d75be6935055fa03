#include "run_simulation.hpp"

#include "commands.hpp"

#include <fmt/format.h>

#include <fstream>
#include <optional>

#include "../distributed/world/world.hpp"
#include "common.hpp"
#include "run_status.hpp"
#include "tokenflow/checkpoint.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/readers.hpp"
#include "tokenflow/simulation_checkpoint.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow::cli {

namespace {

template <class T>
std::string run_typed(const SimulationConfig& config, const AttentionParams& attention, const Measure<double>& mu64,
                      const std::filesystem::path& dir, const std::string& label, const Stopwatch& clock,
                      const CheckpointPlan& plan) {
  Measure<T> mu{mu64.points.cast<T>(), mu64.weights.cast<T>(), mu64.positions.cast<T>()};
  SimulationState<T> resume_state;
  if (!plan.resume_payload.empty()) read_simulation_checkpoint(plan.resume_payload, plan.resume_file, mu, resume_state);
  // Under MPI every rank runs the flow (each computes its block of every velocity) and holds the
  // same result; rank 0 alone shows progress and writes checkpoints and outputs.
  const bool root = distributed::is_root();
  CheckpointCallback<T> checkpoint;
  if (!plan.path.empty() && config.run.checkpoint_every > 0 && root)
    checkpoint = [&](const SimulationState<T>& state) {
      write_checkpoint_file(plan.path, CheckpointKind::simulate, simulation_checkpoint_payload(plan.config_toml, mu, state),
                            plan.temp_dir);
    };
  std::optional<ProgressBar> bar;
  if (root) bar.emplace(label);
  const SimulationResult<T> r = simulate(
      attention, config.run, mu,
      [&](const Progress& p) {
        if (bar) bar->update(p.T > 0 ? p.t / p.T : 1.0, fmt::format("t={:.4g} step {}", p.t, p.steps));
        return !interrupted();
      },
      checkpoint, plan.resume_payload.empty() ? nullptr : &resume_state, distributed::world());
  if (!root) return {};
  bar->finish();

  write_points(dir / "initial.npy", mu.points);
  write_points(dir / "positions.npy", r.positions);
  if (!r.frames.empty()) {
    const auto n = static_cast<std::size_t>(mu.n()), d = static_cast<std::size_t>(mu.d());
    std::vector<T> trajectory;
    trajectory.reserve(r.frames.size() * n * d);
    for (const auto& f : r.frames) trajectory.insert(trajectory.end(), f.data(), f.data() + f.size());
    write_npy(dir / "trajectory.npy", trajectory.data(), {r.frames.size(), n, d});
    write_npy(dir / "times.npy", r.times.data(), {r.times.size()}, std::is_same_v<T, float>);
  }
  write_text(dir / "diagnostics.csv", diagnostics_csv(diagnostics_table(r.diagnostics, mu.d())));
  std::string summary = simulation_summary_json(r, mu, config, attention, clock.seconds());
  write_text(dir / "summary.json", summary + "\n");
  return summary;
}

}  // namespace

PreparedSimulation prepare_simulation(const Config& source) {
  PreparedSimulation s;
  s.config = read_simulation_config(source);
  s.initial = make_initial_measure(s.config, source);
  s.attention = read_attention(s.config, source, static_cast<int>(s.initial.d()));
  return s;
}

OutputPlan simulation_output_plan(const SimulationConfig& config) {
  OutputPlan plan;
  plan.command = "simulate";
  plan.outputs = {"initial.npy", "positions.npy", "diagnostics.csv", "summary.json"};
  if (config.run.save_every > 0) plan.outputs.insert(plan.outputs.end(), {"trajectory.npy", "times.npy"});
  if (config.run.checkpoint_every > 0) plan.in_place = {"checkpoint.bin"};
  return plan;
}

std::string run_simulation(const PreparedSimulation& s, const std::filesystem::path& dir, const std::string& label,
                           const CheckpointPlan& plan) {
  Stopwatch clock;
  if (s.config.dtype == Dtype::f32) return run_typed<float>(s.config, s.attention, s.initial, dir, label, clock, plan);
  return run_typed<double>(s.config, s.attention, s.initial, dir, label, clock, plan);
}

void resume_simulation(const std::filesystem::path& dir, std::optional<DirLock> lock) {
  stop_only_at_safe_points();
  CheckpointPlan plan;
  plan.path = dir / "checkpoint.bin";
  plan.resume_file = plan.path.string();
  plan.resume_payload = read_checkpoint_file(plan.path, CheckpointKind::simulate);
  const SimulationCheckpointHeader header = read_simulation_checkpoint_header(plan.resume_payload, plan.resume_file);
  plan.config_toml = header.config_toml;
  // The config and the initial measure come from the checkpoint (input files are not read again).
  const Config source = Config::from_text(header.config_toml, plan.resume_file);
  PreparedSimulation s;
  s.config = read_simulation_config(source);
  Measure<double> initial;
  SimulationState<double> unused;
  if (header.float32) {
    Measure<float> mu;
    SimulationState<float> state;
    read_simulation_checkpoint(plan.resume_payload, plan.resume_file, mu, state);
    check_simulation_checkpoint_state(state, s.config.run, plan.resume_file);
    initial = Measure<double>{mu.points.cast<double>(), mu.weights.cast<double>(), mu.positions.cast<double>()};
  } else {
    read_simulation_checkpoint(plan.resume_payload, plan.resume_file, initial, unused);
    check_simulation_checkpoint_state(unused, s.config.run, plan.resume_file);
  }
  s.attention = read_attention(s.config, source, static_cast<int>(initial.d()));
  s.initial = std::move(initial);
  if (!distributed::is_root()) {  // the other MPI ranks compute, rank 0 writes
    run_simulation(s, dir, "resume", plan);
    return;
  }
  OutputPlan outputs = simulation_output_plan(s.config);
  outputs.in_place = {"checkpoint.bin"};  // read to continue, replaced as the run goes on
  outputs.resumes = true;
  OutputDir out = lock ? OutputDir(std::move(*lock), outputs) : OutputDir(dir, outputs);
  out.final_path("checkpoint.bin");
  plan.temp_dir = out.scratch();
  const std::string summary = run_simulation(s, out.staged(""), "resume", plan);
  out.discard_at_commit("checkpoint.bin");  // the run is complete: nothing left to resume
  out.commit();
  print_summary_warnings(summary);
  throw_unless_result(summary, "resume", dir.string());  // stalled or failed: exit 1
}

std::string sphere_particle_config(const std::string& comment, double beta, double T, double tol,
                                   int save_every, const std::string& normalize,
                                   std::optional<double> mix_until) {
  const std::string mix =
      mix_until ? fmt::format("mix_until = {:.17g}\n", *mix_until) : std::string();
  return fmt::format(R"(# {comment}
[init]
kind = "file"
path = "x0.npy"
[attention]
kind = "softmax"
scale = {beta:.17g}
normalize = "{normalize}"
{mix}summation = "dense"
[run]
T = {T:.17g}
dt = 0.01
integrator = "dopri5"
tol = {tol:g}
save_every = {save_every}
)",
                     fmt::arg("comment", comment), fmt::arg("beta", beta), fmt::arg("T", T),
                     fmt::arg("tol", tol), fmt::arg("save_every", save_every),
                     fmt::arg("normalize", normalize), fmt::arg("mix", mix));
}

}  // namespace tokenflow::cli
