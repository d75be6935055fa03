// The summaries of tokenflow/summary.hpp as JSON documents (internal to src/ and python/): the CLI
// writes their text (summary.hpp's *_summary_json), Python receives them as dicts without a JSON
// text in between (python/src/json_to_python.hpp).
#pragma once

#include <nlohmann/json.hpp>

#include "tokenflow/summary.hpp"

namespace tokenflow {

struct OTSolution;           // tokenflow/ot_solve.hpp
struct WassersteinSolution;  // tokenflow/ot_solve.hpp

template <class T>
nlohmann::json simulation_summary(const SimulationResult<T>& result, const Measure<T>& initial,
                                  const SimulationConfig& config, const AttentionParams& attention,
                                  double wall_seconds);
nlohmann::json gaussian_summary(const GaussianResult& result, const GaussianSetup& setup, double wall_seconds);
nlohmann::json meanfield_summary(const MeanFieldResult& result, const MeanFieldSetup& setup, double wall_seconds);
nlohmann::json stability_summary(const StabilityResult& result, const StabilitySetup& setup, double wall_seconds);
nlohmann::json ot_summary(const OTSolution& solution, double wall_seconds);
nlohmann::json wasserstein_summary(const WassersteinSolution& solution, double wall_seconds);
nlohmann::json train_summary(const TrainConfig& config, const TrainResult& result, long first_step,
                             double wall_seconds, const std::vector<std::string>& notes = {});

}  // namespace tokenflow
