// python/src/module.cpp — the extension module twinkle._core: error translation and the
// submodule registrations (one file per area: runtime, data, model).
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "twinkle/core/error.h"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
  m.doc() = "twinkle's C++ core (the Python package twinkle wraps it; see python/twinkle)";
  // twinkle::Error -> RuntimeError with the same text (argument checks raise ValueError
  // themselves, see arg_check in bindings.h); any other std::exception -> RuntimeError too
  // (pybind11's default), so no C++ exception ends the interpreter.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const twinkle::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  twinkle_py::bind_runtime(m);
  twinkle_py::bind_data(m);
  twinkle_py::bind_model(m);
}
