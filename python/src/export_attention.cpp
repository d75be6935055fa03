// attention_matrix: the n x n weights w_h(x_i, x_j) of one head from the reference implementation
// (reference_attention_matrix), with the attention read from a config's [attention] table.
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <optional>

#include "arrays.hpp"
#include "exports.hpp"
#include "tokenflow/attention.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/energy.hpp"
#include "tokenflow/readers.hpp"

namespace tokenflow::python {

namespace {
// The measure of the tokens x with optional weights and positions; errors name Python's arguments.
Measure<double> measure_of(const InArray& x, const std::optional<InArray>& weights,
                           const std::optional<InArray>& positions) {
  try {
    return make_measure<double>(Points<double>(as_matrix(x, "x")),
                                weights ? Eigen::VectorXd(as_vector(*weights, "weights")) : Eigen::VectorXd(),
                                positions ? Eigen::VectorXd(as_vector(*positions, "positions")) : Eigen::VectorXd());
  } catch (const InputError& e) {
    throw InputError(e.source(), e.key() == "points" ? "x" : e.key(), e.detail());
  }
}
}  // namespace

void export_attention(py::module_& m) {
  m.def(
      "attention_matrix",
      [](const Config& source, const InArray& x, std::optional<InArray> weights, std::optional<InArray> positions,
         double t, int head) {
        const SimulationConfig config = read_simulation_config(source);
        // The reference forms the logits, the weights and the returned copy: three n x n matrices.
        const long double n = x.ndim() >= 1 ? static_cast<long double>(x.shape(0)) : 0.0L;
        check_fits_in_memory("x", 3.0L * n * n * sizeof(double),
                             fmt::format("n = {:.0f} tokens: the {:.0f} x {:.0f} attention matrix (with the two the "
                                         "reference forms on the way)",
                                         static_cast<double>(n), static_cast<double>(n), static_cast<double>(n)));
        const Measure<double> mu = measure_of(x, weights, positions);
        const AttentionParams attention = read_attention(config, source, static_cast<int>(mu.d()));
        if (head < 0 || head >= attention.heads)
          throw InputError("", "head", "must be in [0, " + std::to_string(attention.heads) + ") (got " +
                                           std::to_string(head) + ")");
        check_sinkhorn_attention_range(attention, mu);
        RowMatrix w = without_gil([&](const auto&) { return RowMatrix(reference_attention_matrix(attention, mu, t, head)); });
        return to_numpy(std::move(w));
      },
      py::arg("config"), py::arg("x"), py::arg("weights") = py::none(), py::arg("positions") = py::none(),
      py::arg("t") = 0.0, py::arg("head") = 0);
  // attention_field: Gamma_mu(x) (n x d), the velocity simulate integrates, from the same
  // AttentionField (its kernel, summation mode and sphere projection), in float64.
  m.def(
      "attention_field",
      [](const Config& source, const InArray& x, std::optional<InArray> weights, std::optional<InArray> positions,
         double t) {
        const SimulationConfig config = read_simulation_config(source);
        const Measure<double> mu = measure_of(x, weights, positions);
        const AttentionParams attention = read_attention(config, source, static_cast<int>(mu.d()));
        check_sinkhorn_attention_range(attention, mu);
        RowMatrix v = without_gil([&](const auto&) {
          AttentionField<double> field(attention, mu);
          Points<double> out(mu.n(), mu.d());
          field.velocity(t, mu.points, out);
          return RowMatrix(out);
        });
        return to_numpy(std::move(v));
      },
      py::arg("config"), py::arg("x"), py::arg("weights") = py::none(), py::arg("positions") = py::none(),
      py::arg("t") = 0.0);
  // energy_rates: E, dE/dt and |dE|^2 of softmax attention (tokenflow/energy.hpp) at one measure.
  m.def(
      "energy_rates",
      [](const Config& source, const InArray& x, std::optional<InArray> weights, double t) {
        const SimulationConfig config = read_simulation_config(source);
        const Measure<double> mu = measure_of(x, weights, std::nullopt);
        const AttentionParams attention = read_attention(config, source, static_cast<int>(mu.d()));
        const EnergyRates r = without_gil([&](const auto&) { return energy_rates(attention, mu, t); });
        py::dict out;
        out["energy"] = r.energy;
        out["rate"] = r.rate;
        out["slope_squared"] = r.slope_squared;
        return out;
      },
      py::arg("config"), py::arg("x"), py::arg("weights") = py::none(), py::arg("t") = 0.0);
}

}  // namespace tokenflow::python
