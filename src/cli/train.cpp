// tokenflow train: a Sinkhorn Transformer trained on a coupling task (docs/design.md section 2).
#include "tokenflow/dataset.hpp"
#include "tokenflow/model_file.hpp"
#include "tokenflow/train.hpp"
#include "tokenflow/train_checkpoint.hpp"
#include "tokenflow/train_config.hpp"

#include <fmt/format.h>

#include <functional>
#include <memory>
#include <optional>

#include "../distributed/world/world.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "run_status.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow::cli {

namespace {

constexpr const char* kTrainOutputs =
    R"(Outputs: model.bin (the last state), best_model.bin (the lowest test loss), metrics.csv
         (step,loss,test_w1,seconds,test_loss,test_accuracy), summary.json; checkpoint.bin every
         checkpoint_every steps (continue with --resume).)";

struct TrainOptions : CommonOptions {
  bool resume = false;
};

void run_train(const TrainOptions& options, std::optional<DirLock> lock = std::nullopt) {
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
  // A dataset's pairs are read (and checked) before the output folder is touched.
  const CouplingDataset data = training_data(config, source.source_of("task.path"));
  const std::vector<CouplingPair>& test_pairs = data.test;
  if (root)
    for (const std::string& note : data.notes) fmt::print(stderr, "train: {}\n", note);
  if (root) {
    const OutputPlan plan{
        "train", {"model.bin", "best_model.bin", "metrics.csv", "summary.json"}, {"checkpoint.bin"}, options.resume};
    if (lock)
      out.emplace(std::move(*lock), plan);
    else
      out.emplace(options.out, plan);
  }
  // The data's files and hashes: a checkpoint resumes only with the data it was trained on.
  std::vector<DataFile> data_files = dataset_fingerprint(config.task);
  // Ctrl-C stops a long evaluation or step within a pair's time (the library polls this). Under MPI
  // the ranks stop together at a step's end (progress), never one of them alone mid-computation.
  const bool alone = distributed::world() == nullptr || distributed::world()->size() <= 1;
  const std::function<bool()> keep_going =
      alone ? std::function<bool()>([] { return !interrupted(); }) : std::function<bool()>();
  TrainState state = options.resume ? read_checkpoint(checkpoint, config)
                                    : initial_state(config, test_pairs, keep_going);
  if (options.resume) check_same_data(state.data_files, data_files, checkpoint.string());
  state.data_files = std::move(data_files);  // one copy: a dataset of 10^5 files has 10^5 records
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
  callbacks.keep_going = keep_going;
  if (root)
    callbacks.warning = [&](const std::string& line) {  // as it happens, above the progress bar
      if (bar) bar->finish();
      fmt::print(stderr, "tokenflow: warning: {}\n", line);
    };
  if (root)
    callbacks.checkpoint = [&](const TrainState& s) {
      write_checkpoint(out->final_path("checkpoint.bin"), config, s, out->scratch());
    };
  TrainResult r = train(config, std::move(state), test_pairs, callbacks, distributed::world(), data.train_source.get());
  r.model.config_toml = to_toml(config);  // model.bin keeps the whole run's configuration
  if (!root) return;
  bar->finish();

  save_model(out->staged("model.bin"), r.model);
  r.best_model.config_toml = r.model.config_toml;
  save_model(out->staged("best_model.bin"), r.best_model);
  write_text(out->staged("metrics.csv"), metrics_csv(r.state.metrics, config.task.kind == "texts"));
  const std::string summary = train_summary_json(config, r, first_step, clock.seconds(), data.notes);
  write_text(out->staged("summary.json"), summary + "\n");
  out->commit();
  throw_unless_result(summary, "train", options.out);  // status "failed": exit 1, the outputs kept
}

}  // namespace

void resume_training(const std::filesystem::path& dir, std::optional<DirLock> lock) {
  stop_only_at_safe_points();
  TrainOptions options;
  options.out = dir.string();
  options.resume = true;
  run_train(options, std::move(lock));
}

void add_train_command(CLI::App& app) {
  auto options = std::make_shared<TrainOptions>();
  CLI::App* cmd = add_config_command(app, "train",
                                      "Train a Sinkhorn Transformer on a coupling task",
                                      *options, "train.steps=100");
  cmd->add_flag(
      "--resume", options->resume,
      "Continue from DIR/checkpoint.bin (same configuration; without --config, the checkpoint's)");
  cmd->footer(keys_help(train_command_keys()) + kTrainOutputs);
  cmd->callback([options] {
    stop_only_at_safe_points();
    run_train(*options);
  });
}

}  // namespace tokenflow::cli
