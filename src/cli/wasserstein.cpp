// tokenflow wasserstein: W_p between two point clouds, exact when small, Sinkhorn otherwise
// (docs/design.md section 2); conditional W_p when both clouds have positions.
#include "tokenflow/ot_solve.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "commands.hpp"
#include "common.hpp"
#include "point_cloud_args.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow::cli {

namespace {

constexpr const char* kWassersteinFooter =
    R"(Methods: auto (default: sorted when d = 1, exact when n m <= 2^22, sinkhorn otherwise),
  sorted (1-D quantile functions, exact), exact (network simplex), sinkhorn (entropic, log domain;
  value = <|x - y|^p, pi_eps>^{1/p}, above W_p by at most entropic_bias_bound in W_p^p; default
  epsilon = 1e-2 (E|x - y|^2)^{p/2}). With --pos-x and --pos-y: conditional W_p (docs/design.md section 1).
Outputs: summary.json ("command", "status", "wall_seconds", "method", "value", "p", ...).)";

struct WassersteinArgs {
  std::string x, y, a, b, pos_x, pos_y, method = "auto", out;
  double p = 2.0;
  // The solver's options, the struct Python's tokenflow.wasserstein fills too: the flags write its
  // fields (the method by its name, above), so the defaults are the library's.
  WassersteinOptions options;
};

// The library names its arguments as Python does (max_iter, positions); the CLI as its flags.
InputError as_flag(const InputError& e, const WassersteinArgs& args) {
  if (e.key() == "positions") return InputError(args.pos_y, "--pos-y", e.detail());  // positions that do not match
  std::string key = e.key();
  std::replace(key.begin(), key.end(), '_', '-');
  return InputError(e.source(), "--" + key, e.detail());
}

void run_wasserstein(const WassersteinArgs& args) {
  Stopwatch clock;
  if (!(args.p >= 1.0) || !std::isfinite(args.p))
    throw InputError("", "--p", "must be a finite number >= 1");
  if (args.pos_x.empty() != args.pos_y.empty())
    throw InputError("", args.pos_x.empty() ? "--pos-x" : "--pos-y",
                     "conditional W_p needs both --pos-x and --pos-y");
  WassersteinOptions opt = args.options;
  try {
    opt.method = wasserstein_method_from_string(args.method);
  } catch (const InputError& e) {
    throw InputError("", "--method", e.detail());
  }
  const Measure<double> mu = read_point_cloud(args.x, "--x", args.a, "--a", args.pos_x, "--pos-x");
  const Measure<double> nu = read_point_cloud(args.y, "--y", args.b, "--b", args.pos_y, "--pos-y");
  if (mu.d() != nu.d())
    throw InputError(
        args.x + " and " + args.y, "--x, --y",
        fmt::format("the points of --x have dimension {} and those of --y dimension {}: they cannot be compared",
                    mu.d(), nu.d()));
  OutputDir out(args.out, {"wasserstein", {"summary.json"}, {}});
  ProgressBar bar("wasserstein");
  opt.sinkhorn.progress = sinkhorn_progress(bar, opt.sinkhorn.tol);
  WassersteinSolution r;
  try {
    r = solve_wasserstein(mu, nu, args.p, opt, !args.pos_x.empty());
  } catch (const InputError& e) {
    // Costs out of range name the file of the points.
    if (e.key() == "x" || e.key() == "y")
      throw InputError(e.key() == "x" ? args.x : args.y, "--" + e.key(), e.detail());
    throw as_flag(e, args);
  }
  bar.finish();
  write_text(out.staged("summary.json"), wasserstein_summary_json(r, clock.seconds()) + "\n");
  out.commit();
  if (!r.reason.empty())
    throw std::runtime_error("wasserstein failed: " + r.reason + " (status \"failed\" in " + args.out +
                             "/summary.json)");
  if (const std::string warning = wasserstein_convergence_warning(r); !warning.empty())
    std::cerr << "tokenflow: warning: " << warning << "\n";
}

}  // namespace

void add_wasserstein_command(CLI::App& app) {
  auto args = std::make_shared<WassersteinArgs>();
  const WassersteinOptions defaults;
  CLI::App* cmd = app.add_subcommand(
      "wasserstein", "W_p distance between two point clouds (exact, sorted, or Sinkhorn)");
  cmd->add_option("--x", args->x, "Points of mu, n x d (.npy)")->required();
  cmd->add_option("--y", args->y, "Points of nu, m x d (.npy)")->required();
  cmd->add_option("--a", args->a, "Weights of mu, n (.npy; default uniform)");
  cmd->add_option("--b", args->b, "Weights of nu, m (.npy; default uniform)");
  cmd->add_option("--p", args->p, "The exponent p >= 1 (default 2)");
  cmd->add_option("--method", args->method, "auto (default), exact, sorted (d = 1), sinkhorn");
  cmd->add_option("--epsilon", args->options.sinkhorn.epsilon,
                  "Sinkhorn's epsilon (default: 1e-2 of the cost scale)");
  cmd->add_option("--tol", args->options.sinkhorn.tol,
                  with_default("Sinkhorn's marginal error tolerance", defaults.sinkhorn.tol));
  cmd->add_option("--max-iter", args->options.sinkhorn.max_iter,
                  with_default("Sinkhorn's iterations in total", defaults.sinkhorn.max_iter));
  cmd->add_option("--pos-x", args->pos_x, "Positions of mu's tokens, n (.npy): conditional W_p");
  cmd->add_option("--pos-y", args->pos_y, "Positions of nu's tokens, m (.npy)");
  cmd->add_option("--out", args->out, kOutHelp)->required();
  cmd->footer(kWassersteinFooter);
  cmd->callback([args] { run_wasserstein(*args); });
}

}  // namespace tokenflow::cli
