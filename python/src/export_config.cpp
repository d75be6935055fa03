// Config: the same TOML reader the CLI uses (strict keys, typed getters, named errors).
#include <pybind11/stl.h>

#include "exports.hpp"
#include "tokenflow/attention.hpp"
#include "tokenflow/command_keys.hpp"
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

  // The schema of a command's keys (tokenflow/command_keys.hpp), as Python's tokenflow.config_keys.
  m.def(
      "config_keys",
      [](const std::string& command) {
        py::list out;
        for (const KeySpec& k : command_keys(command).keys) {
          if (k.hidden) continue;
          py::dict d;
          d["key"] = k.key;
          d["type"] = key_type_name(k.type);
          d["default"] = k.default_text;
          d["choices"] = k.choices;
          d["range"] = key_range_text(k);
          d["unit"] = k.unit;
          d["doc"] = k.doc;
          out.append(d);
        }
        return out;
      },
      py::arg("command"));

  // The registry of attention kinds (tokenflow/attention.hpp), as Python's tokenflow.attention_kinds.
  m.def("attention_kinds", [] {
    py::list out;
    for (const AttentionKindInfo& info : attention_kinds()) {
      py::dict d;
      d["name"] = info.name;
      d["weights"] = info.weights;
      d["normalized"] = info.normalized;
      d["gaussian_closure"] = info.gaussian_closure;
      out.append(d);
    }
    return out;
  });
}

}  // namespace tokenflow::python
