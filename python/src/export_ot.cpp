// sinkhorn, exact_ot and wasserstein between two weighted point clouds, through the same library
// calls as `tokenflow ot` and `tokenflow wasserstein` (include/tokenflow/ot_solve.hpp): the same
// option checks, the same operator choice, the same summary.json.
#include <pybind11/stl.h>

#include <chrono>
#include <optional>

#include "../../src/io/summary_documents.hpp"
#include "arrays.hpp"
#include "exports.hpp"
#include "json_to_python.hpp"
#include "tokenflow/measure.hpp"
#include "tokenflow/ot_solve.hpp"

namespace tokenflow::python {

namespace {

using Clock = std::chrono::steady_clock;

// A measure from the arguments (checked and normalized by make_measure, as the CLI's files are);
// errors name the arguments (x, a, positions_x or y, b, positions_y).
Measure<double> read_side(const InArray& points, const std::optional<InArray>& weights,
                          const std::optional<InArray>& positions, const std::string& x_name,
                          const std::string& w_name, const std::string& p_name) {
  try {
    return make_measure<double>(
        Points<double>(as_matrix(points, x_name)),
        weights ? Eigen::VectorXd(as_vector(*weights, w_name)) : Eigen::VectorXd(),
        positions ? Eigen::VectorXd(as_vector(*positions, p_name)) : Eigen::VectorXd());
  } catch (const InputError& e) {
    const std::string& k = e.key();
    throw InputError(e.source(),
                     k == "points"      ? x_name
                     : k == "weights"   ? w_name
                     : k == "positions" ? p_name
                                        : k,
                     e.detail());
  }
}

py::dict to_dict(OTSolution&& r, const Measure<double>& mu, const Measure<double>& nu,
                 double wall) {
  py::dict out;
  out["summary"] = to_python(ot_summary(r, wall));
  out["status"] = r.status;
  out["reason"] = r.reason;
  out["warning"] = ot_convergence_warning(r);
  out["plan"] = r.plan_formed ? py::object(to_numpy(std::move(r.plan))) : py::none();
  out["f"] = to_numpy(std::move(r.f));
  out["g"] = to_numpy(std::move(r.g));
  out["cost"] = r.cost;
  out["objective"] = r.objective;
  out["iterations"] = r.iterations ? py::object(py::int_(*r.iterations)) : py::none();
  out["marginal_error"] = r.marginal_error;
  out["converged"] = r.converged;
  out["divergence"] = r.divergence ? py::object(py::float_(*r.divergence)) : py::none();
  out["a"] = to_numpy(Eigen::VectorXd(mu.weights));
  out["b"] = to_numpy(Eigen::VectorXd(nu.weights));
  return out;
}

}  // namespace

void export_ot(py::module_& m) {
  // The options of `tokenflow ot`, the library's struct itself: Python sets its fields by name, so
  // a field the CLI has is one Python has (a renamed one fails loudly), and check_ot_options is the
  // one check of both.
  py::class_<OTSolveOptions>(m, "OTOptions")
      .def(py::init<>())
      .def_readwrite("method", &OTSolveOptions::method)
      .def_readwrite("epsilon", &OTSolveOptions::epsilon)
      .def_readwrite("tol", &OTSolveOptions::tol)
      .def_readwrite("max_iter", &OTSolveOptions::max_iter)
      .def_readwrite("epsilon_start", &OTSolveOptions::epsilon_start)
      .def_readwrite("epsilon_decay", &OTSolveOptions::epsilon_decay)
      .def_readwrite("operator", &OTSolveOptions::op)
      .def_readwrite("overrelaxation", &OTSolveOptions::overrelaxation)
      .def_readwrite("divergence", &OTSolveOptions::divergence)
      .def_readwrite("plan", &OTSolveOptions::want_plan);

  m.def(
      "ot",
      [](const InArray& x_in, const InArray& y_in, std::optional<InArray> a_in,
         std::optional<InArray> b_in, const std::string& cost_name, OTSolveOptions options) {
        const auto start = Clock::now();
        const CostKind cost = cost_kind_from_string(cost_name);
        check_ot_options(options, false, cost);
        const Measure<double> mu = read_side(x_in, a_in, std::nullopt, "x", "a", "positions_x");
        const Measure<double> nu = read_side(y_in, b_in, std::nullopt, "y", "b", "positions_y");
        OTSolution r = without_gil([&](const auto& keep_going) {
          options.progress = [&](int, double) { return keep_going(); };
          return solve_ot(mu, nu, cost, options);
        });
        return to_dict(std::move(r), mu, nu, seconds_since(start));
      },
      py::arg("x"), py::arg("y"), py::arg("a"), py::arg("b"), py::arg("cost"), py::arg("options"));

  m.def(
      "wasserstein",
      [](const InArray& x_in, const InArray& y_in, std::optional<InArray> a_in,
         std::optional<InArray> b_in, double p, const std::string& method, double epsilon,
         double tol, int max_iter, std::optional<InArray> pos_x, std::optional<InArray> pos_y) {
        const auto start = Clock::now();
        if (pos_x.has_value() != pos_y.has_value())
          throw InputError("", pos_x ? "positions_y" : "positions_x",
                           "conditional W_p needs both positions_x and positions_y");
        WassersteinOptions options;
        options.method = wasserstein_method_from_string(method);
        options.epsilon = epsilon;
        options.tol = tol;
        options.max_iter = max_iter;
        const Measure<double> mu = read_side(x_in, a_in, pos_x, "x", "a", "positions_x");
        const Measure<double> nu = read_side(y_in, b_in, pos_y, "y", "b", "positions_y");
        WassersteinSolution r = without_gil([&](const auto& keep_going) {
          options.progress = [&](int, double) { return keep_going(); };
          try {
            return solve_wasserstein(mu, nu, p, options, pos_x.has_value());
          } catch (const InputError& e) {
            if (e.key() == "positions") throw InputError(e.source(), "positions_y", e.detail());
            throw;
          }
        });
        py::dict out;
        out["summary"] = to_python(wasserstein_summary(r, seconds_since(start)));
        out["value"] = r.result.value;
        out["reason"] = r.reason;
        out["warning"] = wasserstein_convergence_warning(r);
        return out;
      },
      py::arg("x"), py::arg("y"), py::arg("a") = py::none(), py::arg("b") = py::none(),
      py::arg("p") = 2.0, py::arg("method") = "auto", py::arg("epsilon") = 0.0,
      py::arg("tol") = 1e-9, py::arg("max_iter") = 10000, py::arg("positions_x") = py::none(),
      py::arg("positions_y") = py::none());
}

}  // namespace tokenflow::python
