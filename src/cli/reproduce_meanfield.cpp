// reproduce meanfield: the mean-field limit, measured. n tokens sampled from N(m0, S0) move by
// softmax attention; at time T their Gaussian fit is compared with the moment ODE of the Gaussian
// closure (tokenflow/meanfield.hpp), for n doubling from 128 (32 with --quick) and several
// independent samples per n. The theory predicts errors of order n^{-1/2}.
//
// The attention is kept mild (A = scale K^T Q with entries of size ~ 0.1): softmax weights
// exp(x^T A y) over a Gaussian have finite moments of every order only as long as S A stays small,
// and with heavy-tailed weights the sample averages converge more slowly than n^{-1/2} (a first
// try with A ten times larger measured slopes near -0.3 up to n = 4096).
// --random-weights: Q and K drawn with entries N(0, 1/2) (Random, seed kRandomWeightsSeed), the
// scale 1/sqrt(2) of the default: a non-symmetric QK^T, A with 6 times the published one's norm.
// Its closure blows up at t* = 0.89, so T = 0.44 (below); over n = 128 .. 16384 (8 samples each)
// the slope measured -0.42 (docs/fast-summation.md has the --large one). Writes config.toml
// (`tokenflow meanfield --config config.toml` redoes the study), meanfield.csv (meanfield's table)
// and returns meanfield's summary.
#include <fmt/format.h>

#include <cmath>

#include "common.hpp"
#include "reproductions.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/meanfield.hpp"
#include "tokenflow/readers.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow::cli {

nlohmann::json reproduce_meanfield(const ReproductionContext& ctx) {
  // Sizes: the full run takes a few minutes on 2 cores (n up to 16384, 8 samples), the demo's
  // tour about 20 s (n up to 4096, 6 samples), --quick a second.
  // --large: four decades, n = 100 .. 10^6, through the fast summation from n = 4096 on
  // (attention.summation = "auto"); about 10 minutes on 2 cores.
  const std::string ns = ctx.quick   ? "[32, 64, 128, 256]"
                         : ctx.large ? "[100, 1000, 10000, 100000, 1000000]"
                         : ctx.tour  ? "[128, 256, 512, 1024, 2048, 4096]"
                                     : "[128, 256, 512, 1024, 2048, 4096, 8192, 16384]";
  const int seeds = ctx.quick ? 3 : ctx.large ? 4 : ctx.tour ? 6 : 8;
  Eigen::MatrixXd Q(2, 2), K(2, 2);
  Q << 0.5, 0.25, 0.0, 0.5;
  K << 0.25, 0.0, 0.1, -0.25;
  std::string QK = "";
  if (ctx.random_weights) {
    Random rng(kRandomWeightsSeed);
    Q = normal_matrix(rng, 2, 2, std::sqrt(0.5));
    K = normal_matrix(rng, 2, 2, std::sqrt(0.5));
    QK = fmt::format("# --random-weights: entries N(0, 1/2), Random({})\n", kRandomWeightsSeed);
  }
  QK += fmt::format("Q = {}\nK = {}", toml_matrix(Q), toml_matrix(K));
  // T = 1 with dt = 0.1 (ten rk4 steps); where the closure blows up before T = 2 (t* of
  // gaussian.hpp's predicted_blowup_time: V = W = I here), T = t* / 2 rounded down to two digits,
  // still ten steps: the sample moments must stay finite.
  const auto make_toml = [&](double T) {
    return fmt::format(
        R"(# reproduce meanfield: particles against the moment ODE of the Gaussian closure
seed = 0
[init]
kind = "gaussian"
mean = [0.0, 0.0]
cov = [[1.0, 0.3], [0.3, 0.6]]
[attention]
kind = "softmax"
{}
[run]
T = {:.17g}
dt = {:.17g}
integrator = "rk4"
[meanfield]
ns = {}
seeds = {}
)",
        QK, T, T / 10.0, ns, seeds);
  };
  const std::string where = (ctx.dir / "config.toml").string();
  std::string toml = make_toml(1.0);
  MeanFieldSetup setup = read_meanfield_setup(Config::from_text(toml, where));
  if (const auto tstar = predicted_blowup_time(setup.attention, setup.initial.cov);
      tstar && *tstar < 2.0) {
    toml = make_toml(std::floor(*tstar * 50.0) / 100.0);
    setup = read_meanfield_setup(Config::from_text(toml, where));
  }
  write_text(ctx.dir / "config.toml", toml);
  Stopwatch clock;
  ProgressBar bar(ctx.label);
  const MeanFieldResult r =
      meanfield_study(setup.attention, setup.run, setup.initial, setup.spec, [&](double fraction) {
        bar.update(fraction);
        return !interrupted();
      });
  bar.finish();
  write_text(ctx.dir / "meanfield.csv", meanfield_csv(r));
  nlohmann::json summary = nlohmann::json::parse(meanfield_summary_json(r, setup, clock.seconds()));
  nlohmann::json numbers;
  for (const char* key :
       {"kind", "d", "T", "dt", "ns", "seeds", "slope", "theory_slope", "slopes", "ode_final"})
    numbers[key] = summary[key];
  numbers["Q"] = to_json(Q);
  numbers["K"] = to_json(K);
  numbers["meanfield_status"] = summary["status"];
  return numbers;
}

}  // namespace tokenflow::cli
