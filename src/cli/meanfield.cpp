// tokenflow meanfield: particles against the moment ODE for a list of n (mean-field convergence).
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/meanfield.hpp"
#include "tokenflow/readers.hpp"

namespace tokenflow::cli {

namespace {

// Defaults chosen so that the default run (n up to 65536, 3 samples, softmax in d = 2) takes a
// few minutes on 2 cores with the current O(n^2) driver: one rk4 step of 0.1 (4 field
// evaluations; rk4's error ~ dt^5 |J|^5 / 120 ~ 1e-7 is far below the smallest Monte Carlo error,
// ~ 1 / sqrt(65536) ~ 4e-3).
constexpr double kDefaultT = 0.1;

constexpr const char* kMeanfieldKeys = R"(Config keys: those of `tokenflow simulate`, plus
  [meanfield]  ns = [256, 1024, 4096, 16384, 65536]   token counts (each >= 2)
               seeds = 3                               independent samples per n (seed: the base)
  [init]  mean, cov: the Gaussian N(m0, S0) (kind must be "gaussian"; init.n is not used)
  [attention]  softmax | l2 | linear | sinkhorn (kinds with a Gaussian closure)
  [run]   T = 0.1 here (must be below any blow-up time); dt = T (rk4: one step) unless given;
          integrator = "rk4" (particles); tol = 1e-10 (moment ODE, dopri5; dopri5 particles)
Each particle run costs ~ (4 rk4 stages + 2 energy frames) n^2 pair evaluations (softmax; sinkhorn
  multiplies by its iterations): n = 65536 is ~2.6e10 per sample.
Outputs: meanfield.csv (one row per n and sample: errors of the mean and covariance at T and the
  Bures-Wasserstein distance between N(m_T, S_T) and the particles' Gaussian fit, also against the
  ODE started from the sample's own moments), summary.json ("slope": fitted slope of log RMS
  Bures-Wasserstein error against log n, theory -1/2; "slopes" for every column).)";

const std::vector<std::string>& meanfield_extra_keys() {
  static const std::vector<std::string> keys{"meanfield.ns", "meanfield.seeds"};
  return keys;
}

InputError located(const InputError& e, const Config& source) {
  const std::string lookup = e.key().rfind("layers[", 0) == 0 ? "layers" : e.key();
  return e.located(source.source_of(lookup));
}

void write_csv(const std::filesystem::path& path, const MeanFieldResult& r) {
  std::ofstream out(path);
  out << "n,sample,seed,status,mean_error,cov_error,bures_wasserstein,mean_error_from_sample,"
         "cov_error_from_sample,bures_wasserstein_from_sample,seconds\n";
  for (const auto& row : r.rows)
    out << fmt::format("{},{},{},{},{:.17g},{:.17g},{:.17g},{:.17g},{:.17g},{:.17g},{:.6g}\n", row.n, row.sample,
                       row.seed, row.status, row.mean_error, row.cov_error, row.bures_wasserstein,
                       row.mean_error_from_sample, row.cov_error_from_sample, row.bures_wasserstein_from_sample,
                       row.seconds);
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

void add_meanfield_command(CLI::App& app) {
  auto options = std::make_shared<CommonOptions>();
  CLI::App* cmd = app.add_subcommand("meanfield", "Particles against the Gaussian moment ODE as n grows (rate n^{-1/2})");
  cmd->add_option("--config", options->config_path, "TOML config file")->check(CLI::ExistingFile);
  cmd->add_option("--set", options->sets, "Override a key: --set meanfield.seeds=5 (repeatable)")->take_all();
  cmd->add_option("--out", options->out, "Output directory")->required();
  cmd->footer(kMeanfieldKeys);
  cmd->callback([options] {
    Stopwatch clock;
    const Config source = load_config(*options);
    SimulationConfig config = read_simulation_config(source, meanfield_extra_keys());
    if (config.init.kind != "gaussian")
      throw InputError(source.source_of("init.kind"), "init.kind",
                       "tokenflow meanfield samples N(mean, cov): init.kind must be \"gaussian\"");
    if (!source.has("run.T")) config.run.T = kDefaultT;
    if (!source.has("run.dt")) config.run.dt = std::max(config.run.T, 1e-12);
    MeanFieldSpec spec;
    spec.seed = config.seed;
    const std::vector<std::int64_t> ns = source.get_int_list("meanfield.ns", {256, 1024, 4096, 16384, 65536});
    spec.ns.assign(ns.begin(), ns.end());
    spec.seeds = static_cast<int>(source.get_int("meanfield.seeds", 3));
    const GaussianMoments initial{config.init.mean, config.init.cov};
    AttentionParams attention;
    try {
      check_gaussian(initial);
      attention = read_attention(config, source, static_cast<int>(initial.mean.size()));
      check_gaussian_closure(attention);
      if (spec.seeds < 1) throw InputError("", "meanfield.seeds", "must be at least 1");
      for (long n : spec.ns)
        if (n < 2) throw InputError("", "meanfield.ns", "every n must be at least 2 (got " + std::to_string(n) + ")");
      if (spec.ns.empty()) throw InputError("", "meanfield.ns", "must list at least one n");
    } catch (const InputError& e) {
      throw located(e, source);
    }
    OutputDir out(options->out);
    ProgressBar bar("meanfield");
    MeanFieldResult r;
    try {
      r = meanfield_study(attention, config.run, initial, spec, [&](double fraction) {
        bar.update(fraction);
        return true;
      });
    } catch (const InputError& e) {
      throw located(e, source);
    }
    bar.finish();
    write_csv(out.staged("meanfield.csv"), r);
    nlohmann::json s;
    s["command"] = "meanfield";
    bool all_finished = true;
    for (const auto& row : r.rows) all_finished &= row.status == "finished";
    s["status"] = all_finished ? "finished" : "blowup";
    s["kind"] = to_string(attention.kind);
    s["d"] = initial.mean.size();
    s["T"] = config.run.T;
    s["dt"] = config.run.dt;
    s["integrator"] = to_string(config.run.integrator);
    s["ns"] = spec.ns;
    s["seeds"] = spec.seeds;
    s["slope"] = number(r.slopes.bures_wasserstein);
    s["theory_slope"] = -0.5;
    s["slopes"] = {{"mean_error", number(r.slopes.mean_error)},
                   {"cov_error", number(r.slopes.cov_error)},
                   {"bures_wasserstein", number(r.slopes.bures_wasserstein)},
                   {"mean_error_from_sample", number(r.slopes.mean_error_from_sample)},
                   {"cov_error_from_sample", number(r.slopes.cov_error_from_sample)},
                   {"bures_wasserstein_from_sample", number(r.slopes.bures_wasserstein_from_sample)}};
    s["ode_final"] = {{"mean", to_json(r.ode_final.mean)}, {"cov", to_json(r.ode_final.cov)}};
    s["wall_seconds"] = clock.seconds();
    write_summary(out, s);
    out.commit();
  });
}

}  // namespace tokenflow::cli
