// tokenflow::InputError -> tokenflow.InputError, a subclass of ValueError whose message is the
// CLI's error line (without "tokenflow: "), with the parts as attributes source, key, detail.
// tokenflow::NumericalFailure (a computation the arithmetic could not carry: a non-finite or
// non-coupling result) -> FloatingPointError, never a non-finite array.
#include "exports.hpp"
#include "tokenflow/echo.hpp"
#include "tokenflow/error.hpp"
#include "tokenflow/ot.hpp"

namespace tokenflow::python {

namespace py = pybind11;

void export_errors(py::module_& m) {
  // Never destroyed: it must outlive the interpreter's last use of it.
  static auto* input_error = new py::exception<InputError>(m, "InputError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InputError& e) {
      py::object error = py::reinterpret_borrow<py::object>(input_error->ptr())(bounded_line(e.what()));
      error.attr("source") = e.source();
      error.attr("key") = e.key();
      error.attr("detail") = e.detail();
      PyErr_SetObject(input_error->ptr(), error.ptr());
    } catch (const NumericalFailure& e) {
      PyErr_SetString(PyExc_FloatingPointError, bounded_line(e.what()).c_str());
    }
  });
}

}  // namespace tokenflow::python
