// tests/dist/mpi_count.cpp — libtwinkle_mpi_count.so, a PMPI interposition library that counts
// the bytes every MPI call of the program moves, per communicator, independently of twinkle's
// ProcessGroup bookkeeping (traffic that bypasses ProcessGroup is counted too).
//
// Use: LD_PRELOAD=build/tests/libtwinkle_mpi_count.so TWINKLE_MPI_COUNT_DIR=DIR mpirun ... prog
// (with mpirun, pass both with -x). Counting is on only between MPI_Pcontrol(1) and
// MPI_Pcontrol(0) (the MPI standard's profiling hook; a no-op without this library), so a
// program brackets exactly the work it wants measured (bench/layout_bench.cpp: one step).
// MPI_Finalize writes DIR/rank<world rank>.json:
//   {"world_rank": r, "world_size": n, "comms": [{"ranks": [world ranks of the communicator],
//     "ops": {"Allreduce": {"calls": c, "bytes": b}, ...}}, ...]}
// Bytes per call (payload as the caller describes it, count * datatype size):
//   Allreduce, Reduce, Bcast: count;  Allgather: recvcount * comm size (the gathered buffer);
//   Allgatherv: sum(recvcounts);  Reduce_scatter_block: recvcount * comm size (the reduced
//   input);  Reduce_scatter: sum(recvcounts);  Alltoall: sendcount * size;  Alltoallv:
//   sum(sendcounts);  Send/Isend/Ssend: count ("Send");  Recv: the received count,
//   Irecv: the posted count ("Recv");  Sendrecv: its send part as "Send", receive part as "Recv"
//   (MPI_PROC_NULL parts are not counted).
// Communicators are identified by their world ranks (MPI_Comm_group + translate_ranks), so the
// checker attributes traffic to tp / dp / pp ... groups with its own formulation of the mesh.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

struct OpStat {
  long long calls = 0, bytes = 0;
};
struct CommStat {
  std::vector<int> ranks;
  std::map<std::string, OpStat> ops;
};

bool g_on = false;
std::map<MPI_Comm, size_t> g_index;         // live communicator -> g_stats index
std::map<std::vector<int>, size_t> g_byset;  // world-rank set -> g_stats index
std::vector<CommStat> g_stats;

std::vector<int> world_ranks(MPI_Comm comm) {
  MPI_Group g, wg;
  PMPI_Comm_group(comm, &g);
  PMPI_Comm_group(MPI_COMM_WORLD, &wg);
  int n = 0;
  PMPI_Group_size(g, &n);
  std::vector<int> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) in[static_cast<size_t>(i)] = i;
  PMPI_Group_translate_ranks(g, n, in.data(), wg, out.data());
  PMPI_Group_free(&g);
  PMPI_Group_free(&wg);
  return out;
}

long long type_bytes(MPI_Datatype t) {
  int s = 0;
  PMPI_Type_size(t, &s);
  return s;
}

int comm_size(MPI_Comm c) {
  int n = 0;
  PMPI_Comm_size(c, &n);
  return n;
}

void add(MPI_Comm comm, const char* op, long long bytes) {
  if (!g_on) return;
  auto it = g_index.find(comm);
  size_t idx;
  if (it == g_index.end()) {
    std::vector<int> rs = world_ranks(comm);
    auto jt = g_byset.find(rs);
    if (jt == g_byset.end()) {
      idx = g_stats.size();
      g_stats.push_back(CommStat{rs, {}});
      g_byset[rs] = idx;
    } else {
      idx = jt->second;
    }
    g_index[comm] = idx;
  } else {
    idx = it->second;
  }
  OpStat& s = g_stats[idx].ops[op];
  s.calls += 1;
  s.bytes += bytes;
}

void write_report() {
  const char* dir = std::getenv("TWINKLE_MPI_COUNT_DIR");
  if (!dir || !*dir) return;
  int rank = 0, size = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string path = std::string(dir) + "/rank" + std::to_string(rank) + ".json";
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "mpi_count: cannot write %s\n", path.c_str());
    return;
  }
  std::fprintf(f, "{\"world_rank\": %d, \"world_size\": %d, \"comms\": [", rank, size);
  for (size_t i = 0; i < g_stats.size(); ++i) {
    std::fprintf(f, "%s\n {\"ranks\": [", i ? "," : "");
    for (size_t j = 0; j < g_stats[i].ranks.size(); ++j) std::fprintf(f, "%s%d", j ? ", " : "", g_stats[i].ranks[j]);
    std::fprintf(f, "], \"ops\": {");
    bool first = true;
    for (auto& [op, s] : g_stats[i].ops) {
      std::fprintf(f, "%s\"%s\": {\"calls\": %lld, \"bytes\": %lld}", first ? "" : ", ", op.c_str(), s.calls, s.bytes);
      first = false;
    }
    std::fprintf(f, "}}");
  }
  std::fprintf(f, "\n]}\n");
  std::fclose(f);
}

}  // namespace

extern "C" {

int MPI_Pcontrol(const int level, ...) {
  g_on = level != 0;
  return MPI_SUCCESS;
}

int MPI_Finalize(void) {
  write_report();
  return PMPI_Finalize();
}

int MPI_Comm_free(MPI_Comm* comm) {
  if (comm) g_index.erase(*comm);
  return PMPI_Comm_free(comm);
}

int MPI_Allreduce(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  add(c, "Allreduce", count * type_bytes(t));
  return PMPI_Allreduce(s, r, count, t, op, c);
}

int MPI_Reduce(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c) {
  add(c, "Reduce", count * type_bytes(t));
  return PMPI_Reduce(s, r, count, t, op, root, c);
}

int MPI_Bcast(void* b, int count, MPI_Datatype t, int root, MPI_Comm c) {
  add(c, "Bcast", count * type_bytes(t));
  return PMPI_Bcast(b, count, t, root, c);
}

int MPI_Allgather(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, MPI_Comm c) {
  add(c, "Allgather", rc * type_bytes(rt) * comm_size(c));
  return PMPI_Allgather(s, sc, st, r, rc, rt, c);
}

int MPI_Allgatherv(const void* s, int sc, MPI_Datatype st, void* r, const int rc[], const int d[], MPI_Datatype rt,
                   MPI_Comm c) {
  long long n = 0;
  for (int i = 0, p = comm_size(c); i < p; ++i) n += rc[i];
  add(c, "Allgatherv", n * type_bytes(rt));
  return PMPI_Allgatherv(s, sc, st, r, rc, d, rt, c);
}

int MPI_Reduce_scatter_block(const void* s, void* r, int rc, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  add(c, "Reduce_scatter_block", rc * type_bytes(t) * comm_size(c));
  return PMPI_Reduce_scatter_block(s, r, rc, t, op, c);
}

int MPI_Reduce_scatter(const void* s, void* r, const int rc[], MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  long long n = 0;
  for (int i = 0, p = comm_size(c); i < p; ++i) n += rc[i];
  add(c, "Reduce_scatter", n * type_bytes(t));
  return PMPI_Reduce_scatter(s, r, rc, t, op, c);
}

int MPI_Alltoall(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, MPI_Comm c) {
  add(c, "Alltoall", sc * type_bytes(st) * comm_size(c));
  return PMPI_Alltoall(s, sc, st, r, rc, rt, c);
}

int MPI_Alltoallv(const void* s, const int sc[], const int sd[], MPI_Datatype st, void* r, const int rc[],
                  const int rd[], MPI_Datatype rt, MPI_Comm c) {
  long long n = 0;
  for (int i = 0, p = comm_size(c); i < p; ++i) n += sc[i];
  add(c, "Alltoallv", n * type_bytes(st));
  return PMPI_Alltoallv(s, sc, sd, st, r, rc, rd, rt, c);
}

int MPI_Gather(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, int root, MPI_Comm c) {
  add(c, "Gather", sc * type_bytes(st));
  return PMPI_Gather(s, sc, st, r, rc, rt, root, c);
}

int MPI_Scatter(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, int root, MPI_Comm c) {
  add(c, "Scatter", rc * type_bytes(rt));
  return PMPI_Scatter(s, sc, st, r, rc, rt, root, c);
}

int MPI_Send(const void* b, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c) {
  if (dest != MPI_PROC_NULL) add(c, "Send", count * type_bytes(t));
  return PMPI_Send(b, count, t, dest, tag, c);
}

int MPI_Ssend(const void* b, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c) {
  if (dest != MPI_PROC_NULL) add(c, "Send", count * type_bytes(t));
  return PMPI_Ssend(b, count, t, dest, tag, c);
}

int MPI_Isend(const void* b, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c, MPI_Request* req) {
  if (dest != MPI_PROC_NULL) add(c, "Send", count * type_bytes(t));
  return PMPI_Isend(b, count, t, dest, tag, c, req);
}

int MPI_Irecv(void* b, int count, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Request* req) {
  if (src != MPI_PROC_NULL) add(c, "Recv", count * type_bytes(t));
  return PMPI_Irecv(b, count, t, src, tag, c, req);
}

int MPI_Recv(void* b, int count, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Status* st) {
  MPI_Status local;
  MPI_Status* s = st == MPI_STATUS_IGNORE ? &local : st;
  int rc = PMPI_Recv(b, count, t, src, tag, c, s);
  if (src != MPI_PROC_NULL && rc == MPI_SUCCESS) {
    int got = 0;
    PMPI_Get_count(s, t, &got);
    add(c, "Recv", got * type_bytes(t));
  }
  return rc;
}

int MPI_Sendrecv(const void* sb, int sc, MPI_Datatype st, int dest, int stag, void* rb, int rcount, MPI_Datatype rt,
                 int src, int rtag, MPI_Comm c, MPI_Status* status) {
  MPI_Status local;
  MPI_Status* s = status == MPI_STATUS_IGNORE ? &local : status;
  if (dest != MPI_PROC_NULL) add(c, "Send", sc * type_bytes(st));
  int rc = PMPI_Sendrecv(sb, sc, st, dest, stag, rb, rcount, rt, src, rtag, c, s);
  if (src != MPI_PROC_NULL && rc == MPI_SUCCESS) {
    int got = 0;
    PMPI_Get_count(s, rt, &got);
    add(c, "Recv", got * type_bytes(rt));
  }
  return rc;
}

}  // extern "C"
