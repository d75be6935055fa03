// tokenflow resume --out DIR: continue a killed run from DIR/checkpoint.bin.
#include <memory>

#include "commands.hpp"
#include "tokenflow/checkpoint.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"

#include "run_simulation.hpp"

namespace tokenflow::cli {

void resume_training(const std::filesystem::path& dir);  // train.cpp

namespace {
// Training checkpoints (train.hpp) start with their own magic "TFCKPT01".
bool is_training_checkpoint(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return false;  // checkpoint_kind says "no checkpoint here"
  // Through read_input_prefix: a fifo or a device in the checkpoint's place is refused, not opened.
  return read_input_prefix(path, "checkpoint", 8) == "TFCKPT01";
}
}  // namespace

void add_resume_command(CLI::App& app) {
  auto out = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "resume", "Continue a run from its last checkpoint (written with run.checkpoint_every = k)");
  cmd->add_option("--out", *out, "The killed run's output directory")->required();
  cmd->footer(
      "Finishes with exactly the outputs an uninterrupted run writes (same final positions, bit for bit,\n"
      "on the same machine and thread count). A corrupt or foreign checkpoint is refused (exit 2).");
  cmd->callback([out] {
    const std::filesystem::path dir(*out);
    if (is_training_checkpoint(dir / "checkpoint.bin")) return resume_training(dir);
    switch (checkpoint_kind(dir / "checkpoint.bin")) {
      case CheckpointKind::simulate:
        resume_simulation(dir);
        break;
      case CheckpointKind::train:  // reserved for training checkpoints in this format
        resume_training(dir);
        break;
    }
  });
}

}  // namespace tokenflow::cli
