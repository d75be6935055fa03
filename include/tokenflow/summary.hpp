// tokenflow/summary.hpp: what a run reports, built once for the CLI and for Python.
//
// summary.json (and the tables) of `tokenflow simulate`, `gaussian`, `meanfield`, `stability`,
// `train`, `ot` and `wasserstein` (docs/design.md section 2) are built here so that the CLI writes
// them and the Python functions of the same names return them with the same keys and the same
// values (Python receives the JSON document itself as a dict, src/config/summary_documents.hpp; the
// text prints numbers with enough digits to round-trip, and non-finite numbers are null in both).
// Every summary ends with "wall_seconds", the one value that differs between two runs of the same
// config.
#pragma once

#include <Eigen/Core>
#include <string>
#include <vector>

#include "tokenflow/dynamics.hpp"

namespace tokenflow {

// The runs' settings and results (tokenflow/readers.hpp, gaussian.hpp, meanfield.hpp,
// stability.hpp, train.hpp): the builders below only take them by reference.
struct SimulationConfig;
struct GaussianSetup;
struct MeanFieldSetup;
struct StabilitySetup;
struct GaussianResult;
struct MeanFieldResult;
struct StabilityResult;
struct StabilitySpec;
struct TrainConfig;
struct TrainResult;
struct MetricsRow;
struct OTSolution;           // tokenflow/ot_solve.hpp
struct WassersteinSolution;  // tokenflow/ot_solve.hpp

// summary.json of `simulate` as JSON text (2-space indent, no trailing newline): "command",
// "status", "t_final", "steps", "n", "d", "dtype", "kind", "heads", "integrator", "frames",
// "final" {"mean", "cov", "cov_eigenvalues", "rank", "effective_rank", "clusters", "max_norm",
// "energy" (when finite)}, "rejected_steps" (dopri5), "summation" (softmax and l2: mode, tol,
// evaluations, rows_expanded, rows_exact, exact_row_share), "warnings" (when there are any: lines
// the CLI prints on stderr and Python issues as warnings) and "wall_seconds".
template <class T>
std::string simulation_summary_json(const SimulationResult<T>& result, const Measure<T>& initial,
                                    const SimulationConfig& config, const AttentionParams& attention,
                                    double wall_seconds);

// The per-frame diagnostics as a table: column names (t, mean_c, eig_c, effective_rank, rank,
// clusters, energy, max_norm) and one row per frame (F x columns, row-major).
struct DiagnosticsTable {
  std::vector<std::string> columns;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rows;
};
DiagnosticsTable diagnostics_table(const std::vector<FrameDiagnostics>& frames, Eigen::Index d);
// diagnostics.csv: the table with a header line, numbers printed to round-trip ("%.17g"; the
// integer columns rank and clusters as integers).
std::string diagnostics_csv(const DiagnosticsTable& table);

// ---- gaussian -----------------------------------------------------------------------------------
// The warnings of a moment-ODE run (the covariance left the PSD cone), as the CLI prints them.
std::vector<std::string> gaussian_warnings(const GaussianResult& result);
// "command", "status", "blowup_time", "t_final", "steps", "rejected_steps" (dopri5), "d", "kind",
// "heads", "integrator", "frames", "final" {"mean", "cov", "cov_eigenvalues", "rank", "trace"},
// "psd", "warnings", "predicted_blowup_time" and "predicted_limit" (softmax with W_h V_h = I, when
// they exist), "wall_seconds".
std::string gaussian_summary_json(const GaussianResult& result, const GaussianSetup& setup, double wall_seconds);

// ---- meanfield ----------------------------------------------------------------------------------
// meanfield.csv: one row per n and sample (n, sample, seed, status, the six errors, seconds).
std::string meanfield_csv(const MeanFieldResult& result);
// "command", "status", "kind", "d", "T", "dt", "integrator", "ns", "seeds", "slope" (of the
// Bures-Wasserstein error), "theory_slope", "slopes", "ode_final", "wall_seconds".
std::string meanfield_summary_json(const MeanFieldResult& result, const MeanFieldSetup& setup, double wall_seconds);

// ---- stability ----------------------------------------------------------------------------------
// stability.csv: t, w2, ratio, w2_over_delta.
std::string stability_csv(const StabilityResult& result, const StabilitySpec& spec);
std::string stability_summary_json(const StabilityResult& result, const StabilitySetup& setup, double wall_seconds);

// ---- train --------------------------------------------------------------------------------------
// metrics.csv: step, loss, test_w1, seconds, test_loss, test_accuracy (empty without assignments);
// with `alignment` (texts), also test_aer, test_precision, test_recall, test_link_mass.
std::string metrics_csv(const std::vector<MetricsRow>& rows, bool alignment = false);
// "command", "status", "steps", "resumed_from_step", "task", "dtype", "parameters", "test_pairs",
// the test metrics (trained, untrained, independent; texts add test_aer, test_precision,
// test_recall, test_link_mass), "notes" (when `notes` is not empty: what the run reported about its data, e.g.
// unknown words), "train_seconds", "threads", "pairs_per_second" (trained steps x batch /
// wall_seconds), "wall_seconds".
std::string train_summary_json(const TrainConfig& config, const TrainResult& result, long first_step,
                               double wall_seconds, const std::vector<std::string>& notes = {});

// ---- ot, wasserstein -----------------------------------------------------------------------------
// summary.json of `tokenflow ot`: "command", "method", "n", "m", "ground_cost", "status",
// "converged", "cost", "objective", "iterations", "marginal_error", "solve_seconds",
// "plan_written", sinkhorn: "epsilon", "tol", "max_iter", "operator", "rounding_floor",
// "epsilon_reached", "overrelaxation_requested" (as asked), kernel mode: "overrelaxation" and
// "anderson_depth" (what its loop ran), "epsilon_start",
// "epsilon_decay" (when scaling), "divergence" and "divergence_terms" (when asked); exact:
// "dual_objective"; then "wall_seconds".
// ("reason" when status is failed)
std::string ot_summary_json(const OTSolution& solution, double wall_seconds);

// summary.json of `tokenflow wasserstein`: "command", "p", "n", "m", "d", "method", "value",
// "status" (optimal | converged | max_iter | below_floor), "converged", Sinkhorn: "epsilon", "iterations", "rounding_floor",
// "marginal_error", "cost", "entropic_bias_bound"; then "wall_seconds".
std::string wasserstein_summary_json(const WassersteinSolution& solution, double wall_seconds);

}  // namespace tokenflow
