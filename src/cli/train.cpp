// tokenflow train: a Sinkhorn Transformer trained on a coupling task (DESIGN.md section 2).
#include "tokenflow/train.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <fstream>
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "tokenflow/error.hpp"

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

void write_metrics(const std::filesystem::path& path, const std::vector<MetricsRow>& rows) {
  std::ofstream out(path);
  out << "step,loss,test_w1,seconds,test_loss,test_accuracy\n";
  for (const MetricsRow& r : rows)
    out << fmt::format(
        "{},{:.17g},{:.17g},{:.6f},{:.17g},{}\n", r.step, r.loss, r.test_w1, r.seconds, r.test_loss,
        std::isnan(r.test_accuracy) ? std::string("") : fmt::format("{:.17g}", r.test_accuracy));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

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
  OutputDir out(options.out);
  const std::vector<CouplingPair> test_pairs = make_test_pairs(config);
  TrainState state =
      options.resume ? read_checkpoint(checkpoint, config) : initial_state(config, test_pairs);
  const long first_step = state.step;
  ProgressBar bar("train");
  TrainCallbacks callbacks;
  callbacks.progress = [&](long step, long steps, double loss, double pairs_per_second) {
    bar.update(
        steps > 0 ? static_cast<double>(step) / static_cast<double>(steps) : 1.0,
        fmt::format("step {}/{} loss {:.4g} {:.0f} pairs/s", step, steps, loss, pairs_per_second));
    return !interrupted();
  };
  callbacks.checkpoint = [&](const TrainState& s) {
    write_checkpoint(out.final_path("checkpoint.bin"), config, s);
  };
  const TrainResult r = train(config, std::move(state), test_pairs, callbacks);
  bar.finish();

  save_model(out.staged("model.bin"), r.model);
  write_metrics(out.staged("metrics.csv"), r.state.metrics);
  const long trained_steps = r.state.step - first_step;
  const double train_seconds = r.state.seconds;
  nlohmann::json s;
  s["command"] = "train";
  s["status"] = "finished";
  s["steps"] = r.state.step;
  s["resumed_from_step"] = first_step;
  s["task"] = config.task.kind;
  s["dtype"] = config.float32 ? "f32" : "f64";
  s["parameters"] = ParameterLayout(config.model).size();
  s["test_pairs"] = config.train.test_pairs;
  s["test_w1"] = number_or_null(r.final.w1);
  s["test_w1_untrained"] = number_or_null(r.state.untrained.w1);
  s["test_w1_independent"] = number_or_null(r.state.independent.w1);
  s["test_loss"] = number_or_null(r.final.loss);
  s["test_loss_untrained"] = number_or_null(r.state.untrained.loss);
  s["test_loss_independent"] = number_or_null(r.state.independent.loss);
  if (task_has_assignment(config.task)) {
    s["test_accuracy"] = number_or_null(r.final.accuracy);
    s["test_accuracy_untrained"] = number_or_null(r.state.untrained.accuracy);
    s["test_accuracy_independent"] = number_or_null(r.state.independent.accuracy);
  }
  s["train_seconds"] = train_seconds;
  s["threads"] = omp_get_max_threads();
  s["pairs_per_second"] = trained_steps > 0 && !r.state.metrics.empty()
                              ? nlohmann::json(static_cast<double>(trained_steps) *
                                               config.train.batch / std::max(1e-9, clock.seconds()))
                              : nlohmann::json(nullptr);
  s["wall_seconds"] = clock.seconds();
  write_summary(out, s);
  out.commit();
}

}  // namespace

void resume_training(const std::filesystem::path& dir) {
  install_interrupt_handler();
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
  cmd->add_option("--out", options->out, "Output directory")->required();
  cmd->add_flag(
      "--resume", options->resume,
      "Continue from DIR/checkpoint.bin (same configuration; without --config, the checkpoint's)");
  cmd->footer(kTrainKeys);
  cmd->callback([options] {
    install_interrupt_handler();
    run_train(*options);
  });
}

}  // namespace tokenflow::cli
