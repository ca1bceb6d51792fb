// Self-test of the PMPI counting library tests/dist/mpi_count.cpp: on 2 ranks, every MPI call
// kind twinkle could use — blocking and non-blocking collectives, the point-to-point variants
// (non-blocking, ready, buffered, synchronous, persistent, send-recv-replace) and one one-sided
// Put — is made once with known counts between MPI_Pcontrol(1) and MPI_Pcontrol(0); the report
// the library writes at MPI_Finalize is checked by tests/dist/check_mpi_count.py against the
// bytes written there by hand from the calls below.
#include <mpi.h>

#include <cstdio>
#include <vector>

namespace {

void all(std::vector<MPI_Request>& r) {
  MPI_Waitall(static_cast<int>(r.size()), r.data(), MPI_STATUSES_IGNORE);
  r.clear();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "mpi_count_selftest runs on 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int peer = 1 - rank;
  const MPI_Comm w = MPI_COMM_WORLD;
  std::vector<float> f(64, 1.0f), g(64, 0.0f);
  std::vector<int> i(64, 1), j(64, 0);
  std::vector<double> d(64, 1.0), e(64, 0.0);
  std::vector<MPI_Request> r(1);
  r.clear();
  MPI_Request q;
  MPI_Pcontrol(1);
  // collectives (comm size 2, root 0)
  MPI_Allreduce(f.data(), g.data(), 3, MPI_FLOAT, MPI_SUM, w);  // blocking control
  MPI_Iallreduce(f.data(), g.data(), 10, MPI_FLOAT, MPI_SUM, w, &q), r.push_back(q), all(r);
  MPI_Ibcast(i.data(), 7, MPI_INT, 0, w, &q), r.push_back(q), all(r);
  MPI_Iallgather(d.data(), 3, MPI_DOUBLE, e.data(), 3, MPI_DOUBLE, w, &q), r.push_back(q), all(r);
  const int agv_counts[2] = {2, 5}, agv_displs[2] = {0, 2};
  MPI_Iallgatherv(f.data(), agv_counts[rank], MPI_FLOAT, g.data(), agv_counts, agv_displs, MPI_FLOAT, w, &q),
      r.push_back(q), all(r);
  MPI_Ireduce_scatter_block(f.data(), g.data(), 4, MPI_FLOAT, MPI_SUM, w, &q), r.push_back(q), all(r);
  const int rs_counts[2] = {1, 3};
  MPI_Ireduce_scatter(f.data(), g.data(), rs_counts, MPI_FLOAT, MPI_SUM, w, &q), r.push_back(q), all(r);
  MPI_Ialltoall(i.data(), 2, MPI_INT, j.data(), 2, MPI_INT, w, &q), r.push_back(q), all(r);
  // every rank sends 1 int to rank 0 and 2 to rank 1 (so rank 0 receives 1 + 1, rank 1 2 + 2)
  const int a2v_send[2] = {1, 2}, a2v_sdispls[2] = {0, 1};
  const int a2v_recv[2] = {1 + rank, 1 + rank}, a2v_rdispls[2] = {0, 2};
  MPI_Ialltoallv(i.data(), a2v_send, a2v_sdispls, MPI_INT, j.data(), a2v_recv, a2v_rdispls, MPI_INT, w, &q),
      r.push_back(q), all(r);
  const int a2w_counts[2] = {1, 1}, a2w_displs[2] = {0, 8};
  const MPI_Datatype a2w_types[2] = {MPI_INT, MPI_INT};
  MPI_Ialltoallw(i.data(), a2w_counts, a2w_displs, a2w_types, j.data(), a2w_counts, a2w_displs, a2w_types, w, &q),
      r.push_back(q), all(r);
  MPI_Ireduce(f.data(), g.data(), 6, MPI_FLOAT, MPI_SUM, 0, w, &q), r.push_back(q), all(r);
  MPI_Igather(f.data(), 2, MPI_FLOAT, g.data(), 2, MPI_FLOAT, 0, w, &q), r.push_back(q), all(r);
  const int gv_counts[2] = {3, 3}, gv_displs[2] = {0, 3};
  MPI_Igatherv(f.data(), 3, MPI_FLOAT, g.data(), gv_counts, gv_displs, MPI_FLOAT, 0, w, &q), r.push_back(q), all(r);
  MPI_Iscatter(f.data(), 3, MPI_FLOAT, g.data(), 3, MPI_FLOAT, 0, w, &q), r.push_back(q), all(r);
  const int sv_counts[2] = {2, 2}, sv_displs[2] = {0, 2};
  MPI_Iscatterv(f.data(), sv_counts, sv_displs, MPI_FLOAT, g.data(), 2, MPI_FLOAT, 0, w, &q), r.push_back(q), all(r);
  MPI_Iscan(i.data(), j.data(), 5, MPI_INT, MPI_SUM, w, &q), r.push_back(q), all(r);
  MPI_Iexscan(i.data(), j.data(), 4, MPI_INT, MPI_SUM, w, &q), r.push_back(q), all(r);
  // point to point with the other rank
  MPI_Irecv(g.data(), 5, MPI_FLOAT, peer, 1, w, &q), r.push_back(q);
  MPI_Isend(f.data(), 5, MPI_FLOAT, peer, 1, w, &q), r.push_back(q), all(r);
  MPI_Irecv(j.data(), 4, MPI_INT, peer, 2, w, &q), r.push_back(q);
  MPI_Issend(i.data(), 4, MPI_INT, peer, 2, w, &q), r.push_back(q), all(r);
  MPI_Irecv(e.data(), 2, MPI_DOUBLE, peer, 3, w, &q), r.push_back(q);
  MPI_Barrier(w);  // the ready send needs the receive posted
  MPI_Irsend(d.data(), 2, MPI_DOUBLE, peer, 3, w, &q), r.push_back(q), all(r);
  std::vector<char> bsend_buf(1024 + MPI_BSEND_OVERHEAD);
  MPI_Buffer_attach(bsend_buf.data(), static_cast<int>(bsend_buf.size()));
  MPI_Irecv(j.data() + 8, 3, MPI_INT, peer, 4, w, &q), r.push_back(q);
  MPI_Ibsend(i.data(), 3, MPI_INT, peer, 4, w, &q), r.push_back(q), all(r);
  void* detached = nullptr;
  int detached_size = 0;
  MPI_Buffer_detach(&detached, &detached_size);
  MPI_Request ps[2];
  MPI_Recv_init(g.data() + 16, 3, MPI_FLOAT, peer, 5, w, &ps[0]);
  MPI_Send_init(f.data(), 3, MPI_FLOAT, peer, 5, w, &ps[1]);
  for (int rep = 0; rep < 2; ++rep) {
    MPI_Startall(2, ps);
    MPI_Waitall(2, ps, MPI_STATUSES_IGNORE);
  }
  MPI_Request_free(&ps[0]);
  MPI_Request_free(&ps[1]);
  MPI_Sendrecv_replace(j.data(), 6, MPI_INT, peer, 6, peer, 6, w, MPI_STATUS_IGNORE);
  // one-sided: recorded as "Uncounted Put"
  MPI_Win win;
  MPI_Win_create(g.data(), 4 * sizeof(float), sizeof(float), MPI_INFO_NULL, w, &win);
  MPI_Win_fence(0, win);
  MPI_Put(f.data(), 1, MPI_FLOAT, peer, 0, 1, MPI_FLOAT, win);
  MPI_Win_fence(0, win);
  MPI_Win_free(&win);
  MPI_Pcontrol(0);
  MPI_Allreduce(f.data(), g.data(), 9, MPI_FLOAT, MPI_SUM, w);  // not counted (after Pcontrol(0))
  if (rank == 0) std::printf("mpi_count_selftest: calls made on %d ranks\n", size);
  MPI_Finalize();
  return 0;
}
