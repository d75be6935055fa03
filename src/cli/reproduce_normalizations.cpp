// reproduce normalizations: the attention matrix of the same tokens normalized two ways.
// Softmax divides each row by its sum: row-stochastic, while the columns (how much attention each
// token receives) are free. Sinkhorn attention (Sander, Ablin, Blondel, Peyre, "Sinkformers", 2022)
// alternates row and column normalizations to the entropic OT plan between (a, a): with uniform
// weights, n pi is doubly stochastic. Both matrices come from the reference implementation
// (reference_attention_matrix, plain double loops).
#include <fmt/format.h>

#include "common.hpp"
#include "reproductions.hpp"
#include "run_simulation.hpp"
#include "tokenflow/attention.hpp"
#include "tokenflow/io.hpp"

namespace tokenflow::cli {

namespace {

std::string normalizations_config(const std::string& kind, long n) {
  return fmt::format(R"(# n tokens from N(0, 2 I_2); the same Q = K = I and scale for both normalizations.
seed = 7
[init]
kind = "gaussian"
n = {n}
mean = [0.0, 0.0]
cov = [[2.0, 0.0], [0.0, 2.0]]
[attention]
kind = "{kind}"
Q = [[1.0, 0.0], [0.0, 1.0]]
K = [[1.0, 0.0], [0.0, 1.0]]
scale = 1.0
epsilon = 1.0
)",
                     fmt::arg("n", n), fmt::arg("kind", kind));
}

nlohmann::json stochasticity(const Eigen::MatrixXd& w) {
  const Eigen::VectorXd rows = w.rowwise().sum(), cols = w.colwise().sum().transpose();
  return {{"max_row_sum_error", (rows.array() - 1.0).abs().maxCoeff()},
          {"max_column_sum_error", (cols.array() - 1.0).abs().maxCoeff()},
          {"min_column_sum", cols.minCoeff()},
          {"max_column_sum", cols.maxCoeff()},
          {"min_entry", w.minCoeff()}};
}

}  // namespace

nlohmann::json reproduce_normalizations(const ReproductionContext& ctx) {
  const long n = 16;
  nlohmann::json numbers = {{"n", n}, {"d", 2}};
  Eigen::MatrixXd matrices[2];
  const char* kinds[2] = {"softmax", "sinkhorn"};
  for (int k = 0; k < 2; ++k) {
    const std::string toml = normalizations_config(kinds[k], n);
    write_text(ctx.dir / fmt::format("config_{}.toml", kinds[k]), toml);
    const PreparedSimulation p = prepare_simulation(Config::from_text(toml, fmt::format("config_{}.toml", kinds[k])));
    matrices[k] = reference_attention_matrix(p.attention, p.initial, 0.0, 0);
    const Points<double> w = matrices[k];  // row-major for .npy (C order)
    write_npy(ctx.dir / fmt::format("{}.npy", kinds[k]), w.data(), {static_cast<std::size_t>(w.rows()), static_cast<std::size_t>(w.cols())});
    if (k == 0) write_points(ctx.dir / "tokens.npy", p.initial.points);
    numbers[kinds[k]] = stochasticity(matrices[k]);
  }
  numbers["epsilon"] = 1.0;
  numbers["sinkhorn_tol"] = 1e-12;
  return numbers;
}

}  // namespace tokenflow::cli
