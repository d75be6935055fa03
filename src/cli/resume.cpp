// tokenflow resume --out DIR: continue a killed run from DIR/checkpoint.bin.
#include <memory>

#include "../distributed/world/world.hpp"
#include "commands.hpp"
#include "tokenflow/checkpoint.hpp"
#include "tokenflow/error.hpp"

namespace tokenflow::cli {

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
    // DIR is locked before its checkpoint is read: a run still writing into DIR is refused here,
    // naming its pid (rank 0 alone writes under MPI, and alone takes the lock).
    std::optional<DirLock> lock;
    if (distributed::is_root()) lock.emplace(dir);
    switch (checkpoint_kind(dir / "checkpoint.bin")) {
      case CheckpointKind::simulate:
        resume_simulation(dir, std::move(lock));
        break;
      case CheckpointKind::train:
        resume_training(dir, std::move(lock));
        break;
    }
  });
}

}  // namespace tokenflow::cli
