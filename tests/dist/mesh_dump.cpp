// Prints every group of a mesh as JSON, for check_mesh_numpy.py.
// Usage: mesh_dump DP TP PP CP EP ETP
#include <cstdlib>
#include <iostream>

#include "twinkle/dist/device_mesh.h"

int main(int argc, char** argv) {
  if (argc != 7) {
    std::cerr << "usage: mesh_dump DP TP PP CP EP ETP\n";
    return 2;
  }
  twinkle::MeshSizes s;
  s.dp = std::atoi(argv[1]);
  s.tp = std::atoi(argv[2]);
  s.pp = std::atoi(argv[3]);
  s.cp = std::atoi(argv[4]);
  s.ep = std::atoi(argv[5]);
  s.etp = std::atoi(argv[6]);
  auto m = twinkle::DeviceMesh::from_sizes(s);
  std::cout << "{";
  bool first = true;
  for (const auto& name : twinkle::DeviceMesh::group_names()) {
    std::cout << (first ? "" : ",") << "\"" << name << "\":[";
    first = false;
    bool fg = true;
    for (const auto& g : m.groups(name)) {
      std::cout << (fg ? "" : ",") << "[";
      fg = false;
      for (size_t i = 0; i < g.size(); ++i) std::cout << (i ? "," : "") << g[i];
      std::cout << "]";
    }
    std::cout << "]";
  }
  std::cout << ",\"coords\":[";
  for (int r = 0; r < m.world_size(); ++r) {
    auto c = m.coord(r);
    std::cout << (r ? "," : "") << "[" << c.tp << "," << c.cp << "," << c.dp << "," << c.pp << "," << c.etp << ","
              << c.ep << "," << c.edp << "]";
  }
  std::cout << "]}\n";
  return 0;
}
