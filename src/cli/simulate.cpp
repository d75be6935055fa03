// tokenflow simulate: the particle flow of docs/design.md section 2.
#include <memory>

#include "../distributed/world/world.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "run_simulation.hpp"
#include "run_status.hpp"
#include "tokenflow/readers.hpp"

namespace tokenflow::cli {

namespace {

constexpr const char* kSimulateOutputs =
    R"(Outputs: initial.npy, positions.npy (final), trajectory.npy + times.npy (save_every > 0),
         diagnostics.csv, summary.json)";

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto options = std::make_shared<CommonOptions>();
  CLI::App* cmd = add_config_command(app, "simulate",
                                      "Particles moving by dx/dt = Gamma_mu(x) (the Transformer PDE)",
                                      *options, "run.T=2");
  cmd->footer(keys_help(simulation_schema()) + kSimulateOutputs);
  cmd->callback([options] {
    stop_only_at_safe_points();
    // Every key, the initial measure and the attention are checked before anything is written.
    const Config source = load_config(*options);
    const PreparedSimulation simulation = prepare_simulation(source);
    if (!distributed::is_root()) {  // another MPI rank: computes its blocks, rank 0 writes
      CheckpointPlan none;
      none.config_toml = source.to_toml();
      run_simulation(simulation, options->out, "simulate", none);
      return;
    }
    OutputDir out(options->out, simulation_output_plan(simulation.config));
    CheckpointPlan checkpoints;
    if (simulation.config.run.checkpoint_every > 0) {
      checkpoints.path = out.final_path("checkpoint.bin");
      checkpoints.temp_dir = out.scratch();
      checkpoints.config_toml = source.to_toml();
      out.discard_at_commit("checkpoint.bin");  // once the run is complete, nothing is left to resume
    }
    const std::string summary = run_simulation(simulation, out.staged(""), "simulate", checkpoints);
    out.commit();
    print_summary_warnings(summary);
    throw_unless_result(summary, "simulate", options->out);  // stalled or failed: exit 1
  });
}

}  // namespace tokenflow::cli
