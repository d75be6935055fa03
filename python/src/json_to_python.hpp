// A summary's JSON document as Python objects (dict, list, int, float, str, bool, None), with what
// json.loads gives for the same document's text: a non-finite number is None (JSON has no inf or
// nan; the CLI's summary.json writes null), and keys keep the document's (sorted) order.
#pragma once

#include <pybind11/pybind11.h>

#include <cmath>
#include <nlohmann/json.hpp>

namespace tokenflow::python {

inline pybind11::object to_python(const nlohmann::json& j) {
  namespace py = pybind11;
  switch (j.type()) {
    case nlohmann::json::value_t::object: {
      py::dict d;
      for (const auto& [key, value] : j.items()) d[py::str(key)] = to_python(value);
      return py::object(std::move(d));
    }
    case nlohmann::json::value_t::array: {
      py::list l;
      for (const auto& value : j) l.append(to_python(value));
      return py::object(std::move(l));
    }
    case nlohmann::json::value_t::string:
      return py::str(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::boolean:
      return py::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return py::int_(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return py::int_(j.get<std::uint64_t>());
    case nlohmann::json::value_t::number_float: {
      const double v = j.get<double>();
      return std::isfinite(v) ? py::object(py::float_(v)) : py::object(py::none());
    }
    default:  // null, and the kinds a summary never holds (binary, discarded)
      return py::none();
  }
}

}  // namespace tokenflow::python
