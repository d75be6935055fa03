// tokenflow meanfield: particles against the moment ODE for a list of n (mean-field convergence).
#include <memory>

#include "commands.hpp"
#include "common.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/meanfield.hpp"
#include "tokenflow/readers.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow::cli {

namespace {

// The defaults (read_meanfield_setup) are chosen so that the default run (n up to 65536, 3
// samples, softmax in d = 2) takes a few minutes on 2 cores; --large goes to n = 10^6 through the
// fast summation (attention.summation = "auto" takes it from n = 4096 on).
constexpr const char* kMeanfieldKeys = R"(Simulate's keys are read as follows.
  [init]  mean, cov: the Gaussian N(m0, S0) (kind must be "gaussian"; init.n is not used)
  [attention]  @KINDS@ (kinds with a Gaussian closure)
  [run]   T = 0.1 here (must be below any blow-up time); dt = T (rk4: one step) unless given;
          integrator = "rk4" (particles); tol = 1e-10 (moment ODE, dopri5; dopri5 particles)
Each particle run costs ~ (4 rk4 stages + 2 energy frames) n^2 pair evaluations (softmax; sinkhorn
  multiplies by its iterations): n = 65536 is ~2.6e10 per sample, unless the fast summation takes
  over (softmax and l2 with k <= 3: O(n) per evaluation, docs/fast-summation.md).
Outputs: meanfield.csv (one row per n and sample: errors of the mean and covariance at T and the
  Bures-Wasserstein distance between N(m_T, S_T) and the particles' Gaussian fit, also against the
  ODE started from the sample's own moments), summary.json ("slope": fitted slope of log RMS
  Bures-Wasserstein error against log n, theory -1/2; "slopes" for every column).)";

}  // namespace

void add_meanfield_command(CLI::App& app) {
  auto options = std::make_shared<CommonOptions>();
  CLI::App* cmd = add_config_command(app, "meanfield",
                                      "Particles against the Gaussian moment ODE as n grows (rate n^{-1/2})",
                                      *options, "meanfield.seeds=5");
  auto large = std::make_shared<bool>(false);
  cmd->add_flag("--large", *large,
                "n = 100, 1000, ..., 10^6 (replaces meanfield.ns): four decades, through the fast summation "
                "(attention.summation = \"auto\") from n = 4096 on");
  cmd->footer(keys_help(meanfield_extra_schema(), "Config keys: those of `tokenflow simulate`, plus (all: docs/config.md)") +
              with_closure_kinds(kMeanfieldKeys));
  cmd->callback([options, large] {
    Stopwatch clock;
    const Config source = load_config(*options);
    MeanFieldSetup setup = read_meanfield_setup(source);
    if (*large) setup.spec.ns = {100, 1000, 10000, 100000, 1000000};
    OutputDir out(options->out, {"meanfield", {"meanfield.csv", "summary.json"}, {}});
    const MeanFieldResult r = run_with_progress("meanfield", source, [&](const auto& progress) {
      return meanfield_study(setup.attention, setup.run, setup.initial, setup.spec, progress);
    });
    write_text(out.staged("meanfield.csv"), meanfield_csv(r));
    write_text(out.staged("summary.json"), meanfield_summary_json(r, setup, clock.seconds()) + "\n");
    out.commit();
  });
}

}  // namespace tokenflow::cli
