// get_device_placement(): an 80-column box describing the mesh and each rank's place.
#include <cstdlib>
#include <sstream>

#include "twinkle/dist/runtime.h"

namespace twinkle {
namespace {

constexpr int kWidth = 80;
constexpr int kInner = kWidth - 4;  // "| " + text + " |"

std::string rule() { return "+" + std::string(kWidth - 2, '-') + "+\n"; }

std::string row(std::string text) {
  if (static_cast<int>(text.size()) > kInner) text = text.substr(0, kInner - 3) + "...";
  return "| " + text + std::string(kInner - text.size(), ' ') + " |\n";
}

std::string centered(const std::string& text) {
  int pad = (kInner - static_cast<int>(text.size())) / 2;
  return row(std::string(pad > 0 ? pad : 0, ' ') + text);
}

std::string cell(int v, int w) {
  std::string s = std::to_string(v);
  return std::string(w > static_cast<int>(s.size()) ? w - s.size() : 0, ' ') + s;
}

// "label [0,1] [2,3] ..." wrapped to the box width, continuation lines indented.
std::string group_rows(const std::string& label, const std::vector<std::vector<int>>& groups) {
  std::string out, line = label;
  const std::string indent(label.size(), ' ');
  for (const auto& g : groups) {
    std::string item = "[";
    for (size_t i = 0; i < g.size(); ++i) {
      if (i) item += ',';
      item += std::to_string(g[i]);
    }
    item += "]";
    if (line.size() + 1 + item.size() > static_cast<size_t>(kInner) && line != label && line != indent) {
      out += row(line);
      line = indent;
    }
    line += " " + item;
  }
  return out + row(line);
}

int local_world_size(int world) {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS"}) {
    const char* s = std::getenv(v);
    if (s && *s) {
      int n = std::atoi(s);
      if (n > 0) return n;
    }
  }
  return world;
}

}  // namespace

std::string format_device_placement(const DeviceMesh& mesh) {
  const std::string& dev = mesh.device_type();
  const int world = mesh.world_size();
  const bool accel = dev != "cpu";
  std::string out = rule() + centered("DEVICE PLACEMENT TOPOLOGY") + rule();
  out += row("device type: " + dev + "    world size: " + std::to_string(world) +
             "    sequence parallel: " +
             (!mesh.sequence_parallel() ? "off" : mesh.tp_size() > 1 ? "on" : "off (tp = 1)"));
  out += row("mesh: " + mesh.describe());
  out += rule();
  // The expert grid's etp coordinate appears when expert tensor parallelism is on (etp > 1).
  const bool etp = mesh.etp_size() > 1;
  std::string head = std::string(" rank |  tp |  cp |  dp |  pp |") + (etp ? " etp |" : "") + "  ep | edp";
  if (accel) head += " | node | device";
  out += row(head);
  out += row(std::string(head.size(), '-'));
  std::vector<int> ids;
  const char* list = std::getenv(dev == "npu" ? "ASCEND_RT_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES");
  if (accel && list && *list) {
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ',')) ids.push_back(std::atoi(item.c_str()));
  }
  const int per_node = local_world_size(world);
  for (int r = 0; r < world; ++r) {
    auto c = mesh.coord(r);
    std::string line = cell(r, 5) + " | " + cell(c.tp, 3) + " | " + cell(c.cp, 3) + " | " + cell(c.dp, 3) + " | " +
                       cell(c.pp, 3) + " | " + (etp ? cell(c.etp, 3) + " | " : "") + cell(c.ep, 3) + " | " +
                       cell(c.edp, 3);
    if (accel) {
      int local = r % per_node;
      std::string d = local < static_cast<int>(ids.size()) ? std::to_string(ids[local])
                      : ids.empty()                         ? std::to_string(local)
                                                            : "?";
      line += " | " + cell(r / per_node, 4) + " | " + dev + ":" + d;
    }
    out += row(line);
  }
  out += rule();
  for (const char* name : {"tp", "dp", "pp", "dp-cp", "etp", "ep", "edp"}) {
    if (std::string(name) == "etp" && !etp) continue;
    std::string label = std::string(name) + " groups:";
    label.resize(15, ' ');
    out += group_rows(label, mesh.groups(name));
  }
  out += rule();
  return out;
}

std::string get_device_placement() {
  return format_device_placement(is_initialized() ? parallel_state().mesh : DeviceMesh::from_sizes({}));
}

}  // namespace twinkle
