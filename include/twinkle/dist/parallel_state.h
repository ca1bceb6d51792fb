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
  std::shared_ptr<ProcessGroup> world, tp, cp, dp, pp, dp_cp, tp_pp, embedding, etp, ep, edp;

  int tp_rank() const { return tp->rank(); }
  int tp_size() const { return tp->size(); }
  int pp_rank() const { return pp->rank(); }
  int pp_size() const { return pp->size(); }
  bool is_first_stage() const { return pp->rank() == 0; }
  bool is_last_stage() const { return pp->rank() == pp->size() - 1; }
  bool sequence_parallel() const { return mesh.sequence_parallel(); }
};

/// A ParallelState of size-1 local groups (single process, no MPI).
std::shared_ptr<ParallelState> make_single_process_state();

/// Builds every group of `mesh` for this rank over MPI_COMM_WORLD (MPI must be
/// initialised and its world size equal mesh.world_size(), else twinkle::Error).
std::shared_ptr<ParallelState> make_mpi_state(const DeviceMesh& mesh);

}  // namespace twinkle::dist
