// twinkle/dist/parallel_state.h — this process's communicators for each mesh dimension.
//
// Counterpart of megatron/core/parallel_state.py: built once by twinkle::initialize
// (or by hand in tests) from a DeviceMesh, it holds the ProcessGroup of every kind
// that contains this rank. In a single process every group has size 1.
#pragma once
#include <memory>

#include "twinkle/dist/device_mesh.h"
#include "twinkle/dist/process_group.h"

namespace twinkle::dist {

struct ParallelState {
  DeviceMesh mesh;
  int global_rank = 0;
  DeviceMesh::Coord coord;
  /// One group per DeviceMesh::groups() name ("dp-cp" -> dp_cp, "tp-pp" -> tp_pp).
  /// `embedding` is nullptr on ranks that are neither the first nor the last stage of
  /// their pp group (as in Megatron, where such ranks are not in the embedding group).
  std::shared_ptr<ProcessGroup> world, tp, cp, dp, pp, dp_cp, tp_pp, embedding, etp, ep, edp;

  int tp_rank() const { return tp->rank(); }
  int tp_size() const { return tp->size(); }
  int pp_rank() const { return pp->rank(); }
  int pp_size() const { return pp->size(); }
  bool is_first_stage() const { return pp->rank() == 0; }
  bool is_last_stage() const { return pp->rank() == pp->size() - 1; }
  bool sequence_parallel() const { return mesh.sequence_parallel(); }
  int dp_rank() const { return dp->rank(); }
  int dp_size() const { return dp->size(); }
  int cp_rank() const { return cp->rank(); }
  int cp_size() const { return cp->size(); }
  int ep_rank() const { return ep->rank(); }
  int ep_size() const { return ep->size(); }
  bool in_embedding_group() const { return static_cast<bool>(embedding); }
};

/// A ParallelState of size-1 local groups (single process, no MPI) over a 1-rank cpu
/// mesh; every group (embedding included) is present.
std::shared_ptr<ParallelState> make_single_process_state();

/// Builds every group of `mesh` for this rank over MPI_COMM_WORLD (MPI must be
/// initialised and its world size equal mesh.world_size(), else twinkle::Error).
/// Collective: every rank creates the communicators in the same fixed order (world,
/// tp, cp, dp, pp, dp-cp, tp-pp, embedding, etp, ep, edp), one MPI_Comm_split each.
/// A 1-rank mesh without MPI gives the same result as make_single_process_state()
/// (but keeps the mesh's device_type and flags).
std::shared_ptr<ParallelState> make_mpi_state(const DeviceMesh& mesh);

}  // namespace twinkle::dist
