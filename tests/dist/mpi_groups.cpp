// Groups of a mesh over MPI: every communicator of parallel_state() must hold exactly the
// ranks DeviceMesh lists (checked by all-gathering world ranks through the communicator).
// Usage: mpi_groups dp=2,tp=2,pp=2[,cp=..,ep=..,etp=..]
#include <sstream>

#include "mpi_check.h"
#include "twinkle/core/error.h"
#include "twinkle/dist/runtime.h"

static twinkle::MeshSizes parse(const std::string& spec) {
  twinkle::MeshSizes s;
  std::stringstream ss(spec);
  std::string kv;
  while (std::getline(ss, kv, ',')) {
    auto eq = kv.find('=');
    twinkle::check(eq != std::string::npos, "bad mesh spec item '" + kv + "'");
    std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    if (k == "device") {
      s.device_type = v;
      continue;
    }
    int x = std::stoi(v);
    if (k == "dp") s.dp = x;
    else if (k == "tp") s.tp = x;
    else if (k == "pp") s.pp = x;
    else if (k == "cp") s.cp = x;
    else if (k == "ep") s.ep = x;
    else if (k == "etp") s.etp = x;
    else throw twinkle::Error("bad mesh spec key '" + k + "'");
  }
  return s;
}

static int body(int argc, char** argv) {
  twinkle::check(argc >= 2, "usage: mpi_groups MESH_SPEC");
  twinkle::InitOptions o;
  o.global_device_mesh = twinkle::DeviceMesh::from_sizes(parse(argv[1]));
  twinkle::initialize(o);
  auto& st = twinkle::parallel_state();
  const auto& mesh = st.mesh;
  const int me = twinkle::world_rank();
  MPI_CHECK(st.global_rank == me, "global_rank");
  auto c = mesh.coord(me);
  MPI_CHECK(st.coord.tp == c.tp && st.coord.dp == c.dp && st.coord.pp == c.pp && st.coord.ep == c.ep, "coord");
  std::pair<const char*, std::shared_ptr<twinkle::dist::ProcessGroup>> groups[] = {
      {"world", st.world}, {"tp", st.tp},       {"cp", st.cp},   {"dp", st.dp}, {"pp", st.pp},  {"dp-cp", st.dp_cp},
      {"tp-pp", st.tp_pp}, {"embedding", st.embedding}, {"etp", st.etp}, {"ep", st.ep}, {"edp", st.edp}};
  for (auto& [name, pg] : groups) {
    auto want = mesh.group_of(name, me);
    if (want.empty()) {
      MPI_CHECK(!pg, name << ": rank outside the group must have a null group");
      continue;
    }
    if (!pg) {
      MPI_CHECK(false, name << ": missing group");
      continue;
    }
    MPI_CHECK(pg->name() == name, name << ": name " << pg->name());
    MPI_CHECK(pg->global_ranks() == want, name << ": global_ranks differ from DeviceMesh");
    MPI_CHECK(pg->size() == static_cast<int>(want.size()), name << ": size");
    MPI_CHECK(want[pg->rank()] == me, name << ": group rank " << pg->rank());
    std::vector<int32_t> got(pg->size(), -1);
    int32_t mine = me;
    pg->all_gather(&mine, got.data(), 1, twinkle::DType::I32);
    MPI_CHECK(std::vector<int>(got.begin(), got.end()) == want, name << ": communicator members differ");
  }
  MPI_CHECK(st.is_first_stage() == (c.pp == 0) && st.is_last_stage() == (c.pp == mesh.pp_size() - 1), "stages");
  if (me == 0) twinkle::get_logger().info("placement\n" + twinkle::get_device_placement());
  twinkle::get_logger().info_all_ranks("groups checked");
  int fails = twinkle_test::failures();
  st.world->all_reduce(&fails, 1, twinkle::DType::I32);
  if (me == 0) std::cout << (fails == 0 ? "mpi_groups OK " : "mpi_groups FAILED ") << mesh.describe() << std::endl;
  return fails == 0 ? 0 : 1;
}

int main(int argc, char** argv) { return twinkle::run_main(argc, argv, body); }
