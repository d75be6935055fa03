// The Python module _tokenflow is gathered from one export_<concept>(module) per concept
// (HOOMD-blue style); each lives in export_<concept>.cpp and binds the same library API the CLI
// uses. The public, documented API is the pure-Python package tokenflow/ on top of it.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>

namespace tokenflow::python {

void export_errors(pybind11::module_& m);     // InputError -> tokenflow.InputError (a ValueError)
void export_config(pybind11::module_& m);     // Config: the TOML reader with strict keys
void export_dynamics(pybind11::module_& m);   // simulate
void export_attention(pybind11::module_& m);  // attention_matrix (the reference n x n weights)
void export_ot(pybind11::module_& m);         // sinkhorn, exact_ot
void export_gaussian(pybind11::module_& m);   // gaussian, meanfield, stability
void export_model(pybind11::module_& m);      // train, SinkhornTransformer (load, couple, save)
void export_threads(pybind11::module_& m);    // the parallel loops' threads (tokenflow/parallel.hpp)


// Seconds elapsed since start (the wall_seconds of the summaries the exports return).
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace tokenflow::python
