// DeviceMesh: Megatron-core rank layout (megatron/core/parallel_state.py, RankGenerator
// and generate_masked_orthogonal_rank_groups) for the dense grid (tp, cp, dp, pp) and
// the expert grid (etp, ep, edp, pp).
#include "twinkle/dist/device_mesh.h"

#include <algorithm>
#include <array>
#include <sstream>

#include "twinkle/core/error.h"

namespace twinkle {
namespace {

// Groups of a grid whose dimension sizes are `dims` (fastest first): each group varies
// the dimensions flagged in `mask` (fastest first inside the group) and fixes the others.
// Groups are listed in the order of the fixed coordinates (fastest first), which is
// ascending first rank.
template <size_t N>
std::vector<std::vector<int>> masked_groups(const std::array<int, N>& dims, const std::array<bool, N>& mask) {
  std::array<int, N> stride{};
  int world = 1;
  for (size_t i = 0; i < N; ++i) {
    stride[i] = world;
    world *= dims[i];
  }
  int group_size = 1;
  for (size_t i = 0; i < N; ++i)
    if (mask[i]) group_size *= dims[i];
  std::vector<std::vector<int>> out;
  out.reserve(world / group_size);
  for (int r = 0; r < world; ++r) {
    bool base = true;  // every masked coordinate is 0
    for (size_t i = 0; i < N; ++i)
      if (mask[i] && (r / stride[i]) % dims[i] != 0) base = false;
    if (!base) continue;
    std::vector<int> g;
    g.reserve(group_size);
    for (int k = 0; k < group_size; ++k) {
      int rem = k, rank = r;
      for (size_t i = 0; i < N; ++i) {
        if (!mask[i]) continue;
        rank += (rem % dims[i]) * stride[i];
        rem /= dims[i];
      }
      g.push_back(rank);
    }
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace

DeviceMesh DeviceMesh::from_sizes(const MeshSizes& s) {
  auto positive = [](int v, const char* field) {
    check(v >= 1, std::string("device mesh: MeshSizes.") + field + " = " + std::to_string(v) + " must be >= 1");
  };
  positive(s.dp, "dp");
  positive(s.tp, "tp");
  positive(s.pp, "pp");
  positive(s.cp, "cp");
  positive(s.ep, "ep");
  positive(s.etp, "etp");
  positive(s.vpp, "vpp");
  check(s.vpp == 1 || s.pp > 1, "device mesh: MeshSizes.vpp = " + std::to_string(s.vpp) +
                                    " needs pipeline parallelism (pp > 1; pp = 1): virtual pipeline stages "
                                    "interleave the stages of a pipeline");
  check(s.device_type == "cpu" || s.device_type == "cuda" || s.device_type == "npu",
        "device mesh: MeshSizes.device_type '" + s.device_type + "' is unknown (known: cpu, cuda, npu)");
  int64_t world = int64_t(s.dp) * s.tp * s.pp * s.cp;
  check(world <= (1 << 24), "device mesh: world size dp*tp*pp*cp = " + std::to_string(world) + " is too large");
  int64_t expert = int64_t(s.etp) * s.ep * s.pp;
  check(world % expert == 0, "device mesh: MeshSizes.ep = " + std::to_string(s.ep) + " (x etp=" +
                                 std::to_string(s.etp) + " x pp=" + std::to_string(s.pp) + " = " +
                                 std::to_string(expert) + ") does not divide the world size " +
                                 std::to_string(world) + " (dp*tp*pp*cp)");
  DeviceMesh m;
  m.sizes_ = s;
  return m;
}

int DeviceMesh::world_size() const { return sizes_.dp * sizes_.tp * sizes_.pp * sizes_.cp; }
int DeviceMesh::edp_size() const { return world_size() / (sizes_.etp * sizes_.ep * sizes_.pp); }

DeviceMesh::Coord DeviceMesh::coord(int rank) const {
  check(rank >= 0 && rank < world_size(),
        "device mesh: rank " + std::to_string(rank) + " outside [0, " + std::to_string(world_size()) + ")");
  Coord c;
  int r = rank;
  c.tp = r % sizes_.tp;
  r /= sizes_.tp;
  c.cp = r % sizes_.cp;
  r /= sizes_.cp;
  c.dp = r % sizes_.dp;
  c.pp = r / sizes_.dp;
  r = rank;
  c.etp = r % sizes_.etp;
  r /= sizes_.etp;
  c.ep = r % sizes_.ep;
  r /= sizes_.ep;
  c.edp = r % edp_size();
  return c;
}

static void check_coord(int v, int size, const char* field) {
  check(v >= 0 && v < size, std::string("device mesh: ") + field + " coordinate " + std::to_string(v) +
                                " outside [0, " + std::to_string(size) + ")");
}

int DeviceMesh::rank_of(int tp, int cp, int dp, int pp) const {
  check_coord(tp, sizes_.tp, "tp");
  check_coord(cp, sizes_.cp, "cp");
  check_coord(dp, sizes_.dp, "dp");
  check_coord(pp, sizes_.pp, "pp");
  return tp + sizes_.tp * (cp + sizes_.cp * (dp + sizes_.dp * pp));
}

int DeviceMesh::expert_rank_of(int etp, int ep, int edp, int pp) const {
  check_coord(etp, sizes_.etp, "etp");
  check_coord(ep, sizes_.ep, "ep");
  check_coord(edp, edp_size(), "edp");
  check_coord(pp, sizes_.pp, "pp");
  return etp + sizes_.etp * (ep + sizes_.ep * (edp + edp_size() * pp));
}

const std::vector<std::string>& DeviceMesh::group_names() {
  static const std::vector<std::string> names = {"world", "tp",        "cp",  "dp", "pp", "dp-cp",
                                                 "tp-pp", "embedding", "etp", "ep", "edp"};
  return names;
}

std::vector<std::vector<int>> DeviceMesh::groups(const std::string& name) const {
  const std::array<int, 4> dense = {sizes_.tp, sizes_.cp, sizes_.dp, sizes_.pp};
  const std::array<int, 4> expert = {sizes_.etp, sizes_.ep, edp_size(), sizes_.pp};
  using M = std::array<bool, 4>;
  if (name == "world") return masked_groups(dense, M{true, true, true, true});
  if (name == "tp") return masked_groups(dense, M{true, false, false, false});
  if (name == "cp") return masked_groups(dense, M{false, true, false, false});
  if (name == "dp") return masked_groups(dense, M{false, false, true, false});
  if (name == "pp") return masked_groups(dense, M{false, false, false, true});
  if (name == "dp-cp") return masked_groups(dense, M{false, true, true, false});
  if (name == "tp-pp") return masked_groups(dense, M{true, false, false, true});
  if (name == "etp") return masked_groups(expert, M{true, false, false, false});
  if (name == "ep") return masked_groups(expert, M{false, true, false, false});
  if (name == "edp") return masked_groups(expert, M{false, false, true, false});
  if (name == "embedding") {
    auto out = masked_groups(dense, M{false, false, false, true});
    for (auto& g : out)
      if (g.size() > 1) g = {g.front(), g.back()};
    return out;
  }
  throw Error("device mesh: unknown group name '" + name +
              "' (known: world, tp, cp, dp, pp, dp-cp, tp-pp, embedding, etp, ep, edp)");
}

std::vector<int> DeviceMesh::group_of(const std::string& name, int rank) const {
  check(rank >= 0 && rank < world_size(), "device mesh: group_of('" + name + "'): rank " + std::to_string(rank) +
                                              " outside [0, " + std::to_string(world_size()) + ")");
  for (auto& g : groups(name))
    if (std::find(g.begin(), g.end(), rank) != g.end()) return g;
  return {};
}

std::string DeviceMesh::describe() const {
  std::ostringstream o;
  bool any = false;
  auto dim = [&](const char* n, int v) {
    if (v <= 1) return;
    if (any) o << " x ";
    o << n << "=" << v;
    any = true;
  };
  dim("pp", sizes_.pp);
  if (sizes_.vpp > 1) o << " (vpp=" << sizes_.vpp << ")";
  dim("dp", sizes_.dp);
  dim("cp", sizes_.cp);
  dim("tp", sizes_.tp);
  if (!any) o << "dp=1";
  if (sizes_.ep > 1 || sizes_.etp > 1)
    o << " (experts: ep=" << sizes_.ep << " x etp=" << sizes_.etp << " x edp=" << edp_size() << ")";
  return o.str();
}

}  // namespace twinkle
