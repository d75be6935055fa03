// tokenflow/summary.hpp: what a run reports, built once for the CLI and for Python.
//
// summary.json and diagnostics.csv of `tokenflow simulate` (DESIGN.md section 2) are built here so
// that the CLI writes them and Python's tokenflow.simulate returns them with the same keys and the
// same values (the JSON text is parsed by Python's json module; numbers are printed with enough
// digits to round-trip, non-finite numbers become null).
#pragma once

#include <Eigen/Core>
#include <string>
#include <vector>

#include "tokenflow/dynamics.hpp"
#include "tokenflow/readers.hpp"

namespace tokenflow {

// summary.json of `simulate` as JSON text (2-space indent, no trailing newline): "command",
// "status", "t_final", "steps", "n", "d", "dtype", "kind", "heads", "integrator", "frames",
// "final" {"mean", "cov", "cov_eigenvalues", "rank", "effective_rank", "clusters", "max_norm",
// "energy" (when finite)}, "rejected_steps" (dopri5) and "wall_seconds".
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

}  // namespace tokenflow
