// gaussian, meanfield, stability: the studies of the Gaussian closure, through the same readers
// (read_gaussian_setup, ...) and summary builders (gaussian_summary, ...) as the CLI commands.
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <type_traits>

#include "arrays.hpp"
#include "../../src/config/summary_documents.hpp"
#include "exports.hpp"
#include "json_to_python.hpp"
#include "tokenflow/gaussian.hpp"
#include "tokenflow/meanfield.hpp"
#include "tokenflow/readers.hpp"
#include "tokenflow/stability.hpp"
#include "tokenflow/summary.hpp"

namespace tokenflow::python {

namespace {

using Clock = std::chrono::steady_clock;

// F vectors of size d -> F x d; F d x d matrices -> F x d x d (C order).
py::array_t<double> stack(const std::vector<Eigen::VectorXd>& rows, py::ssize_t d) {
  py::array_t<double> out({static_cast<py::ssize_t>(rows.size()), d});
  double* dst = out.mutable_data();
  for (const auto& v : rows)
    for (Eigen::Index i = 0; i < v.size(); ++i) *dst++ = v[i];
  return out;
}

py::array_t<double> stack(const std::vector<Eigen::MatrixXd>& mats, py::ssize_t d) {
  py::array_t<double> out({static_cast<py::ssize_t>(mats.size()), d, d});
  double* dst = out.mutable_data();
  for (const auto& m : mats)
    for (Eigen::Index i = 0; i < m.rows(); ++i)
      for (Eigen::Index j = 0; j < m.cols(); ++j) *dst++ = m(i, j);
  return out;
}

// One member of every row, as a numpy array of the member's type (long -> int64, uint64 seeds
// exactly).
template <class Row, class T>
py::array column(const std::vector<Row>& rows, T Row::*field) {
  using Out =
      std::conditional_t<std::is_same_v<T, long> || std::is_same_v<T, int>, std::int64_t, T>;
  std::vector<Out> v;
  v.reserve(rows.size());
  for (const auto& r : rows) v.push_back(static_cast<Out>(r.*field));
  return to_numpy(std::move(v));
}

}  // namespace

void export_gaussian(py::module_& m) {
  m.def(
      "gaussian",
      [](const Config& source, py::object progress) {
        const auto start = Clock::now();
        const GaussianSetup setup = read_gaussian_setup(source);
        GaussianResult r = without_gil(
            [&](const auto& keep_going) {
              try {
                return solve_moments(setup.attention, setup.spec, setup.initial,
                                     [&](const Progress& p) { return keep_going(p.t, p.T, p.steps); });
              } catch (const InputError& e) {
                throw located_in(e, source);
              }
            },
            progress);
        const auto d = static_cast<py::ssize_t>(setup.initial.mean.size());
        py::dict out;
        out["summary"] = to_python(gaussian_summary(r, setup, seconds_since(start)));
        out["warnings"] = gaussian_warnings(r);
        out["means"] = stack(r.means, d);
        out["covs"] = stack(r.covs, d);
        out["times"] = to_numpy(std::move(r.times));
        return out;
      },
      py::arg("config"), py::arg("progress") = py::none());

  m.def(
      "meanfield",
      [](const Config& source, py::object progress) {
        const auto start = Clock::now();
        const MeanFieldSetup setup = read_meanfield_setup(source);
        MeanFieldResult r = without_gil(
            [&](const auto& keep_going) {
              try {
                return meanfield_study(setup.attention, setup.run, setup.initial, setup.spec,
                                       [&](double fraction) { return keep_going(fraction); });
              } catch (const InputError& e) {
                throw located_in(e, source);
              }
            },
            progress);
        py::dict table;  // the columns of meanfield.csv
        table["n"] = column(r.rows, &MeanFieldRow::n);
        table["sample"] = column(r.rows, &MeanFieldRow::sample);
        table["seed"] = column(r.rows, &MeanFieldRow::seed);
        std::vector<std::string> status;
        for (const auto& row : r.rows) status.push_back(row.status);
        table["status"] = status;
        table["mean_error"] = column(r.rows, &MeanFieldRow::mean_error);
        table["cov_error"] = column(r.rows, &MeanFieldRow::cov_error);
        table["bures_wasserstein"] = column(r.rows, &MeanFieldRow::bures_wasserstein);
        table["mean_error_from_sample"] = column(r.rows, &MeanFieldRow::mean_error_from_sample);
        table["cov_error_from_sample"] = column(r.rows, &MeanFieldRow::cov_error_from_sample);
        table["bures_wasserstein_from_sample"] =
            column(r.rows, &MeanFieldRow::bures_wasserstein_from_sample);
        table["seconds"] = column(r.rows, &MeanFieldRow::seconds);
        py::dict out;
        out["summary"] = to_python(meanfield_summary(r, setup, seconds_since(start)));
        out["table"] = table;
        return out;
      },
      py::arg("config"), py::arg("progress") = py::none());

  m.def(
      "stability",
      [](const Config& source, py::object progress) {
        const auto start = Clock::now();
        const StabilitySetup setup = read_stability_setup(source);
        StabilityResult r = without_gil(
            [&](const auto& keep_going) {
              try {
                return stability_study(setup.attention, setup.run, setup.initial, setup.spec,
                                       [&](double fraction) { return keep_going(fraction); });
              } catch (const InputError& e) {
                throw located_in(e, source);
              }
            },
            progress);
        py::dict table;  // the columns of stability.csv
        table["t"] = column(r.rows, &StabilityRow::t);
        table["w2"] = column(r.rows, &StabilityRow::w2);
        table["ratio"] = column(r.rows, &StabilityRow::ratio);
        std::vector<double> over_delta;  // as stability_csv computes it
        for (const auto& row : r.rows) over_delta.push_back(row.w2 / setup.spec.delta);
        table["w2_over_delta"] = to_numpy(std::move(over_delta));
        py::dict out;
        out["summary"] = to_python(stability_summary(r, setup, seconds_since(start)));
        out["table"] = table;
        return out;
      },
      py::arg("config"), py::arg("progress") = py::none());
}

}  // namespace tokenflow::python
