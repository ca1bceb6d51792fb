// python/src/runtime.cpp — DeviceMesh, initialize, placement, ranks (twinkle/dist/*.h).
#include <pybind11/stl.h>

#include "bindings.h"
#include "twinkle/dist/device_mesh.h"
#include "twinkle/dist/runtime.h"

namespace twinkle_py {

void bind_runtime(py::module_& m) {
  using twinkle::DeviceMesh;
  py::class_<DeviceMesh>(m, "DeviceMesh")
      .def_static(
          "from_sizes",
          [](int dp, int tp, int pp, int cp, int ep, int etp, const std::string& device_type, bool sp, int vpp) {
            DeviceMesh mesh;
            arg_check([&] {
              mesh = DeviceMesh::from_sizes({.dp = dp, .tp = tp, .pp = pp, .cp = cp, .ep = ep, .etp = etp,
                                             .vpp = vpp, .device_type = device_type, .sequence_parallel = sp});
            });
            return mesh;
          },
          py::arg("dp"), py::arg("tp"), py::arg("pp"), py::arg("cp"), py::arg("ep"), py::arg("etp"),
          py::arg("device_type"), py::arg("sequence_parallel"), py::arg("vpp") = 1)
      .def_property_readonly("vpp_size", &DeviceMesh::vpp_size)
      .def_property_readonly("world_size", &DeviceMesh::world_size)
      .def_property_readonly("dp_size", &DeviceMesh::dp_size)
      .def_property_readonly("tp_size", &DeviceMesh::tp_size)
      .def_property_readonly("pp_size", &DeviceMesh::pp_size)
      .def_property_readonly("cp_size", &DeviceMesh::cp_size)
      .def_property_readonly("ep_size", &DeviceMesh::ep_size)
      .def_property_readonly("etp_size", &DeviceMesh::etp_size)
      .def_property_readonly("device_type", &DeviceMesh::device_type)
      .def_property_readonly("sequence_parallel", &DeviceMesh::sequence_parallel)
      .def_property_readonly("data_world_size", &DeviceMesh::data_world_size)
      .def("coord",
           [](const DeviceMesh& mesh, int rank) {
             DeviceMesh::Coord c;
             arg_check([&] { c = mesh.coord(rank); });
             py::dict d;
             d["tp"] = c.tp, d["cp"] = c.cp, d["dp"] = c.dp, d["pp"] = c.pp;
             d["etp"] = c.etp, d["ep"] = c.ep, d["edp"] = c.edp;
             return d;
           })
      .def("groups", [](const DeviceMesh& mesh, const std::string& name) {
        std::vector<std::vector<int>> g;
        arg_check([&] { g = mesh.groups(name); });
        return g;
      })
      .def("describe", &DeviceMesh::describe)
      .def("placement", [](const DeviceMesh& mesh) { return twinkle::format_device_placement(mesh); });

  m.def(
      "initialize",
      [](const std::string& mode, const DeviceMesh& mesh, uint64_t seed, bool full_determinism) {
        if (mode != "local")  // the C++ message, as a bad argument
          arg_check([&] { twinkle::initialize({.mode = mode, .global_device_mesh = mesh}); });
        twinkle::initialize(
            {.mode = mode, .global_device_mesh = mesh, .seed = seed, .full_determinism = full_determinism});
      },
      py::arg("mode"), py::arg("mesh"), py::arg("seed"), py::arg("full_determinism"));
  m.def("is_initialized", &twinkle::is_initialized);
  m.def("finalize", &twinkle::finalize);
  // sys.excepthook's way out under a launcher (twinkle/__init__.py): MPI_Abort, never MPI_Finalize
  m.def(
      "abort_job", [](int code, const std::string& message) { twinkle::abort_job(code, message); },
      py::arg("code"), py::arg("message") = std::string());
  m.def("get_device_placement", &twinkle::get_device_placement);
  m.def("world_rank", &twinkle::world_rank);
  m.def("world_size", &twinkle::world_size);
  m.def("local_rank", &twinkle::local_rank);
  m.def("global_mesh", [] { return twinkle::parallel_state().mesh; });
}

}  // namespace twinkle_py
