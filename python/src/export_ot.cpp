// sinkhorn and exact_ot between two weighted point clouds (include/tokenflow/ot.hpp).
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "arrays.hpp"
#include "exports.hpp"
#include "tokenflow/measure.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow::python {

namespace {

// Above this many cost entries the cost is recomputed on the fly (OnlineSoftMin, memory O(n + m))
// instead of held (DenseSoftMin keeps C and C^T: 16 bytes an entry, 256 MiB at the limit), and the
// plan is not formed unless asked for.
constexpr Eigen::Index kDenseCostEntries = Eigen::Index{1} << 24;

struct WeightedPoints {
  RowMatrix points;
  Eigen::VectorXd weights;  // normalized to sum 1
};

// Checks points and weights like a Measure (finite, positive, normalized); errors name the
// arguments (x and a, or y and b).
WeightedPoints read_side(const InArray& points, const std::optional<InArray>& weights, const std::string& x_name,
                         const std::string& w_name) {
  try {
    Measure<double> mu = make_measure<double>(Points<double>(as_matrix(points, x_name)),
                                              weights ? Eigen::VectorXd(as_vector(*weights, w_name)) : Eigen::VectorXd());
    return {std::move(mu.points), std::move(mu.weights)};
  } catch (const InputError& e) {
    throw InputError(e.source(), e.key() == "points" ? x_name : e.key() == "weights" ? w_name : e.key(), e.detail());
  }
}

void check_dimensions(const WeightedPoints& x, const WeightedPoints& y) {
  if (x.points.cols() != y.points.cols())
    throw InputError("", "y", "points of dimension " + std::to_string(y.points.cols()) +
                                  " cannot be compared with points of dimension " + std::to_string(x.points.cols()));
}

RowMatrix cost_matrix(const RowMatrix& x, const RowMatrix& y, CostKind cost) {
  RowMatrix c(x.rows(), y.rows());
#pragma omp parallel for schedule(static)
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (Eigen::Index j = 0; j < y.rows(); ++j) c(i, j) = pair_cost(cost, &x(i, 0), &y(j, 0), x.cols());
  return c;
}

double marginal_error(const RowMatrix& plan, const Eigen::VectorXd& a, const Eigen::VectorXd& b) {
  return (plan.rowwise().sum() - a).lpNorm<1>() + (plan.colwise().sum().transpose() - b).lpNorm<1>();
}

}  // namespace

void export_ot(py::module_& m) {
  m.def(
      "sinkhorn",
      [](const InArray& x_in, const InArray& y_in, std::optional<InArray> a_in, std::optional<InArray> b_in,
         double epsilon, const std::string& cost_name, double tol, int max_iter, std::optional<bool> plan) {
        const CostKind cost = cost_kind_from_string(cost_name);
        WeightedPoints x = read_side(x_in, a_in, "x", "a"), y = read_side(y_in, b_in, "y", "b");
        check_dimensions(x, y);
        const Eigen::Index entries = x.points.rows() * y.points.rows();
        SinkhornOptions options;
        options.epsilon = epsilon;
        options.tol = tol;
        options.max_iter = max_iter;
        options.want_plan = plan.value_or(entries <= kDenseCostEntries);
        SinkhornResult r = without_gil([&](const auto& keep_going) {
          options.progress = [&](int, double) { return keep_going(); };
          std::unique_ptr<SoftMin> op;
          if (entries <= kDenseCostEntries) op = std::make_unique<DenseSoftMin>(cost_matrix(x.points, y.points, cost));
          else op = std::make_unique<OnlineSoftMin>(std::move(x.points), std::move(y.points), cost);
          return sinkhorn(*op, x.weights, y.weights, options);
        });
        py::dict out;
        out["plan"] = options.want_plan ? py::object(to_numpy(std::move(r.plan))) : py::none();
        out["f"] = to_numpy(std::move(r.f));
        out["g"] = to_numpy(std::move(r.g));
        out["cost"] = r.cost;
        out["objective"] = r.objective;
        out["iterations"] = r.iterations;
        out["marginal_error"] = r.marginal_error;
        out["converged"] = r.converged;
        out["a"] = to_numpy(std::move(x.weights));
        out["b"] = to_numpy(std::move(y.weights));
        return out;
      },
      py::arg("x"), py::arg("y"), py::arg("a") = py::none(), py::arg("b") = py::none(), py::arg("epsilon") = 0.1,
      py::arg("cost") = "sqeuclidean", py::arg("tol") = 1e-9, py::arg("max_iter") = 10000,
      py::arg("plan") = py::none());

  m.def(
      "exact_ot",
      [](const InArray& x_in, const InArray& y_in, std::optional<InArray> a_in, std::optional<InArray> b_in,
         const std::string& cost_name) {
        const CostKind cost = cost_kind_from_string(cost_name);
        WeightedPoints x = read_side(x_in, a_in, "x", "a"), y = read_side(y_in, b_in, "y", "b");
        check_dimensions(x, y);
        ExactOTResult r = without_gil([&](const auto&) { return exact_ot(cost_matrix(x.points, y.points, cost), x.weights, y.weights); });
        py::dict out;
        out["marginal_error"] = marginal_error(r.plan, x.weights, y.weights);
        out["plan"] = to_numpy(std::move(r.plan));
        out["f"] = to_numpy(std::move(r.f));
        out["g"] = to_numpy(std::move(r.g));
        out["cost"] = r.cost;
        out["a"] = to_numpy(std::move(x.weights));
        out["b"] = to_numpy(std::move(y.weights));
        return out;
      },
      py::arg("x"), py::arg("y"), py::arg("a") = py::none(), py::arg("b") = py::none(),
      py::arg("cost") = "sqeuclidean");
}

}  // namespace tokenflow::python
