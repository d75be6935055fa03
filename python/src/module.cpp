// _tokenflow: the compiled half of the Python package (see exports.hpp).
#include "exports.hpp"

PYBIND11_MODULE(_tokenflow, m) {
  m.doc() = "tokenflow's compiled core (use the tokenflow package, not this module)";
  m.attr("__version__") = TOKENFLOW_VERSION;
  tokenflow::python::export_errors(m);
  tokenflow::python::export_config(m);
  tokenflow::python::export_dynamics(m);
  tokenflow::python::export_attention(m);
  tokenflow::python::export_ot(m);
  tokenflow::python::export_gaussian(m);
  tokenflow::python::export_model(m);
  tokenflow::python::export_threads(m);
}
