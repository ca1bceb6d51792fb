// twinkle/dist/device_mesh.h — the layout of ranks over parallel dimensions.
//
// Megatron-core's rank order "tp-cp-ep-dp-pp" (megatron/core/parallel_state.py,
// RankGenerator): tp varies fastest, pp slowest:
//     rank = tp + TP*(cp + CP*(dp + DP*pp))
// The expert grid re-splits the same ranks as (etp, ep, edp, pp), etp fastest,
// with edp = world / (etp*ep*pp) ("MoE parallel folding").
#pragma once
#include <string>
#include <vector>

namespace twinkle {

struct MeshSizes {
  int dp = 1, tp = 1, pp = 1, cp = 1, ep = 1, etp = 1;
  /// Virtual pipeline stages (model chunks) per pipeline rank: Megatron-core's
  /// virtual_pipeline_model_parallel_size, the interleaved 1F1B schedule when > 1
  /// (parallel/pipeline_schedule.h). Not a dimension of ranks: the rank layout is the same for
  /// every vpp. > 1 needs pp > 1.
  int vpp = 1;
  std::string device_type = "cpu";  ///< "cpu", "cuda" or "npu"
  bool sequence_parallel = false;
};

class DeviceMesh {
 public:
  struct Coord {
    int tp = 0, cp = 0, dp = 0, pp = 0;  // dense grid
    int etp = 0, ep = 0, edp = 0;        // expert grid
  };

  DeviceMesh() = default;
  /// Validates sizes (all >= 1; etp*ep*pp divides the world; vpp > 1 only with pp > 1; device_type known) and
  /// builds the mesh. Throws twinkle::Error naming the offending field.
  static DeviceMesh from_sizes(const MeshSizes& sizes);

  const MeshSizes& sizes() const { return sizes_; }
  int world_size() const;
  int tp_size() const { return sizes_.tp; }
  int pp_size() const { return sizes_.pp; }
  int vpp_size() const { return sizes_.vpp; }
  int dp_size() const { return sizes_.dp; }
  int cp_size() const { return sizes_.cp; }
  int ep_size() const { return sizes_.ep; }
  int etp_size() const { return sizes_.etp; }
  int edp_size() const;
  const std::string& device_type() const { return sizes_.device_type; }
  bool sequence_parallel() const { return sizes_.sequence_parallel; }
  /// Number of data-parallel replicas that read different rows (= dp).
  int data_world_size() const { return sizes_.dp; }

  /// Dense and expert coordinates of `rank`; throws twinkle::Error outside [0, world).
  Coord coord(int rank) const;
  /// rank = tp + TP*(cp + CP*(dp + DP*pp)); throws twinkle::Error naming an out-of-range coordinate.
  int rank_of(int tp, int cp, int dp, int pp) const;
  /// rank = etp + ETP*(ep + EP*(edp + EDP*pp)) (expert grid).
  int expert_rank_of(int etp, int ep, int edp, int pp) const;

  /// Every group of the named kind, each a list of global ranks in group order
  /// (ascending ranks; groups sorted by their first rank, as Megatron's
  /// generate_masked_orthogonal_rank_groups lists them).
  /// Names: "tp", "cp", "dp", "pp", "dp-cp", "tp-pp" (model parallel), "embedding"
  /// (first and last stage of each pp group; one rank when pp == 1), "etp", "ep",
  /// "edp", "world". Throws twinkle::Error for an unknown name.
  std::vector<std::vector<int>> groups(const std::string& name) const;
  /// The group of kind `name` that contains `rank` (empty for "embedding" when `rank` is a
  /// middle pipeline stage). Throws twinkle::Error for an unknown name or rank.
  std::vector<int> group_of(const std::string& name, int rank) const;

  /// One-line description: the dense sizes > 1 in the order pp, dp, cp, tp joined by
  /// " x " (e.g. "pp=2 x dp=2 x tp=2"; "dp=1" for one rank; pp followed by " (vpp=V)" when
  /// vpp > 1), then, when ep or etp > 1,
  /// " (experts: ep=2 x etp=1 x edp=2)".
  std::string describe() const;
  /// The known group names, in the order make_mpi_state creates them.
  static const std::vector<std::string>& group_names();

 private:
  MeshSizes sizes_;
};

}  // namespace twinkle
