// simulate: the particle flow, through the same reader (read_simulation_config), initial measure,
// attention and summary code as `tokenflow simulate`.
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <optional>

#include "arrays.hpp"
#include "../../src/config/summary_documents.hpp"
#include "exports.hpp"
#include "json_to_python.hpp"
#include "tokenflow/dynamics.hpp"
#include "tokenflow/readers.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow::python {

namespace {

// Keys of the measure checks, named as simulate's arguments.
InputError as_argument_error(const InputError& e) {
  const std::string key = e.key() == "points" ? "x0" : e.key();
  return InputError(e.source(), key, e.detail());
}

template <class T>
py::dict run(const SimulationConfig& config, const AttentionParams& attention, const Measure<double>& mu64,
             std::chrono::steady_clock::time_point start, const py::object& progress) {
  const Measure<T> mu{mu64.points.cast<T>(), mu64.weights.cast<T>(), mu64.positions.cast<T>()};
  SimulationResult<T> r = without_gil(
      [&](const auto& keep_going) {
        return simulate(attention, config.run, mu, [&](const Progress& p) { return keep_going(p.t, p.T, p.steps); });
      },
      progress);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  py::dict out;
  out["summary"] = to_python(simulation_summary(r, mu, config, attention, wall));
  DiagnosticsTable table = diagnostics_table(r.diagnostics, mu.d());
  out["diagnostics_columns"] = table.columns;
  out["diagnostics"] = to_numpy(std::move(table.rows));
  out["status"] = r.status;
  if (!r.frames.empty()) {
    const auto frames = static_cast<py::ssize_t>(r.frames.size());
    py::array_t<T> trajectory({frames, static_cast<py::ssize_t>(mu.n()), static_cast<py::ssize_t>(mu.d())});
    T* dst = trajectory.mutable_data();
    for (auto& f : r.frames) {
      std::memcpy(dst, f.data(), sizeof(T) * static_cast<std::size_t>(f.size()));
      dst += f.size();
      f = Points<T>();  // free as we go
    }
    out["trajectory"] = trajectory;
    // times.npy is float32 for f32 runs, like the CLI's.
    if constexpr (std::is_same_v<T, float>) out["times"] = to_numpy(std::vector<float>(r.times.begin(), r.times.end()));
    else out["times"] = to_numpy(std::move(r.times));
  } else {
    out["trajectory"] = py::none();
    out["times"] = py::none();
  }
  out["initial"] = to_numpy(Points<T>(mu.points));
  out["positions"] = to_numpy(std::move(r.positions));
  return out;
}

}  // namespace

void export_dynamics(py::module_& m) {
  m.def(
      "simulate",
      [](const Config& source, std::optional<InArray> x0, std::optional<InArray> weights,
         std::optional<InArray> positions, py::object progress) -> py::dict {
        const auto start = std::chrono::steady_clock::now();
        const SimulationConfig config = read_simulation_config(source);
        Measure<double> mu;
        if (x0) {
          mu.points = as_matrix(*x0, "x0");
        } else {
          mu = without_gil([&](const auto&) { return make_initial_measure(config, source); });
        }
        if (x0 || weights || positions) {
          Eigen::VectorXd w = weights ? Eigen::VectorXd(as_vector(*weights, "weights"))
                                      : (x0 ? Eigen::VectorXd() : mu.weights);
          Eigen::VectorXd p = positions ? Eigen::VectorXd(as_vector(*positions, "positions"))
                                        : (x0 ? Eigen::VectorXd() : mu.positions);
          try {
            mu = make_measure<double>(std::move(mu.points), std::move(w), std::move(p));
          } catch (const InputError& e) {
            throw as_argument_error(e);
          }
        }
        const AttentionParams attention = read_attention(config, source, static_cast<int>(mu.d()));
        if (config.dtype == Dtype::f32) return run<float>(config, attention, mu, start, progress);
        return run<double>(config, attention, mu, start, progress);
      },
      py::arg("config"), py::arg("x0") = py::none(), py::arg("weights") = py::none(),
      py::arg("positions") = py::none(), py::arg("progress") = py::none());
}

}  // namespace tokenflow::python
