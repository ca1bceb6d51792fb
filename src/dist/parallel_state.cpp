// ParallelState construction: local (size-1) groups or one MPI communicator per mesh group.
#include "twinkle/dist/parallel_state.h"

#include "twinkle/core/error.h"
#include "twinkle/dist/mpi_process_group.h"

namespace twinkle::dist {
namespace {

std::shared_ptr<ProcessGroup>* slot(ParallelState& s, const std::string& name) {
  if (name == "world") return &s.world;
  if (name == "tp") return &s.tp;
  if (name == "cp") return &s.cp;
  if (name == "dp") return &s.dp;
  if (name == "pp") return &s.pp;
  if (name == "dp-cp") return &s.dp_cp;
  if (name == "tp-pp") return &s.tp_pp;
  if (name == "embedding") return &s.embedding;
  if (name == "etp") return &s.etp;
  if (name == "ep") return &s.ep;
  if (name == "edp") return &s.edp;
  throw Error("parallel state: no slot for group '" + name + "'");
}

std::shared_ptr<ParallelState> local_state(const DeviceMesh& mesh) {
  auto s = std::make_shared<ParallelState>();
  s->mesh = mesh;
  s->global_rank = 0;
  s->coord = DeviceMesh::Coord{};
  for (const auto& n : DeviceMesh::group_names()) *slot(*s, n) = make_local_group(n, 0);
  return s;
}

}  // namespace

std::shared_ptr<ParallelState> make_single_process_state() { return local_state(DeviceMesh::from_sizes({})); }

std::shared_ptr<ParallelState> make_mpi_state(const DeviceMesh& mesh) {
  if (!mpi_active()) {
    check(mesh.world_size() == 1, "make_mpi_state: MPI is not initialised and the device mesh " + mesh.describe() +
                                      " has " + std::to_string(mesh.world_size()) + " ranks");
    return local_state(mesh);
  }
  int world = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  check(world == mesh.world_size(), "make_mpi_state: MPI world size " + std::to_string(world) +
                                        " does not match the device mesh " + mesh.describe() + " (" +
                                        std::to_string(mesh.world_size()) + " ranks)");
  auto s = std::make_shared<ParallelState>();
  s->mesh = mesh;
  s->global_rank = me;
  s->coord = mesh.coord(me);
  for (const auto& n : DeviceMesh::group_names()) *slot(*s, n) = make_mpi_group(n, mesh.groups(n));
  return s;
}

}  // namespace twinkle::dist
