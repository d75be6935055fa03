// tokenflow gaussian: the moment ODE of the Gaussian closure, DESIGN.md sections 1 and 2.
#include <fmt/format.h>

#include <Eigen/Eigenvalues>
#include <cmath>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/readers.hpp"

namespace tokenflow::cli {

namespace {

constexpr const char* kGaussianKeys = R"(Config keys: those of `tokenflow simulate` (one config serves both), read as follows.
  [init]  mean = [0, 0]; cov = [[1, 0], [0, 1]]  (kind must be "gaussian"; n, seed, dtype are
          particle settings and are ignored: the moment ODE is solved in float64)
  [attention], [[layers]]  as simulate; kinds softmax | l2 | linear | sinkhorn (sinkhorn: every
          A_h = scale K_h^T Q_h invertible). sigmoid, mask = "causal", sink > 0 and
          normalize = "sphere" have no Gaussian closure (exit 2).
  [run]   T = 1.0; integrator = "dopri5" (default here; euler | rk4 use the fixed step dt);
          dt = 0.01 (dopri5: first trial step); tol = 1e-10 (dopri5: atol = rtol = tol);
          blowup = 1e8 (status "blowup" when trace S exceeds it; blowup_time is refined to the
          singular time); rank_tol = 1e-3;
          save_every = 0 (0: frames on the uniform grid t = j T / grid_frames, which dopri5 steps
          land on; k > 0: every k-th accepted step); grid_frames = 100;
          converge_tol = 1e-9 (status "converged" once |dm/dt| <= converge_tol (1 + |m|) and
          |dS/dt|_F <= converge_tol (1 + |S|_F) in the last layer; the run stops there)
Outputs: times.npy (F), means.npy (F x d), covs.npy (F x d x d), summary.json with "status"
  (blowup | converged | horizon), "blowup_time", "t_final", "final" {mean, cov, cov_eigenvalues,
  rank}, "psd" (S is symmetrized, never projected: "left_cone" reports lambda_min(S) below
  -allowance (1 + lambda_max), with a warning on stderr), and, for softmax with W_h V_h = I,
  "predicted_blowup_time" / "predicted_limit" {cov, rank} (clustering when A + A^T <= 0).)";

const std::vector<std::string>& gaussian_extra_keys() {
  static const std::vector<std::string> keys{"run.converge_tol", "run.grid_frames"};
  return keys;
}

// An InputError from the library, located in the file (or --set) that gave its key.
InputError located(const InputError& e, const Config& source) {
  const std::string& key = e.key();
  const std::string lookup = key.rfind("layers[", 0) == 0 ? "layers" : key;
  return e.located(source.source_of(lookup));
}

struct GaussianSetup {
  AttentionParams attention;
  GaussianRunSpec spec;
  GaussianMoments initial;
};

GaussianSetup read_setup(const Config& source) {
  const SimulationConfig config = read_simulation_config(source, gaussian_extra_keys());
  if (config.init.kind != "gaussian")
    throw InputError(source.source_of("init.kind"), "init.kind",
                     "tokenflow gaussian starts from N(mean, cov): init.kind must be \"gaussian\" (got \"" +
                         config.init.kind + "\")");
  GaussianSetup s;
  s.initial = {config.init.mean, config.init.cov};
  s.spec.run = config.run;
  if (!source.has("run.integrator")) s.spec.run.integrator = Integrator::dopri5;
  s.spec.converge_tol = source.get_double("run.converge_tol", s.spec.converge_tol);
  s.spec.grid_frames = static_cast<int>(source.get_int("run.grid_frames", s.spec.grid_frames));
  try {
    check_gaussian(s.initial);
    s.attention = read_attention(config, source, static_cast<int>(s.initial.mean.size()));
    check_gaussian_closure(s.attention);
    if (!(s.spec.converge_tol > 0.0)) throw InputError("", "run.converge_tol", "must be positive");
    if (s.spec.grid_frames < 1) throw InputError("", "run.grid_frames", "must be at least 1");
  } catch (const InputError& e) {
    throw located(e, source);
  }
  return s;
}

void write_frames(const OutputDir& out, const GaussianResult& r, std::size_t d) {
  const std::size_t F = r.times.size();
  std::vector<double> means, covs;
  means.reserve(F * d);
  covs.reserve(F * d * d);
  for (std::size_t f = 0; f < F; ++f) {
    for (std::size_t i = 0; i < d; ++i) means.push_back(r.means[f][static_cast<Eigen::Index>(i)]);
    for (std::size_t i = 0; i < d; ++i)  // row-major (C order)
      for (std::size_t j = 0; j < d; ++j)
        covs.push_back(r.covs[f](static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)));
  }
  write_npy(out.staged("times.npy"), r.times.data(), {F});
  write_npy(out.staged("means.npy"), means.data(), {F, d});
  write_npy(out.staged("covs.npy"), covs.data(), {F, d, d});
}

}  // namespace

void add_gaussian_command(CLI::App& app) {
  auto options = std::make_shared<CommonOptions>();
  CLI::App* cmd = app.add_subcommand("gaussian", "Moment ODEs of the Gaussian closure: blow-up, clustering, limits");
  cmd->add_option("--config", options->config_path, "TOML config file")->check(CLI::ExistingFile);
  cmd->add_option("--set", options->sets, "Override a key: --set run.T=2 (repeatable)")->take_all();
  cmd->add_option("--out", options->out, "Output directory")->required();
  cmd->footer(kGaussianKeys);
  cmd->callback([options] {
    Stopwatch clock;
    const Config source = load_config(*options);
    const GaussianSetup setup = read_setup(source);
    OutputDir out(options->out);
    ProgressBar bar("gaussian");
    GaussianResult r;
    try {
      r = solve_moments(setup.attention, setup.spec, setup.initial, [&](const Progress& p) {
        bar.update(p.T > 0 ? p.t / p.T : 1.0, fmt::format("t={:.4g} step {}", p.t, p.steps));
        return true;
      });
    } catch (const InputError& e) {
      throw located(e, source);
    }
    bar.finish();
    const auto d = static_cast<std::size_t>(setup.initial.mean.size());
    write_frames(out, r, d);

    const Eigen::MatrixXd& S = r.final.cov;
    nlohmann::json s;
    s["command"] = "gaussian";
    s["status"] = r.status;
    s["blowup_time"] = r.blowup_time ? nlohmann::json(*r.blowup_time) : nlohmann::json(nullptr);
    s["t_final"] = r.t_final;
    s["steps"] = r.steps;
    if (setup.spec.run.integrator == Integrator::dopri5) s["rejected_steps"] = r.rejected_steps;
    s["d"] = d;
    s["kind"] = to_string(setup.attention.kind);
    s["heads"] = setup.attention.heads;
    s["integrator"] = to_string(setup.spec.run.integrator);
    s["frames"] = r.times.size();
    Eigen::VectorXd eigenvalues = Eigen::VectorXd::Constant(static_cast<Eigen::Index>(d), std::nan(""));
    int rank = -1;
    if (S.allFinite()) {
      eigenvalues = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(S, Eigen::EigenvaluesOnly).eigenvalues();
      rank = covariance_rank(S, setup.spec.run.rank_tol);
    }
    s["final"] = {{"mean", to_json(r.final.mean)},
                  {"cov", to_json(S)},
                  {"cov_eigenvalues", to_json(eigenvalues)},
                  {"rank", rank >= 0 ? nlohmann::json(rank) : nlohmann::json(nullptr)},
                  {"trace", S.trace()}};
    s["psd"] = {{"worst_relative_eigenvalue", r.psd_worst_relative_eigenvalue},
                {"allowance", r.psd_allowance},
                {"left_cone", r.left_psd_cone}};
    nlohmann::json warnings = nlohmann::json::array();
    if (r.left_psd_cone) {
      const std::string w = fmt::format(
          "the covariance left the positive semidefinite cone at t = {:.6g} (lambda_min / (1 + lambda_max) "
          "reached {:.3g}, allowance {:.3g}); the integration is not trustworthy there: lower run.tol or run.dt",
          r.left_psd_cone_time, r.psd_worst_relative_eigenvalue, r.psd_allowance);
      s["psd"]["left_cone_time"] = r.left_psd_cone_time;
      warnings.push_back(w);
      std::cerr << "tokenflow: warning: " << w << "\n";
    }
    s["warnings"] = warnings;
    if (const auto tstar = predicted_blowup_time(setup.attention, setup.initial.cov)) s["predicted_blowup_time"] = *tstar;
    if (const auto limit = predicted_clustering_limit(setup.attention, setup.initial.cov, setup.spec.run.rank_tol)) {
      s["predicted_limit"] = {{"cov", to_json(limit->cov)},
                              {"rank", limit->rank},
                              {"distance_frobenius", (S - limit->cov).norm()}};
    }
    s["wall_seconds"] = clock.seconds();
    write_summary(out, s);
    out.commit();
  });
}

}  // namespace tokenflow::cli
