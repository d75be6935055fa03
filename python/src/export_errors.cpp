// tokenflow::InputError -> tokenflow.InputError, a subclass of ValueError whose message is the
// CLI's error line (without "tokenflow: "), with the parts as attributes source, key, detail.
// tokenflow::NumericalFailure (a computation the arithmetic could not carry: a non-finite or
// non-coupling result) -> FloatingPointError, never a non-finite array.
// Messages may quote a user's path that is not UTF-8 (a folder named in Latin-1): the text is
// decoded with \xNN escapes for such bytes, and `source` with surrogate escapes, so that
// os.fsencode(error.source) gives the path's bytes back; never a UnicodeDecodeError instead.
//
// The memory estimate that python/tokenflow/_inputs.py asks before allocating is the library's
// check_memory (tokenflow/memory_budget.hpp: physical memory, control group, ulimit -v,
// TOKENFLOW_MEMORY_LIMIT), as arrays.hpp's check_fits_in_memory and every command use it.
#include "exports.hpp"
#include "tokenflow/echo.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/input_file.hpp"
#include "tokenflow/memory_budget.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow::python {

namespace py = pybind11;

namespace {

// `text` as a Python str, bytes that are not UTF-8 decoded by `errors` ("backslashreplace" for
// messages, "surrogateescape" for paths).
py::object decoded(const std::string& text, const char* errors) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), errors);
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(s);
}

}  // namespace

void export_errors(py::module_& m) {
  // Never destroyed: it must outlive the interpreter's last use of it.
  static auto* input_error = new py::exception<InputError>(m, "InputError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InputError& e) {
      py::object error = py::reinterpret_borrow<py::object>(input_error->ptr())(
          decoded(bounded_line(e.what()), "backslashreplace"));
      error.attr("source") = decoded(e.source(), "surrogateescape");
      error.attr("key") = decoded(e.key(), "backslashreplace");
      error.attr("detail") = decoded(e.detail(), "backslashreplace");
      PyErr_SetObject(input_error->ptr(), error.ptr());
    } catch (const NumericalFailure& e) {
      const py::object message = decoded(bounded_line(e.what()), "backslashreplace");
      PyErr_SetObject(PyExc_FloatingPointError, message.ptr());
    }
  });
  m.def("physical_memory_bytes", &physical_memory_bytes, "The machine's physical memory in bytes");
  m.def("memory_limit_bytes", &memory_limit_bytes,
        "The bytes a computation may hold at once: the bound every allocation is checked against");
  m.def(
      "check_memory",
      [](const std::string& name, double bytes, const std::string& what) {
        check_memory(static_cast<long double>(bytes), what, "", name);
      },
      py::arg("name"), py::arg("bytes"), py::arg("what"),
      "InputError on `name` when `what` (holding `bytes` at once) exceeds memory_limit_bytes()");
  m.def("format_bytes", &format_bytes, py::arg("bytes"), "A byte count as the messages write it (\"1.5 GiB\")");
}

}  // namespace tokenflow::python
