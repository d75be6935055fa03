// tokenflow stability: W_2(mu_t, nu_t) / W_2(mu_0, nu_0) for two nearby initial measures.
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/readers.hpp"
#include "tokenflow/stability.hpp"

namespace tokenflow::cli {

namespace {

constexpr long kDefaultN = 512;  // exact W_2 per frame costs ~0.2 s at n = 512, ~1 s at 1000, ~6 s at 2000

constexpr const char* kStabilityKeys = R"(Config keys: those of `tokenflow simulate` (init.n defaults to 512 here), plus
  [stability]  delta = 0.01             size of the perturbation of the initial measure
               perturbation = "noise"   noise: x_i + eta xi_i, xi_i ~ N(0, I), eta such that the
                                        identity coupling costs delta (W_2(mu_0, nu_0) <= delta,
                                        measured); shift: x_i + delta e_1 (W_2 = delta exactly)
               frames = 20              with run.save_every = 0, about this many frames
               exact_max_n = 2000       exact W_2 (network simplex) up to this n; above it, W_2
                                        between the Gaussian fits of the two clouds
  [run]  integrator = "rk4" or "euler" (dopri5 is refused: frames must be at equal times)
Outputs: stability.csv (t, w2, ratio = w2 / W_2(mu_0, nu_0), w2_over_delta), summary.json with
  "method" (exact | gaussian), "w2_initial", "growth_constant" (max ratio) and "growth_rate"
  (max over t > 0 of log(ratio) / t).)";

const std::vector<std::string>& stability_extra_keys() {
  static const std::vector<std::string> keys{"stability.delta", "stability.perturbation", "stability.frames",
                                             "stability.exact_max_n"};
  return keys;
}

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

void add_stability_command(CLI::App& app) {
  auto options = std::make_shared<CommonOptions>();
  CLI::App* cmd = app.add_subcommand("stability", "W_2 stability: two nearby initial measures under the same flow");
  cmd->add_option("--config", options->config_path, "TOML config file")->check(CLI::ExistingFile);
  cmd->add_option("--set", options->sets, "Override a key: --set stability.delta=1e-3 (repeatable)")->take_all();
  cmd->add_option("--out", options->out, "Output directory")->required();
  cmd->footer(kStabilityKeys);
  cmd->callback([options] {
    Stopwatch clock;
    const Config source = load_config(*options);
    SimulationConfig config = read_simulation_config(source, stability_extra_keys());
    if (!source.has("init.n")) config.init.n = kDefaultN;
    if (config.dtype == Dtype::f32)
      throw InputError(source.source_of("dtype"), "dtype", "tokenflow stability runs in float64 (exact W_2); use dtype = \"f64\"");
    StabilitySpec spec;
    spec.delta = source.get_double("stability.delta", spec.delta);
    spec.perturbation = source.get_string("stability.perturbation", spec.perturbation, {"noise", "shift"});
    spec.frames = static_cast<int>(source.get_int("stability.frames", spec.frames));
    spec.exact_max_n = static_cast<long>(source.get_int("stability.exact_max_n", spec.exact_max_n));
    spec.seed = config.seed + 1;  // the noise is independent of the sample
    const Measure<double> mu = make_initial_measure(config, source);
    const AttentionParams attention = read_attention(config, source, static_cast<int>(mu.d()));
    if (!(spec.delta > 0.0 && std::isfinite(spec.delta)))
      throw InputError(source.source_of("stability.delta"), "stability.delta", "must be positive and finite");
    if (spec.frames < 1) throw InputError(source.source_of("stability.frames"), "stability.frames", "must be at least 1");
    if (config.run.integrator == Integrator::dopri5)
      throw InputError(source.source_of("run.integrator"), "run.integrator",
                       "stability compares the two runs at equal times: use rk4 or euler");
    OutputDir out(options->out);
    ProgressBar bar("stability");
    StabilityResult r;
    try {
      r = stability_study(attention, config.run, mu, spec, [&](double fraction) {
        bar.update(fraction);
        return true;
      });
    } catch (const InputError& e) {
      throw e.located(source.source_of(e.key()));
    }
    bar.finish();
    {
      std::ofstream csv(out.staged("stability.csv"));
      csv << "t,w2,ratio,w2_over_delta\n";
      for (const auto& row : r.rows)
        csv << fmt::format("{:.17g},{:.17g},{:.17g},{:.17g}\n", row.t, row.w2, row.ratio, row.w2 / spec.delta);
      if (!csv) throw std::runtime_error("cannot write stability.csv");
    }
    nlohmann::json s;
    s["command"] = "stability";
    s["status"] = r.status_mu == "finished" && r.status_nu == "finished" ? "finished" : "blowup";
    s["method"] = r.method;
    s["n"] = mu.n();
    s["d"] = mu.d();
    s["kind"] = to_string(attention.kind);
    s["integrator"] = to_string(config.run.integrator);
    s["steps"] = r.steps;
    s["delta"] = spec.delta;
    s["perturbation"] = spec.perturbation;
    s["w2_initial"] = r.w2_initial;
    s["frames"] = r.rows.size();
    s["t_final"] = r.rows.empty() ? 0.0 : r.rows.back().t;
    s["growth_constant"] = number(r.growth_constant);
    s["growth_rate"] = number(r.growth_rate);
    s["wall_seconds"] = clock.seconds();
    write_summary(out, s);
    out.commit();
  });
}

}  // namespace tokenflow::cli
