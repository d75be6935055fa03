// tokenflow gaussian: the moment ODE of the Gaussian closure, docs/design.md sections 1 and 2.
#include <fmt/format.h>

#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "run_gaussian.hpp"
#include "run_status.hpp"
#include "tokenflow/readers.hpp"

namespace tokenflow::cli {

namespace {

constexpr const char* kGaussianKeys = R"(Config keys: those of `tokenflow simulate` (one config serves both), read as follows.
  [init]  mean = [0, 0]; cov = [[1, 0], [0, 1]]  (kind must be "gaussian"; n, seed, dtype are
          particle settings and are ignored: the moment ODE is solved in float64)
  [attention], [[layers]]  as simulate; kinds @KINDS@ (sinkhorn: every
          A_h = scale K_h^T Q_h invertible). The other kinds, mask = "causal", sink > 0 and
          normalize = "sphere" have no Gaussian closure (exit 2).
  [run]   T = 1.0; integrator = "dopri5" (default here; euler | rk4 use the fixed step dt);
          dt = 0.01 (dopri5: first trial step); tol = 1e-10 (dopri5: atol = rtol = tol);
          blowup = 1e8 (status "blowup" when trace S exceeds it; blowup_time is refined to the
          singular time); rank_tol = 1e-3;
          save_every = 0 (0: frames on the uniform grid t = j T / grid_frames, which dopri5 steps
          land on; k > 0: every k-th accepted step); the run stops once converged
Outputs: times.npy (F), means.npy (F x d), covs.npy (F x d x d), summary.json with "status"
  (blowup | converged | horizon; stalled | failed with "reason" and exit code 1), "blowup_time", "t_final", "final" {mean, cov, cov_eigenvalues,
  rank}, "psd" (S is symmetrized, never projected: "left_cone" reports lambda_min(S) below
  -allowance (1 + lambda_max), with a warning on stderr), and, for softmax with W_h V_h = I,
  "predicted_blowup_time" / "predicted_limit" {cov, rank} (clustering when A + A^T <= 0).)";

}  // namespace

void add_gaussian_command(CLI::App& app) {
  auto options = std::make_shared<CommonOptions>();
  CLI::App* cmd = add_config_command(app, "gaussian",
                                      "Moment ODEs of the Gaussian closure: blow-up, clustering, limits",
                                      *options, "run.T=2");
  cmd->footer(keys_help(gaussian_extra_schema(), "Config keys of its own (TOML; --set key=value; all: docs/config.md):") +
              with_closure_kinds(kGaussianKeys));
  cmd->callback([options] {
    const Config source = load_config(*options);
    const GaussianSetup setup = read_gaussian_setup(source);
    OutputDir out(options->out, {"gaussian", {"times.npy", "means.npy", "covs.npy", "summary.json"}, {}});
    ProgressBar bar("gaussian");
    const GaussianRun run = run_gaussian(setup, source, out.staged(""), [&](const Progress& p) {
      bar.update(p.T > 0 ? p.t / p.T : 1.0, fmt::format("t={:.4g} step {}", p.t, p.steps));
      return true;
    });
    bar.finish();
    out.commit();
    throw_unless_result(run.summary, "gaussian", options->out);  // stalled or failed: exit 1
  });
}

}  // namespace tokenflow::cli
