// reproduce collapse: the demo's flagship run (experiments/demo.toml). A Gaussian cloud under
// softmax attention with K = -Q of rank one: the Gaussian closure dS/dt = S A S + S A^T S with
// A = K^T Q = -q q^T shrinks the covariance along q and leaves its orthogonal complement, so the
// cloud collapses onto a line (covariance rank 2 -> 1) while staying Gaussian.
#include "common.hpp"
#include "reproductions.hpp"
#include "run_simulation.hpp"

namespace tokenflow::cli {

namespace {

// Kept identical to experiments/demo.toml (n differs only with --quick).
constexpr const char* kCollapseConfig = R"(# 4096 tokens from a Gaussian under softmax attention with K = -Q of rank one, the
# setting where the theory predicts clustering of the covariance onto a line (rank collapse).
seed = 1
[init]
kind = "gaussian"
n = 4096
mean = [0.0, 0.0]
cov = [[1.0, 0.3], [0.3, 0.6]]
[attention]
kind = "softmax"
Q = [[1.0, 0.5], [0.0, 0.0]]
K = [[-1.0, -0.5], [0.0, 0.0]]
[run]
T = 4.0
dt = 0.05
integrator = "rk4"
save_every = 8
)";

}  // namespace

nlohmann::json reproduce_collapse(const ReproductionContext& ctx) {
  Config config = Config::from_text(kCollapseConfig, "collapse/config.toml");
  if (ctx.quick) config.set("init.n=512");
  // A whole `simulate` directory: `tokenflow simulate --config simulation/config.toml` redoes it.
  const auto dir = ctx.dir / "simulation";
  std::filesystem::create_directory(dir);
  write_text(dir / "config.toml", ctx.quick ? config.to_toml() + "\n" : std::string(kCollapseConfig));
  const auto summary = nlohmann::json::parse(run_simulation(prepare_simulation(config), dir, ctx.label));
  return {{"n", summary["n"]},
          {"T", summary["t_final"]},
          {"final_cov_eigenvalues", summary["final"]["cov_eigenvalues"]},
          {"final_rank", summary["final"]["rank"]},
          {"simulate_status", summary["status"]}};
}

}  // namespace tokenflow::cli
