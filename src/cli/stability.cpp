// tokenflow stability: W_2(mu_t, nu_t) / W_2(mu_0, nu_0) for two nearby initial measures.
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "run_status.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/readers.hpp"
#include "tokenflow/stability.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow::cli {

namespace {

constexpr const char* kStabilityKeys = R"(Simulate's keys: init.n defaults to 512 here;
  [run]  integrator = "rk4" or "euler" (dopri5 is refused: frames must be at equal times)
Outputs: stability.csv (t, w2, ratio = w2 / W_2(mu_0, nu_0), w2_over_delta), summary.json with
  "method" (exact | gaussian), "w2_initial", "growth_constant" (max ratio) and "growth_rate"
  (max over t > 0 of log(ratio) / t).)";

}  // namespace

void add_stability_command(CLI::App& app) {
  auto options = std::make_shared<CommonOptions>();
  CLI::App* cmd = add_config_command(app, "stability",
                                      "W_2 stability: two nearby initial measures under the same flow",
                                      *options, "stability.delta=1e-3");
  cmd->footer(keys_help(stability_extra_schema(), "Config keys: those of `tokenflow simulate`, plus (all: docs/config.md)") +
              kStabilityKeys);
  cmd->callback([options] {
    Stopwatch clock;
    const Config source = load_config(*options);
    const StabilitySetup setup = read_stability_setup(source);
    OutputDir out(options->out, {"stability", {"stability.csv", "summary.json"}, {}});
    const StabilityResult r = run_with_progress("stability", source, [&](const auto& progress) {
      return stability_study(setup.attention, setup.run, setup.initial, setup.spec, progress);
    });
    write_text(out.staged("stability.csv"), stability_csv(r, setup.spec));
    const std::string summary = stability_summary_json(r, setup, clock.seconds());
    write_text(out.staged("summary.json"), summary + "\n");
    out.commit();
    throw_unless_result(summary, "stability", options->out);
  });
}

}  // namespace tokenflow::cli
