// numpy <-> Eigen for the bindings, and running library code without the GIL.
//
// In: py::array_t<double, c_style | forcecast> takes a float64 C-contiguous array as it is (no
// copy) and converts anything else once; the library then copies it into its own types where it
// keeps them (Measure, cost matrices), never twice. Out: results are moved into heap objects owned
// by a capsule that is the numpy array's base, so returning them copies nothing.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <Eigen/Core>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/memory_budget.hpp"

namespace tokenflow::python {

namespace py = pybind11;

using InArray = py::array_t<double, py::array::c_style | py::array::forcecast>;
using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A view of a 2-D array (n x d); a 1-D array of length n is read as n x 1.
inline Eigen::Map<const RowMatrix> as_matrix(const InArray& a, const std::string& name) {
  if (a.ndim() == 1) return {a.data(), a.shape(0), 1};
  if (a.ndim() != 2)
    throw InputError("", name, "must be a 2-D array (rows x columns), not " + std::to_string(a.ndim()) + "-D");
  return {a.data(), a.shape(0), a.shape(1)};
}

// A view of a 1-D array (n x 1 and 1 x n are accepted too).
inline Eigen::Map<const Eigen::VectorXd> as_vector(const InArray& a, const std::string& name) {
  if (a.ndim() == 1 || (a.ndim() == 2 && (a.shape(0) == 1 || a.shape(1) == 1)))
    return {a.data(), static_cast<Eigen::Index>(a.size())};
  throw InputError("", name, "must be a 1-D array, not of shape " + std::to_string(a.shape(0)) + " x " +
                                 std::to_string(a.ndim() > 1 ? a.shape(1) : 1));
}

// Refuses (InputError on `name`) a computation that would hold `bytes` at once when that is more
// than the machine's physical memory, before anything is allocated; `what` says what it would hold
// ("the 3000000 x 3000000 attention matrix").
inline void check_fits_in_memory(const std::string& name, long double bytes, const std::string& what) {
  check_memory(bytes, what, "", name);
}

// Moves a row-major matrix or a vector into a numpy array that owns it (no copy).
template <class M>
py::array to_numpy(M&& value) {
  using Matrix = std::decay_t<M>;
  using Scalar = typename Matrix::Scalar;
  auto* owned = new Matrix(std::forward<M>(value));
  py::capsule owner(owned, [](void* p) { delete static_cast<Matrix*>(p); });
  const auto s = static_cast<py::ssize_t>(sizeof(Scalar));
  if constexpr (Matrix::ColsAtCompileTime == 1) {
    return py::array_t<Scalar>({static_cast<py::ssize_t>(owned->size())}, {s}, owned->data(), owner);
  } else {
    static_assert(Matrix::IsRowMajor, "results go to numpy in C order");
    return py::array_t<Scalar>({static_cast<py::ssize_t>(owned->rows()), static_cast<py::ssize_t>(owned->cols())},
                               {static_cast<py::ssize_t>(owned->cols()) * s, s}, owned->data(), owner);
  }
}

template <class T>
py::array to_numpy(std::vector<T>&& values) {
  auto* owned = new std::vector<T>(std::move(values));
  py::capsule owner(owned, [](void* p) { delete static_cast<std::vector<T>*>(p); });
  return py::array_t<T>({static_cast<py::ssize_t>(owned->size())}, {static_cast<py::ssize_t>(sizeof(T))},
                        owned->data(), owner);
}

// Runs work(keep_going) with the GIL released. keep_going(args...) is what the library's progress
// callbacks return: it takes the GIL for a moment, runs Python's signal handlers
// (PyErr_CheckSignals) and then, when `progress` is not None, calls progress(args...). When either
// raised (Ctrl-C: KeyboardInterrupt, or the callback's own exception) it returns false, the
// library throws tokenflow::Cancelled, and the pending Python exception is raised instead.
template <class Work>
auto without_gil(Work&& work, const py::object& progress = py::none()) {
  bool raised = false;
  auto keep_going = [&raised, &progress](const auto&... args) -> bool {
    if (raised) return false;
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      raised = true;
    } else if (!progress.is_none()) {
      try {
        progress(args...);
      } catch (py::error_already_set& e) {
        e.restore();  // raised again below, once the library has unwound
        raised = true;
      }
    }
    return !raised;
  };
  try {
    py::gil_scoped_release release;
    return work(keep_going);
  } catch (const Cancelled&) {
    if (raised) throw py::error_already_set();  // the GIL is held again here
    throw;
  }
}

}  // namespace tokenflow::python
