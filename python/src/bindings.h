// python/src/bindings.h — helpers shared by the binding files of twinkle._core.
//
// Error mapping: a C++ option check (one validate() per option set, see
// twinkle/core/option_check.h, and DeviceMesh::from_sizes' size checks) failing becomes
// ValueError with the same text (arg_check); every other twinkle::Error becomes RuntimeError
// (module.cpp). Heavy calls (model construction, forward/backward, step, save, load) run with
// the GIL released under HeavyCall, which also makes Ctrl-C (SIGINT) end the process at once
// (exit status 130, so twinkle-run / mpirun take the whole job down) instead of waiting for
// the call to return; between calls Python's own KeyboardInterrupt applies.
#pragma once
#include <pybind11/pybind11.h>

#include <csignal>
#include <string>

#include <nlohmann/json.hpp>

#include "twinkle/core/error.h"

namespace twinkle_py {

namespace py = pybind11;

void bind_runtime(py::module_& m);
void bind_data(py::module_& m);
void bind_model(py::module_& m);

/// Runs `f` (an argument check); a twinkle::Error from it becomes ValueError (same text).
template <class F>
void arg_check(F&& f) {
  try {
    f();
  } catch (const twinkle::Error& e) {
    throw py::value_error(e.what());
  }
}

/// Scope of a long C++ call: releases the GIL and, on the main thread, routes SIGINT to a
/// handler that prints "twinkle: interrupted (SIGINT) during <what>" and _exit(130)s.
/// The Python handler is restored on scope exit; a SIGINT that arrived before is left for
/// Python (checked with PyErr_CheckSignals by the caller after the scope ends).
class HeavyCall {
 public:
  explicit HeavyCall(const char* what);
  ~HeavyCall();
  HeavyCall(const HeavyCall&) = delete;
  HeavyCall& operator=(const HeavyCall&) = delete;

 private:
  bool installed_ = false;
  struct sigaction old_ {};
  py::gil_scoped_release release_;
};

/// Raises KeyboardInterrupt (or what a Python signal handler raises) if a signal is pending.
void check_signals();

/// nlohmann::json <-> Python objects (dict, list, str, int, float, bool, None).
py::object to_py(const nlohmann::json& j);
nlohmann::json from_py(const py::handle& o);

}  // namespace twinkle_py
