// python/src/convert.cpp — HeavyCall (GIL release + SIGINT), JSON <-> Python conversion.
#include <unistd.h>

#include <cstring>

#include "bindings.h"

namespace twinkle_py {

namespace {
const char* g_what = "a twinkle call";
void on_sigint(int) {
  char buf[160];
  int n = 0;
  const char* parts[] = {"twinkle: interrupted (SIGINT) during ", g_what, "\n"};
  for (const char* p : parts)
    for (; *p && n < static_cast<int>(sizeof buf) - 1; ++p) buf[n++] = *p;
  ssize_t w = write(STDERR_FILENO, buf, static_cast<size_t>(n));
  (void)w;
  _exit(130);
}
}  // namespace

HeavyCall::HeavyCall(const char* what) : release_() {
  if (gettid() == getpid()) {  // main thread: the one signals are delivered to by Python
    g_what = what;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    installed_ = sigaction(SIGINT, &sa, &old_) == 0;
  }
}

HeavyCall::~HeavyCall() {
  if (installed_) sigaction(SIGINT, &old_, nullptr);
}

void check_signals() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

py::object to_py(const nlohmann::json& j) {
  using T = nlohmann::json::value_t;
  switch (j.type()) {
    case T::null: return py::none();
    case T::boolean: return py::bool_(j.get<bool>());
    case T::number_integer: return py::int_(j.get<int64_t>());
    case T::number_unsigned: return py::int_(j.get<uint64_t>());
    case T::number_float: return py::float_(j.get<double>());
    case T::string: return py::str(j.get_ref<const std::string&>());
    case T::array: {
      py::list l(j.size());
      for (size_t i = 0; i < j.size(); ++i) l[i] = to_py(j[i]);
      return l;
    }
    case T::object: {
      py::dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d[py::str(it.key())] = to_py(it.value());
      return d;
    }
    default: return py::none();
  }
}

nlohmann::json from_py(const py::handle& o) {
  if (o.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(o)) return o.cast<bool>();
  if (py::isinstance<py::int_>(o)) return o.cast<int64_t>();
  if (py::isinstance<py::float_>(o)) return o.cast<double>();
  if (py::isinstance<py::str>(o)) return o.cast<std::string>();
  if (py::isinstance<py::dict>(o)) {
    nlohmann::json j = nlohmann::json::object();
    for (auto kv : o.cast<py::dict>()) j[py::str(kv.first).cast<std::string>()] = from_py(kv.second);
    return j;
  }
  if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) {
    nlohmann::json j = nlohmann::json::array();
    for (auto v : o) j.push_back(from_py(v));
    return j;
  }
  if (py::hasattr(o, "tolist")) return from_py(o.attr("tolist")());  // numpy arrays and scalars
  throw py::type_error("cannot convert a " + std::string(py::str(o.get_type().attr("__name__"))) +
                       " to JSON (expected dict, list, str, int, float, bool or None)");
}

}  // namespace twinkle_py
