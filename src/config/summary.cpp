// summary.json and diagnostics.csv of `simulate`, shared by the CLI and the Python module.
#include "tokenflow/summary.hpp"

#include "summary_documents.hpp"

#include "../attention/exact_row_limit.hpp"

#include "json_values.hpp"

#include "tokenflow/energy.hpp"
#include "tokenflow/readers.hpp"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

namespace tokenflow {

namespace {

using namespace json_values;

// "summation" of a softmax, l2 or sinkhorn run: the mode and tolerance, the head evaluations by the
// fast summation and by the dense kernel, the fast summation's rows expanded from the grid and
// summed exactly (sinkhorn: over every soft-min of its solves and the output's transform), and
// "exact_row_share" = rows_exact / (rows_expanded + rows_exact) (null when no row went through the
// fast summation). summation = "fast" past kFastExactRowLimit adds a line to `warnings`.
nlohmann::json summation_summary(const AttentionParams& attention, const SummationReport& sum,
                                 std::vector<std::string>& warnings) {
  const char* mode = attention.summation == Summation::dense  ? "dense"
                     : attention.summation == Summation::fast ? "fast"
                                                              : "auto";
  const long long rows = sum.rows_expanded + sum.rows_exact;
  const double share = rows > 0 ? static_cast<double>(sum.rows_exact) / static_cast<double>(rows) : std::nan("");
  if (attention.summation == Summation::fast && share > kFastExactRowLimit)
    warnings.push_back(fmt::format(
        "summation = \"fast\" summed {:.1f}% of the rows exactly (the grid could not certify them at "
        "summation_tol = {:g}; summary.json \"summation\".\"exact_row_share\"): beyond {:g}% the dense kernel is "
        "faster; summation = \"auto\" or \"dense\" chooses it",
        100.0 * share, attention.summation_tol, 100.0 * kFastExactRowLimit));
  return {{"mode", mode},
          {"tol", attention.summation_tol},
          {"fast_evaluations", sum.fast_evaluations},
          {"dense_evaluations", sum.dense_evaluations},
          {"rows_expanded", sum.rows_expanded},
          {"rows_exact", sum.rows_exact},
          {"exact_row_share", json_number(share)}};
}

}  // namespace

template <class T>
nlohmann::json simulation_summary(const SimulationResult<T>& r, const Measure<T>& mu, const SimulationConfig& config,
                                  const AttentionParams& attention, double wall_seconds) {
  const FrameDiagnostics& last = r.diagnostics.back();
  const Measure<T> final_measure{r.positions, mu.weights, {}};
  nlohmann::json s;
  s["command"] = "simulate";
  s["status"] = r.status;
  if (!r.reason.empty()) s["reason"] = r.reason;
  s["t_final"] = r.t_final;
  s["steps"] = r.steps;
  if (config.run.integrator == Integrator::dopri5) s["rejected_steps"] = r.rejected_steps;
  s["n"] = mu.n();
  s["d"] = mu.d();
  s["dtype"] = std::is_same_v<T, float> ? "f32" : "f64";
  s["kind"] = to_string(attention.kind);
  s["heads"] = attention.heads;
  s["integrator"] = to_string(config.run.integrator);
  if (attention.normalize == Normalize::sphere || attention.normalize == Normalize::mix)
    s["sphere_step"] = to_string(config.run.sphere_step);
  s["frames"] = r.frames.size();
  s["final"] = {{"mean", json_vector(weighted_mean(final_measure))},
                {"cov", json_matrix(weighted_covariance(final_measure))},
                {"cov_eigenvalues", json_vector(last.cov_eigenvalues)},
                {"rank", last.rank},
                {"effective_rank", json_number(last.effective_rank)},
                {"clusters", last.cluster_count},
                {"max_norm", json_number(last.max_norm)}};
  if (std::isfinite(last.energy)) s["final"]["energy"] = last.energy;
  if (attention.kind == AttentionKind::softmax) {  // E must not decrease when gradient_flow is true
    const EnergyMonotonicity e = energy_monotonicity(r.diagnostics, attention, mu.n(), std::is_same_v<T, float>);
    s["gradient_flow"] = has_energy_gradient_structure(attention);
    s["energy_monotone"] = e.monotone;
    s["energy_largest_relative_decrease"] = json_number(e.largest_relative_decrease);
    s["energy_allowance"] = json_number(e.allowance);
  }
  std::vector<std::string> warnings;
  if (attention.kind == AttentionKind::softmax || attention.kind == AttentionKind::l2 ||
      attention.kind == AttentionKind::sinkhorn)
    s["summation"] = summation_summary(attention, r.summation, warnings);
  if (!warnings.empty()) s["warnings"] = warnings;
  s["wall_seconds"] = wall_seconds;
  return s;
}

template <class T>
std::string simulation_summary_json(const SimulationResult<T>& r, const Measure<T>& mu, const SimulationConfig& config,
                                    const AttentionParams& attention, double wall_seconds) {
  return simulation_summary(r, mu, config, attention, wall_seconds).dump(2);
}

template nlohmann::json simulation_summary<double>(const SimulationResult<double>&, const Measure<double>&,
                                                   const SimulationConfig&, const AttentionParams&, double);
template nlohmann::json simulation_summary<float>(const SimulationResult<float>&, const Measure<float>&,
                                                  const SimulationConfig&, const AttentionParams&, double);
template std::string simulation_summary_json<double>(const SimulationResult<double>&, const Measure<double>&,
                                                     const SimulationConfig&, const AttentionParams&, double);
template std::string simulation_summary_json<float>(const SimulationResult<float>&, const Measure<float>&,
                                                    const SimulationConfig&, const AttentionParams&, double);

DiagnosticsTable diagnostics_table(const std::vector<FrameDiagnostics>& frames, Eigen::Index d) {
  DiagnosticsTable table;
  table.columns.push_back("t");
  for (Eigen::Index c = 0; c < d; ++c) table.columns.push_back("mean_" + std::to_string(c));
  for (Eigen::Index c = 0; c < d; ++c) table.columns.push_back("eig_" + std::to_string(c));
  for (const char* name : {"effective_rank", "rank", "clusters", "energy", "max_norm"}) table.columns.push_back(name);
  table.rows.resize(static_cast<Eigen::Index>(frames.size()), static_cast<Eigen::Index>(table.columns.size()));
  for (std::size_t f = 0; f < frames.size(); ++f) {
    const FrameDiagnostics& fr = frames[f];
    auto row = table.rows.row(static_cast<Eigen::Index>(f));
    Eigen::Index c = 0;
    row[c++] = fr.t;
    for (double v : fr.mean) row[c++] = v;
    for (double v : fr.cov_eigenvalues) row[c++] = v;
    row[c++] = fr.effective_rank;
    row[c++] = fr.rank;
    row[c++] = static_cast<double>(fr.cluster_count);
    row[c++] = fr.energy;
    row[c++] = fr.max_norm;
  }
  return table;
}

std::string diagnostics_csv(const DiagnosticsTable& table) {
  std::string out;
  for (std::size_t c = 0; c < table.columns.size(); ++c) out += (c ? "," : "") + table.columns[c];
  out += "\n";
  const auto ncols = static_cast<Eigen::Index>(table.columns.size());
  for (Eigen::Index r = 0; r < table.rows.rows(); ++r) {
    for (Eigen::Index c = 0; c < ncols; ++c) {
      const std::string& name = table.columns[static_cast<std::size_t>(c)];
      const double v = table.rows(r, c);
      if (c) out += ",";
      if (name == "rank" || name == "clusters") out += fmt::format("{}", static_cast<long>(v));
      else out += fmt::format("{:.17g}", v);
    }
    out += "\n";
  }
  return out;
}

}  // namespace tokenflow
