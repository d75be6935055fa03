// The published results that `tokenflow reproduce NAME` and `tokenflow demo` recompute.
//
// A reproduction is one C++ function (src/cli/reproduce_<name>.cpp) that computes with the library
// and writes its data into ctx.dir (.npy arrays, .csv tables, the config.toml of every run, whole
// simulation directories) and returns the numbers that go into its summary.json. Its figures are
// drawn afterwards by the Python function registered under the same name in
// python/tokenflow/figures.py, which reads only those files. The registry below is the one list
// of reproductions; an entry whose `run` is null is a hook for a reproduction this build lacks
// (`needs` says what it needs), listed by `tokenflow reproduce --list` and in the demo report as
// pending.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tokenflow::cli {

struct ReproductionContext {
  std::filesystem::path dir;  // the (staged) directory to write into; it exists
  bool quick = false;         // smaller sizes, for tests: same code path, fewer points/runs
  bool tour = false;          // part of `tokenflow demo`: keep long experiments to about a minute
  std::string label;          // prefix of the progress bar's label
  bool large = false;         // --large: the large-n form where a reproduction has one (minutes)
  bool long_runs = false;     // --long: the long runs where there are some (metastability: 10^6 engine steps per beta)
  // --random-weights: Q, K drawn with entries N(0, 1/d) (meanfield, clustering)
  bool random_weights = false;
};

// Writes the data into ctx.dir and returns the numbers of summary.json (a JSON object); the
// caller adds "command", "name", "title", "status", "quick" and "wall_seconds".
using ReproductionFn = nlohmann::json (*)(const ReproductionContext& ctx);

struct Reproduction {
  const char* name;
  const char* title;   // one line: what the figure shows
  ReproductionFn run;  // nullptr: a hook, not available yet
  const char* needs;   // for hooks: the part it waits for
};

// Every reproduction, in the order of the demo report.
const std::vector<Reproduction>& reproductions();
// The reproduction called `name`; InputError (key "NAME", with a suggestion) when there is none.
const Reproduction& find_reproduction(const std::string& name);
// The seed of tokenflow::Random from which --random-weights draws Q, then K (one draw, fixed, so
// that the figures and docs can be regenerated).
constexpr std::uint64_t kRandomWeightsSeed = 2;
// Whether reproduction `name` has a --random-weights form (ReproductionContext::random_weights).
bool takes_random_weights(const std::string& name);
// Runs `r` into ctx.dir and writes ctx.dir/summary.json; returns the summary.
nlohmann::json run_reproduction(const Reproduction& r, const ReproductionContext& ctx);

// ---- the reproductions (one file each) ---------------------------------------------------------
nlohmann::json reproduce_sphere(const ReproductionContext& ctx);          // reproduce_sphere.cpp
nlohmann::json reproduce_clustering(const ReproductionContext& ctx);      // reproduce_clustering.cpp
nlohmann::json reproduce_normalizations(const ReproductionContext& ctx);  // reproduce_normalizations.cpp
nlohmann::json reproduce_collapse(const ReproductionContext& ctx);        // reproduce_collapse.cpp
nlohmann::json reproduce_cone(const ReproductionContext& ctx);            // reproduce_cone.cpp
nlohmann::json reproduce_ranks(const ReproductionContext& ctx);           // reproduce_ranks.cpp
nlohmann::json reproduce_blowup(const ReproductionContext& ctx);          // reproduce_blowup.cpp
nlohmann::json reproduce_meanfield(const ReproductionContext& ctx);       // reproduce_meanfield.cpp
nlohmann::json reproduce_universal_approximation(const ReproductionContext& ctx);  // reproduce_universal.cpp
nlohmann::json reproduce_energy_dissipation(const ReproductionContext& ctx);  // reproduce_energy_dissipation.cpp
nlohmann::json reproduce_nonconvexity(const ReproductionContext& ctx);        // reproduce_nonconvexity.cpp
nlohmann::json reproduce_sinkhorn_bures(const ReproductionContext& ctx);      // reproduce_sinkhorn_bures.cpp
nlohmann::json reproduce_equiangular(const ReproductionContext& ctx);         // reproduce_equiangular.cpp
nlohmann::json reproduce_long_context(const ReproductionContext& ctx);        // reproduce_long_context.cpp
nlohmann::json reproduce_metastability(const ReproductionContext& ctx);       // reproduce_metastability.cpp
nlohmann::json reproduce_normalization_schemes(const ReproductionContext& ctx);  // reproduce_normalization_schemes.cpp

}  // namespace tokenflow::cli
