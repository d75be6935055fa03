// Config: the same TOML reader the CLI uses (strict keys, typed getters, named errors).
#include <pybind11/stl.h>

#include "exports.hpp"
#include "tokenflow/config.hpp"

namespace tokenflow::python {

namespace py = pybind11;

void export_config(py::module_& m) {
  py::class_<Config>(m, "Config")
      .def(py::init<>())
      .def_static("from_text", &Config::from_text, py::arg("toml_text"), py::arg("source"))
      .def_static("from_file", &Config::from_file, py::arg("path"))
      .def("set", &Config::set, py::arg("assignment"))
      .def("has", &Config::has, py::arg("key"))
      .def("to_toml", &Config::to_toml)
      .def_property_readonly("source", &Config::source);
}

}  // namespace tokenflow::python
