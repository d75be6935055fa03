// The threads of the library's parallel loops (tokenflow/parallel.hpp and OpenMP's thread count),
// for tokenflow.thread_policy / set_thread_policy (python/tokenflow/_threads.py).
#include <omp.h>

#include "exports.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/parallel.hpp"

namespace tokenflow::python {

namespace py = pybind11;

void export_threads(py::module_& m) {
  m.def("parallel_min_pairs", &parallel_min_pairs);
  m.def("set_parallel_min_pairs", &set_parallel_min_pairs, py::arg("pairs"));
  // OpenMP's thread count for the parallel regions this (the calling) thread starts.
  m.def("max_threads", [] { return omp_get_max_threads(); });
  m.def("set_max_threads", [](int threads) {
    if (threads < 1) throw InputError("", "threads", "must be at least 1");
    omp_set_num_threads(threads);
  }, py::arg("threads"));
  m.def("processors", [] { return omp_get_num_procs(); });
  m.def("adaptive_threads", &adaptive_threads);
  m.def("set_adaptive_threads", &set_adaptive_threads, py::arg("on"));
}

}  // namespace tokenflow::python
