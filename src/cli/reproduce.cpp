// tokenflow reproduce NAME --out DIR: recompute one published result (data + figure).
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <optional>

#include "commands.hpp"
#include "common.hpp"
#include "figures.hpp"
#include "reproductions.hpp"
#include "tokenflow/config.hpp"
#include "tokenflow/error.hpp"

namespace tokenflow::cli {

const std::vector<Reproduction>& reproductions() {
  // One line per reproduction. Hooks (run = nullptr) become available by writing
  // reproduce_<name>.cpp, declaring it in reproductions.hpp and putting it here.
  static const std::vector<Reproduction> all{
      {"sphere",
       "Clustering on the sphere: snapshots (n = 64, d = 3, beta = 1) and clustered pairs against "
       "beta",
       reproduce_sphere, ""},
      {"clustering",
       "Clustering at large n: 10^5 tokens on the circle (beta = 9) through the fast summation",
       reproduce_clustering, ""},
      {"normalizations",
       "Softmax (row-stochastic) against Sinkhorn (doubly stochastic) attention on the same tokens",
       reproduce_normalizations, ""},
      {"collapse",
       "Rank collapse: a Gaussian cloud under softmax attention with K = -Q of rank one",
       reproduce_collapse, ""},
      {"cone",
       "2 x 2 covariance trajectories in the PSD cone for softmax, l2, multi-head and Sinkhorn",
       reproduce_cone, ""},
      {"ranks", "Histograms of the limiting covariance rank for d = 3, 4, 5", reproduce_ranks, ""},
      {"blowup", "Softmax blows up at the closed-form time, l2 stays finite", reproduce_blowup, ""},
      {"meanfield", "Mean-field limit: the n^{-1/2} rate of particles to the Gaussian closure",
       reproduce_meanfield, ""},
      {"universal-approximation",
       "Sinkhorn Transformers of growing capacity approximate a coupling system: test W_1 against "
       "parameters",
       reproduce_universal_approximation, ""},
      {"energy-dissipation",
       "Softmax attention with A symmetric, V = A is a gradient flow: E(t) - E(0) = int |dE|^2, "
       "and not with V = R A",
       reproduce_energy_dissipation, ""},
      {"nonconvexity",
       "The energy of V = I, A = -I along Wasserstein geodesics: not convex through the origin",
       reproduce_nonconvexity, ""},
      {"sinkhorn-bures",
       "The Sinkhorn Gaussian closure is the Bures-Wasserstein gradient flow of c/2 OT_eps(mu, mu)",
       reproduce_sinkhorn_bures, ""},
      {"equiangular",
       "Equiangular tokens stay equiangular: simulate against the scalar ODE of rho(t), 1 - rho ~ "
       "e^{-2t}",
       reproduce_equiangular, ""},
      {"long-context",
       "beta = gamma log n: the clustering time stays ~bounded below gamma_c = 1/(1 - rho0), grows "
       "like a power of n above",
       reproduce_long_context, ""},
      {"metastability",
       "Large beta on the circle: the energy climbs a staircase of plateaus; escape times grow "
       "like e^{beta (1 - cos delta)}",
       reproduce_metastability, ""},
      {"normalization-schemes",
       "Post-LN, Pre-LN, Peri-LN, nGPT, Mix-LN as speed regulation: clustering times, e^{-2t} "
       "against r^{-2} at the cluster",
       reproduce_normalization_schemes, ""},
  };
  return all;
}

const Reproduction& find_reproduction(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& r : reproductions()) {
    if (name == r.name) return r;
    names.emplace_back(r.name);
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  const std::string guess = nearest(name, names);
  throw InputError("", "NAME", "unknown reproduction '" + name + "'" +
                                   (guess.empty() ? "" : " (did you mean '" + guess + "'?)") + "; one of: " + list);
}

bool takes_random_weights(const std::string& name) {
  return name == "meanfield" || name == "clustering";
}

nlohmann::json run_reproduction(const Reproduction& r, const ReproductionContext& ctx) {
  if (r.run == nullptr)
    throw std::runtime_error(std::string("reproduction '") + r.name + "' is not available yet: it needs " + r.needs);
  Stopwatch clock;
  nlohmann::json numbers = r.run(ctx);
  nlohmann::json summary = {{"command", "reproduce"}, {"name", r.name},  {"title", r.title},
                            {"status", "finished"},   {"quick", ctx.quick}, {"tour", ctx.tour}};
  if (ctx.large) summary["large"] = true;
  if (ctx.long_runs) summary["long"] = true;
  if (ctx.random_weights) summary["random_weights"] = true;
  for (auto& [key, value] : numbers.items()) summary[key] = value;
  summary["wall_seconds"] = clock.seconds();
  write_text(ctx.dir / "summary.json", summary.dump(2) + "\n");
  return summary;
}

void add_reproduce_command(CLI::App& app) {
  struct Options {
    std::string name, out;
    bool quick = false, tour = false, large = false, long_runs = false, random_weights = false,
         no_figures = false, list = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("reproduce", "Recompute a published result: its data, then its figure (NAME.png)");
  cmd->add_option("NAME", options->name, "Which result (see --list)");
  cmd->add_option("--out", options->out, kOutHelp);
  cmd->add_flag("--quick", options->quick, "Smaller sizes (seconds; for tests)");
  cmd->add_flag("--tour", options->tour, "The sizes of `tokenflow demo` (what its report shows; about a minute each)");
  cmd->add_flag("--large", options->large,
                "The large-n form where there is one: meanfield with n up to 10^6 (about 10 minutes on 2 cores)");
  cmd->add_flag("--long", options->long_runs,
                "The long runs where there are some: metastability adds the authors' whole 10^6 normalized steps "
                "through the attention engine without merging, at each beta (about 4 s per beta)");
  cmd->add_flag("--random-weights", options->random_weights,
                "meanfield and clustering: Q and K drawn with entries N(0, 1/d) from a fixed seed "
                "(a non-symmetric QK^T, written to the run's config.toml) instead of the published weights");
  cmd->add_flag("--no-figures", options->no_figures, "Write the data only (no Python needed)");
  cmd->add_flag("--list", options->list, "List the reproductions: name, whether it is available, what it recomputes");
  std::string footer = "Reproductions:";
  for (const auto& r : reproductions())
    footer += fmt::format("\n  {:<24}{}{}", r.name, r.title, r.run ? "" : std::string(" [needs ") + r.needs + "]");
  footer += "\nWrites DIR/summary.json, the data of the figure (.npy, .csv, config.toml of each run) and DIR/NAME*.png"
            "\n(drawn by `python3 -m tokenflow.figures NAME DIR`, which also works on the data alone).";
  cmd->footer(footer);
  cmd->callback([options] {
    if (options->list) {
      // NAME, availability (one word), then what it recomputes.
      for (const auto& r : reproductions())
        std::cout << fmt::format("{:<24}{:<10} {}{}\n", r.name, r.run ? "available" : "pending", r.title,
                                 r.run ? "" : " [needs " + std::string(r.needs) + "]");
      return;
    }
    if (options->name.empty()) throw InputError("", "NAME", "which reproduction? (tokenflow reproduce --list)");
    if (options->out.empty()) throw InputError("", "--out", "an output directory is required");
    const Reproduction& r = find_reproduction(options->name);
    if (r.run == nullptr)
      throw std::runtime_error(std::string("reproduction '") + r.name + "' is not available yet: it needs " + r.needs);
    if (options->random_weights && !takes_random_weights(r.name))
      throw InputError("", "--random-weights",
                       std::string("reproduction '") + r.name +
                           "' has no random-weights form (meanfield and clustering have one)");
    // Python is checked before anything is computed: a missing matplotlib fails fast.
    std::optional<PythonFigures> python;
    if (!options->no_figures) python = find_python_figures();
    OutputDir out(options->out, {"reproduce " + std::string(r.name), {"summary.json"}, {}});
    run_reproduction(r, {out.staged(""), options->quick, options->tour, r.name, options->large,
                         options->long_runs, options->random_weights});
    if (python) draw_figures(*python, {r.name, out.staged("").string()});
    out.commit();
  });
}

}  // namespace tokenflow::cli
