// tokenflow train: a Sinkhorn Transformer trained on a coupling task (docs/design.md section 2).
#include "tokenflow/train.hpp"

#include <fmt/format.h>

#include <memory>
#include <optional>

#include "../distributed/world/world.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow::cli {

namespace {

constexpr const char* kTrainKeys = R"(Config keys (TOML; --set key=value overrides any of them):
  dtype = "f64"                 f64 | f32 (training arithmetic; evaluation is always f64)
  [task]  kind = "matching"     matching | entropic-ot | whitened-ot | sorting
          n = 16; m = n; min_n = n; min_m = m (sizes drawn in [min_n, n] per pair); d = 2
          noise = 0.02; scale_range = [0.5, 2.0]; shift = 1.0     (matching; s, t also entropic-ot)
          p = 1; target_epsilon = 0.1                              (entropic-ot: cost |x - y|^p)
          random_weights = false                                   (entropic-ot, whitened-ot)
  [model] width = 64; layers = 2; heads = 4; k = 32; epsilon = 1.0; sinkhorn_iters = 30
          mlp_ratio = 4; share_encoders = false
  [train] steps = 3000; batch = 32; lr = 1e-3; seed = 0; test_pairs = 128
          weight_decay = 0.0; beta1 = 0.9; beta2 = 0.999; warmup = 0; schedule = "constant" | "cosine"
          grad_clip = 0 (off); eval_every = 0 (20 rows); checkpoint_every = 0 (never)
Outputs: model.bin, metrics.csv (step,loss,test_w1,seconds,test_loss,test_accuracy), summary.json;
         checkpoint.bin every checkpoint_every steps (continue with --resume).)";

struct TrainOptions : CommonOptions {
  bool resume = false;
};

void run_train(const TrainOptions& options) {
  Stopwatch clock;
  const std::filesystem::path checkpoint = std::filesystem::path(options.out) / "checkpoint.bin";
  Config source;
  if (options.resume && options.config_path.empty()) {
    // The run's own configuration, from its checkpoint.
    if (!std::filesystem::exists(checkpoint))
      throw InputError(checkpoint.string(), "--resume", "no checkpoint to resume from");
    source = Config::from_text(read_checkpoint_config(checkpoint), checkpoint.string());
    for (const auto& s : options.sets) source.set(s);
  } else {
    source = load_config(options);
  }
  const TrainConfig config = read_train_config(source);
  if (options.resume && !std::filesystem::exists(checkpoint))
    throw InputError(checkpoint.string(), "--resume", "no checkpoint to resume from");
  // Under MPI every rank trains (data-parallel, the same parameters everywhere); rank 0 alone shows
  // progress and writes checkpoints and outputs.
  const bool root = distributed::is_root();
  std::optional<OutputDir> out;
  if (root) out.emplace(options.out);
  const std::vector<CouplingPair> test_pairs = make_test_pairs(config);
  TrainState state =
      options.resume ? read_checkpoint(checkpoint, config) : initial_state(config, test_pairs);
  const long first_step = state.step;
  std::optional<ProgressBar> bar;
  if (root) bar.emplace("train");
  TrainCallbacks callbacks;
  callbacks.progress = [&](long step, long steps, double loss, double pairs_per_second) {
    if (bar)
      bar->update(
          steps > 0 ? static_cast<double>(step) / static_cast<double>(steps) : 1.0,
          fmt::format("step {}/{} loss {:.4g} {:.0f} pairs/s", step, steps, loss, pairs_per_second));
    return !interrupted();
  };
  if (root)
    callbacks.checkpoint = [&](const TrainState& s) {
      write_checkpoint(out->final_path("checkpoint.bin"), config, s);
    };
  const TrainResult r = train(config, std::move(state), test_pairs, callbacks, distributed::world());
  if (!root) return;
  bar->finish();

  save_model(out->staged("model.bin"), r.model);
  write_text(out->staged("metrics.csv"), metrics_csv(r.state.metrics));
  write_text(out->staged("summary.json"), train_summary_json(config, r, first_step, clock.seconds()) + "\n");
  out->commit();
}

}  // namespace

void resume_training(const std::filesystem::path& dir) {
  stop_only_at_safe_points();
  TrainOptions options;
  options.out = dir.string();
  options.resume = true;
  run_train(options);
}

void add_train_command(CLI::App& app) {
  auto options = std::make_shared<TrainOptions>();
  CLI::App* cmd = app.add_subcommand("train", "Train a Sinkhorn Transformer on a coupling task");
  cmd->add_option("--config", options->config_path, "TOML config file")->check(CLI::ExistingFile);
  cmd->add_option("--set", options->sets, "Override a key: --set train.steps=100 (repeatable)")
      ->take_all();
  cmd->add_option("--out", options->out, kOutHelp)->required();
  cmd->add_flag(
      "--resume", options->resume,
      "Continue from DIR/checkpoint.bin (same configuration; without --config, the checkpoint's)");
  cmd->footer(kTrainKeys);
  cmd->callback([options] {
    stop_only_at_safe_points();
    run_train(*options);
  });
}

}  // namespace tokenflow::cli
