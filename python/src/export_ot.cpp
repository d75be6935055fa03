// sinkhorn, exact_ot and wasserstein between two weighted point clouds, through the same library
// calls as `tokenflow ot` and `tokenflow wasserstein` (include/tokenflow/ot_solve.hpp): the same
// option checks, the same operator choice, the same summary.json.
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <string>
#include <optional>

#include "../../src/config/summary_documents.hpp"
#include "arrays.hpp"
#include "exports.hpp"
#include "json_to_python.hpp"
#include "tokenflow/measure.hpp"
#include "tokenflow/ot_batch.hpp"
#include "tokenflow/plan_adjoint.hpp"
#include "tokenflow/ot_solve.hpp"

namespace tokenflow::python {

namespace {

// "[k]", the label of a batch's k-th argument in errors. Appended, not a + chain: GCC 12 -O3
// reports a false -Wrestrict on "[" + std::to_string(k).
std::string index_label(std::size_t k) {
  std::string at = "[";
  at += std::to_string(k);
  at += "]";
  return at;
}

using Clock = std::chrono::steady_clock;

// A measure from the arguments (checked and normalized by make_transport_measure, as the CLI's files are;
// not normalized when `normalize` is false: unbalanced transport keeps the masses); errors name the
// arguments (x, a, positions_x or y, b, positions_y).
Measure<double> read_side(const InArray& points, const std::optional<InArray>& weights,
                          const std::optional<InArray>& positions, const std::string& x_name,
                          const std::string& w_name, const std::string& p_name, bool normalize = true) {
  try {
    return make_transport_measure(
        Points<double>(as_matrix(points, x_name)),
        weights ? Eigen::VectorXd(as_vector(*weights, w_name)) : Eigen::VectorXd(),
        positions ? Eigen::VectorXd(as_vector(*positions, p_name)) : Eigen::VectorXd(), normalize);
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

// The weights of one side of a cost-matrix problem, checked and normalized (unless `normalize` is
// false) as for points (by make_transport_measure, with `count` placeholder points); errors name the argument.
Measure<double> matrix_side(Eigen::Index count, const std::optional<InArray>& weights, const std::string& w_name,
                            bool normalize) {
  try {
    return make_transport_measure(Points<double>::Zero(count, 1),
                                weights ? Eigen::VectorXd(as_vector(*weights, w_name)) : Eigen::VectorXd(),
                                Eigen::VectorXd(), normalize);
  } catch (const InputError& e) {
    throw InputError(e.source(), e.key() == "weights" ? w_name : e.key(), e.detail());
  }
}

// One call's result as it crosses into Python: the library's own structs (bound as classes below,
// so a field the CLI reports is a field Python reads), the summary.json document the CLI writes
// for the same input, the convergence warning the CLI prints, and the weights used.
struct OTRun {
  OTSolution solution;  // its arrays moved into the numpy arrays below (no copy)
  nlohmann::json summary;
  std::string warning;
  py::object plan, f, g, a, b;  // plan: None when not formed
};

struct WassersteinRun {
  WassersteinSolution solution;
  nlohmann::json summary;
  std::string warning;
};

// A cost-matrix problem as `tokenflow ot --cost-matrix` reads one: real entries, +inf for a
// forbidden pair (solve_ot checks that every bin keeps an allowed pair), weights checked and
// normalized (unless `normalize` is false: unbalanced) as for points (placeholder points of the
// right count); errors name M_name, a_name and b_name.
CostMatrixProblem matrix_problem(const InArray& M_in, const std::optional<InArray>& a_in,
                                const std::optional<InArray>& b_in, const std::string& M_name,
                                const std::string& a_name, const std::string& b_name, bool normalize) {
  const auto M = as_matrix(M_in, M_name);
  if (M.rows() == 0 || M.cols() == 0) throw InputError("", M_name, "is empty");
  for (Eigen::Index i = 0; i < M.rows(); ++i)
    for (Eigen::Index j = 0; j < M.cols(); ++j)
      if (std::isnan(M(i, j)) || M(i, j) == -INFINITY)
        throw InputError("", M_name, "invalid value " + std::string(std::isnan(M(i, j)) ? "nan" : "-inf") +
                                         " at row " + std::to_string(i) + ", column " + std::to_string(j) +
                                         " (accepted: real costs, +inf for a forbidden pair)");
  CostMatrixProblem p;
  p.cost = M;
  p.a = matrix_side(M.rows(), a_in, a_name, normalize).weights;
  p.b = matrix_side(M.cols(), b_in, b_name, normalize).weights;
  return p;
}

// A solution as it crosses into Python (the arrays moved, not copied), with the weights used.
OTRun make_run(OTSolution r, const Eigen::VectorXd& a, const Eigen::VectorXd& b, double wall_seconds) {
  OTRun run;
  run.summary = ot_summary(r, wall_seconds);
  run.warning = ot_convergence_warning(r);
  run.plan = r.plan_formed ? py::object(to_numpy(std::move(r.plan))) : py::object(py::none());
  run.f = to_numpy(std::move(r.f));
  run.g = to_numpy(std::move(r.g));
  run.a = to_numpy(Eigen::VectorXd(a));
  run.b = to_numpy(Eigen::VectorXd(b));
  run.solution = std::move(r);
  return run;
}

// Python's flat names for the fields of an options struct's `sinkhorn` member (the one Sinkhorn
// options type, ot.hpp): options.epsilon reads and writes options.sinkhorn.epsilon.
template <class Options = OTSolveOptions, class Field>
auto sinkhorn_get(Field SinkhornOptions::*field) {
  return [field](const Options& o) { return o.sinkhorn.*field; };
}
template <class Options = OTSolveOptions, class Field>
auto sinkhorn_set(Field SinkhornOptions::*field) {
  return [field](Options& o, Field value) { o.sinkhorn.*field = value; };
}

// The options of `tokenflow ot` and the result classes of sinkhorn / exact_ot.
void export_ot_classes(py::module_& m) {
  // The options of `tokenflow ot`, the library's struct itself: Python sets its fields by name, so
  // a field the CLI has is one Python has (a renamed one fails loudly), and check_ot_options is the
  // one check of both.
  py::class_<OTSolveOptions>(m, "OTOptions")
      .def(py::init<>())
      .def_readwrite("method", &OTSolveOptions::method)
      .def_property("epsilon", sinkhorn_get(&SinkhornOptions::epsilon),
                    sinkhorn_set(&SinkhornOptions::epsilon))
      .def_property("marginal_penalty", sinkhorn_get(&SinkhornOptions::marginal_penalty),
                    sinkhorn_set(&SinkhornOptions::marginal_penalty))
      .def_property("tol", sinkhorn_get(&SinkhornOptions::tol), sinkhorn_set(&SinkhornOptions::tol))
      .def_property("max_iter", sinkhorn_get(&SinkhornOptions::max_iter),
                    sinkhorn_set(&SinkhornOptions::max_iter))
      .def_readwrite("epsilon_start", &OTSolveOptions::epsilon_start)
      .def_property("epsilon_decay", sinkhorn_get(&SinkhornOptions::epsilon_decay),
                    sinkhorn_set(&SinkhornOptions::epsilon_decay))
      .def_readwrite("operator", &OTSolveOptions::op)
      .def_property("overrelaxation", sinkhorn_get(&SinkhornOptions::overrelaxation),
                    sinkhorn_set(&SinkhornOptions::overrelaxation))
      .def_readwrite("divergence", &OTSolveOptions::divergence)
      .def_readwrite("plan", &OTSolveOptions::want_plan);

  // The solver's result struct itself (include/tokenflow/ot_solve.hpp), read-only; its arrays are
  // OTRun's.
  py::class_<OTSolution>(m, "OTSolution")
      .def_readonly("method", &OTSolution::method)
      .def_readonly("status", &OTSolution::status)
      .def_readonly("reason", &OTSolution::reason)
      .def_readonly("cost", &OTSolution::cost)
      .def_readonly("objective", &OTSolution::objective)
      .def_readonly("marginal_penalty", &OTSolution::marginal_penalty)
      .def_readonly("plan_mass", &OTSolution::plan_mass)
      .def_readonly("iterations", &OTSolution::iterations)
      .def_readonly("marginal_error", &OTSolution::marginal_error)
      .def_readonly("converged", &OTSolution::converged)
      .def_readonly("rounding_floor", &OTSolution::rounding_floor)
      .def_readonly("epsilon_reached", &OTSolution::epsilon_reached)
      .def_readonly("divergence", &OTSolution::divergence)
      .def_readonly("divergence_pot", &OTSolution::divergence_pot);

  py::class_<OTRun>(m, "OTRun")
      .def_readonly("solution", &OTRun::solution)
      .def_property_readonly("summary", [](const OTRun& r) { return to_python(r.summary); })
      .def_readonly("warning", &OTRun::warning)
      .def_readonly("plan", &OTRun::plan)
      .def_readonly("f", &OTRun::f)
      .def_readonly("g", &OTRun::g)
      .def_readonly("a", &OTRun::a)
      .def_readonly("b", &OTRun::b);
}

// ot(x, y, a, b, cost, options, M, progress): one problem, from points or a cost matrix.
void export_ot_solve(py::module_& m) {
  m.def(
      "ot",
      [](std::optional<InArray> x_in, std::optional<InArray> y_in, std::optional<InArray> a_in,
         std::optional<InArray> b_in, const std::string& cost_name, OTSolveOptions options,
         std::optional<InArray> M_in, py::object progress) {
        const auto start = Clock::now();
        const bool matrix = M_in.has_value();
        if (matrix && (x_in || y_in))
          throw InputError("", "M", "give either the points x and y or the cost matrix M, not both");
        if (!matrix && !(x_in && y_in)) throw InputError("", x_in ? "y" : "x", "is required (or give M)");
        const CostKind cost = matrix ? CostKind::sqeuclidean : cost_kind_from_string(cost_name);
        check_ot_options(options, matrix, cost);
        Measure<double> mu, nu;
        CostMatrix C;
        const bool normalize = std::isinf(options.sinkhorn.marginal_penalty);  // unbalanced: masses kept
        if (matrix) {
          CostMatrixProblem p = matrix_problem(*M_in, a_in, b_in, "M", "a", "b", normalize);
          C = std::move(p.cost);
          mu.weights = std::move(p.a);
          nu.weights = std::move(p.b);
        } else {
          mu = read_side(*x_in, a_in, std::nullopt, "x", "a", "positions_x", normalize);
          nu = read_side(*y_in, b_in, std::nullopt, "y", "b", "positions_y", normalize);
        }
        OTSolution r = without_gil(
            [&](const auto& keep_going) {
              options.sinkhorn.progress = [&](int iteration, double error) {
                return keep_going(iteration, error);
              };
              return matrix ? solve_ot(std::move(C), mu.weights, nu.weights, options)
                            : solve_ot(mu, nu, cost, options);
            },
            progress);
        return make_run(std::move(r), mu.weights, nu.weights, seconds_since(start));
      },
      py::arg("x"), py::arg("y"), py::arg("a"), py::arg("b"), py::arg("cost"), py::arg("options"),
      py::arg("M") = py::none(), py::arg("progress") = py::none());
}

// ot_batch(M, a, b, options, progress, symmetric): cost-matrix problems (lists of equal length,
// sizes free) solved concurrently (solve_ot_batch), each exactly as ot(M=M[k], a=a[k], b=b[k])
// solves it; a list of OTRun. symmetric (a list of bools, or empty): problem k is the
// self-transport OT_eps(a, a) of a symmetric M[k] (b[k] is a[k]), solved by the symmetric loop.
// Errors name the argument and index ("M[3]").
void export_ot_batch(py::module_& m) {
  m.def(
      "ot_batch",
      [](const std::vector<InArray>& M_in, const std::vector<std::optional<InArray>>& a_in,
         const std::vector<std::optional<InArray>>& b_in, OTSolveOptions options, py::object progress,
         const std::vector<bool>& symmetric) {
        const auto start = Clock::now();
        if (a_in.size() != M_in.size() || b_in.size() != M_in.size())
          throw InputError("", a_in.size() != M_in.size() ? "a" : "b",
                           "one weight vector (or None) per cost matrix: " + std::to_string(M_in.size()) +
                               " matrices, " + std::to_string(a_in.size()) + " a, " + std::to_string(b_in.size()) +
                               " b");
        check_ot_options(options, true, CostKind::sqeuclidean);
        std::vector<CostMatrixProblem> problems;
        problems.reserve(M_in.size());
        for (std::size_t k = 0; k < M_in.size(); ++k) {
          const std::string at = index_label(k);
          problems.push_back(matrix_problem(M_in[k], a_in[k], b_in[k], "M" + at, "a" + at, "b" + at,
                                            std::isinf(options.sinkhorn.marginal_penalty)));
          problems.back().symmetric = k < symmetric.size() && symmetric[k];
        }
        std::vector<OTSolution> solutions = without_gil(
            [&](const auto& keep_going) {
              options.sinkhorn.progress = [&](int iteration, double error) {
                return keep_going(iteration, error);
              };
              return solve_ot_batch(problems, options);
            },
            progress);
        const double seconds = seconds_since(start);
        std::vector<OTRun> runs;
        runs.reserve(solutions.size());
        for (std::size_t k = 0; k < solutions.size(); ++k)
          runs.push_back(make_run(std::move(solutions[k]), problems[k].a, problems[k].b, seconds));
        return runs;
      },
      py::arg("M"), py::arg("a"), py::arg("b"), py::arg("options"), py::arg("progress") = py::none(),
      py::arg("symmetric") = std::vector<bool>());
}

// plan_adjoint_batch(plans, weighted): for each converged plan pi (n x m, every row and column sum
// positive) and P = G o pi of its shape, (w1, w2) of the adjoint system (tokenflow/plan_adjoint.hpp,
// gauge w2[m - 1] = 0), the problems solved concurrently: the backward pass of tokenflow.torch's plans.
namespace {

// Views of the numpy arrays (kept alive by the arguments), checked pairwise.
void plan_problems(const std::vector<InArray>& plans_in, const std::vector<InArray>& weighted_in,
                   std::vector<PlanView>& plans, std::vector<PlanView>& weighted) {
  if (weighted_in.size() != plans_in.size())
    throw InputError("", "weighted", "one G o plan per plan: " + std::to_string(plans_in.size()) + " plans, " +
                                         std::to_string(weighted_in.size()) + " G o plan");
  plans.reserve(plans_in.size());
  weighted.reserve(plans_in.size());
  for (std::size_t k = 0; k < plans_in.size(); ++k) {
    const std::string at = index_label(k);
    const auto pi = as_matrix(plans_in[k], "plans" + at), P = as_matrix(weighted_in[k], "weighted" + at);
    if (pi.size() == 0 || P.rows() != pi.rows() || P.cols() != pi.cols())
      throw InputError("", "weighted" + at, "must have the plan's shape, " + std::to_string(pi.rows()) + " x " +
                                                std::to_string(pi.cols()) + " (non-empty)");
    plans.emplace_back(pi);
    weighted.emplace_back(P);
  }
}

}  // namespace

void export_plan_adjoint(py::module_& m) {
  // plan_cost_gradient_batch(plans, weighted): D = pi o (w1 + w2^T) - P of each system, computed
  // without the potentials (tokenflow/plan_adjoint.hpp): tokenflow.torch's dL/dC = D / eps.
  m.def(
      "plan_cost_gradient_batch",
      [](const std::vector<InArray>& plans_in, const std::vector<InArray>& weighted_in) {
        std::vector<PlanView> plans, weighted;
        plan_problems(plans_in, weighted_in, plans, weighted);
        std::vector<PlanMatrix> out;
        {
          py::gil_scoped_release release;
          out = plan_cost_gradient_batch(plans, weighted);
        }
        py::list result;
        for (PlanMatrix& D : out) result.append(to_numpy(std::move(D)));
        return result;
      },
      py::arg("plans"), py::arg("weighted"));
  m.def(
      "plan_adjoint_batch",
      [](const std::vector<InArray>& plans_in, const std::vector<InArray>& weighted_in) {
        std::vector<PlanView> plans, weighted;
        plan_problems(plans_in, weighted_in, plans, weighted);
        std::vector<PlanAdjoint> out;
        {
          py::gil_scoped_release release;
          out = plan_adjoint_batch(plans, weighted);
        }
        py::list result;
        for (PlanAdjoint& w : out) result.append(py::make_tuple(to_numpy(std::move(w.w1)), to_numpy(std::move(w.w2))));
        return result;
      },
      py::arg("plans"), py::arg("weighted"));
}

// wasserstein(x, y, a, b, p, options, positions_x, positions_y, progress).
void export_wasserstein(py::module_& m) {
  py::class_<WassersteinOptions>(m, "WassersteinOptions")
      .def(py::init<>())
      .def_property(
          "method", [](const WassersteinOptions& o) { return std::string(to_string(o.method)); },
          [](WassersteinOptions& o, const std::string& name) {
            o.method = wasserstein_method_from_string(name);
          })
      .def_property("epsilon", sinkhorn_get<WassersteinOptions>(&SinkhornOptions::epsilon),
                    sinkhorn_set<WassersteinOptions>(&SinkhornOptions::epsilon))
      .def_property("tol", sinkhorn_get<WassersteinOptions>(&SinkhornOptions::tol),
                    sinkhorn_set<WassersteinOptions>(&SinkhornOptions::tol))
      .def_property("max_iter", sinkhorn_get<WassersteinOptions>(&SinkhornOptions::max_iter),
                    sinkhorn_set<WassersteinOptions>(&SinkhornOptions::max_iter));

  py::class_<WassersteinRun>(m, "WassersteinRun")
      .def_property_readonly("value", [](const WassersteinRun& r) { return r.solution.result.value; })
      .def_property_readonly("reason", [](const WassersteinRun& r) { return r.solution.reason; })
      .def_property_readonly("summary", [](const WassersteinRun& r) { return to_python(r.summary); })
      .def_readonly("warning", &WassersteinRun::warning);

  m.def(
      "wasserstein",
      [](const InArray& x_in, const InArray& y_in, std::optional<InArray> a_in, std::optional<InArray> b_in,
         double p, WassersteinOptions options, std::optional<InArray> pos_x, std::optional<InArray> pos_y,
         py::object progress) {
        const auto start = Clock::now();
        if (pos_x.has_value() != pos_y.has_value())
          throw InputError("", pos_x ? "positions_y" : "positions_x",
                           "conditional W_p needs both positions_x and positions_y");
        const Measure<double> mu = read_side(x_in, a_in, pos_x, "x", "a", "positions_x");
        const Measure<double> nu = read_side(y_in, b_in, pos_y, "y", "b", "positions_y");
        WassersteinSolution r = without_gil(
            [&](const auto& keep_going) {
              options.sinkhorn.progress = [&](int iteration, double error) {
                return keep_going(iteration, error);
              };
              try {
                return solve_wasserstein(mu, nu, p, options, pos_x.has_value());
              } catch (const InputError& e) {
                if (e.key() == "positions") throw InputError(e.source(), "positions_y", e.detail());
                throw;
              }
            },
            progress);
        WassersteinRun run;
        run.summary = wasserstein_summary(r, seconds_since(start));
        run.warning = wasserstein_convergence_warning(r);
        run.solution = std::move(r);
        return run;
      },
      py::arg("x"), py::arg("y"), py::arg("a"), py::arg("b"), py::arg("p"), py::arg("options"),
      py::arg("positions_x"), py::arg("positions_y"), py::arg("progress") = py::none());
}

}  // namespace

void export_ot(py::module_& m) {
  export_ot_classes(m);
  export_ot_solve(m);
  export_ot_batch(m);
  export_plan_adjoint(m);
  export_wasserstein(m);
}

}  // namespace tokenflow::python
