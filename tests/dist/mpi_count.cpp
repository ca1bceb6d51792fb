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
//   Allreduce, Reduce, Bcast, Scan, Exscan: count;  Allgather: recvcount * comm size (the
//   gathered buffer);  Allgatherv: sum(recvcounts);  Reduce_scatter_block: recvcount * comm size
//   (the reduced input);  Reduce_scatter: sum(recvcounts);  Alltoall: sendcount * size;
//   Alltoallv: sum(sendcounts);  Alltoallw: sum(sendcounts[i] * size of sendtypes[i]);  Gather:
//   sendcount;  Gatherv: sendcount;  Scatter, Scatterv: recvcount;  Send/Ssend/Bsend/Rsend and
//   Isend/Issend/Ibsend/Irsend: count ("Send");  Recv: the received count, Irecv: the posted
//   count ("Recv");  Sendrecv, Sendrecv_replace: the send part as "Send", the receive part as
//   "Recv" (MPI_PROC_NULL parts are not counted);  Mrecv (received) / Imrecv (posted count): as
//   "Recv (matched, communicator unknown)" on the world group (MPI_Message hides its communicator).
// Non-blocking collectives (Iallreduce, Ibcast, Iallgather(v), Ireduce_scatter(_block),
// Ialltoall(v,w), Ireduce, Igather(v), Iscatter(v), Iscan, Iexscan) count as their blocking kind
// when they are started; persistent point-to-point requests (Send_init, Ssend_init, Bsend_init,
// Rsend_init, Recv_init) count at every MPI_Start / MPI_Startall, as "Send" / "Recv" with the
// posted count. What this library cannot attribute to bytes on a communicator is recorded as
// its own kind "Uncounted <call>" (calls, bytes 0) so that a checker that knows only the kinds
// above fails on it: one-sided calls (Put, Get, Accumulate, Get_accumulate, Fetch_and_op,
// Compare_and_swap, Rput, Rget, Raccumulate, Rget_accumulate; recorded on the window's group) and
// the neighbourhood collectives (Neighbor_* / Ineighbor_*). tests/dist/mpi_count_selftest.cpp
// (tests/volume.cmake) calls each of them and checks the report.
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

void add_group(MPI_Group g, const char* op, long long bytes) {
  if (!g_on) return;
  MPI_Group wg;
  PMPI_Comm_group(MPI_COMM_WORLD, &wg);
  int n = 0;
  PMPI_Group_size(g, &n);
  std::vector<int> in(static_cast<size_t>(n)), rs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) in[static_cast<size_t>(i)] = i;
  PMPI_Group_translate_ranks(g, n, in.data(), wg, rs.data());
  PMPI_Group_free(&wg);
  auto jt = g_byset.find(rs);
  size_t idx;
  if (jt == g_byset.end()) {
    idx = g_stats.size();
    g_stats.push_back(CommStat{rs, {}});
    g_byset[rs] = idx;
  } else {
    idx = jt->second;
  }
  OpStat& s = g_stats[idx].ops[op];
  s.calls += 1;
  s.bytes += bytes;
}

void add_win(MPI_Win w, const char* op) {
  if (!g_on) return;
  MPI_Group g;
  PMPI_Win_get_group(w, &g);
  add_group(g, op, 0);
  PMPI_Group_free(&g);
}

// persistent point-to-point requests: what MPI_Start counts
struct Persistent {
  MPI_Comm comm;
  const char* op;
  long long bytes;
};
std::map<MPI_Request, Persistent> g_persistent;

void start(MPI_Request r) {
  auto it = g_persistent.find(r);
  if (it != g_persistent.end()) add(it->second.comm, it->second.op, it->second.bytes);
}

long long sum_counts(const int c[], int n) {
  long long s = 0;
  for (int i = 0; i < n; ++i) s += c[i];
  return s;
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

int MPI_Scan(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  add(c, "Scan", count * type_bytes(t));
  return PMPI_Scan(s, r, count, t, op, c);
}

int MPI_Exscan(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  add(c, "Exscan", count * type_bytes(t));
  return PMPI_Exscan(s, r, count, t, op, c);
}

int MPI_Gatherv(const void* s, int sc, MPI_Datatype st, void* r, const int rc[], const int d[], MPI_Datatype rt,
                int root, MPI_Comm c) {
  add(c, "Gatherv", sc * type_bytes(st));
  return PMPI_Gatherv(s, sc, st, r, rc, d, rt, root, c);
}

int MPI_Scatterv(const void* s, const int sc[], const int d[], MPI_Datatype st, void* r, int rc, MPI_Datatype rt,
                 int root, MPI_Comm c) {
  add(c, "Scatterv", rc * type_bytes(rt));
  return PMPI_Scatterv(s, sc, d, st, r, rc, rt, root, c);
}

int MPI_Alltoallw(const void* s, const int sc[], const int sd[], const MPI_Datatype st[], void* r, const int rc[],
                  const int rd[], const MPI_Datatype rt[], MPI_Comm c) {
  long long n = 0;
  for (int i = 0, p = comm_size(c); i < p; ++i) n += sc[i] * type_bytes(st[i]);
  add(c, "Alltoallw", n);
  return PMPI_Alltoallw(s, sc, sd, st, r, rc, rd, rt, c);
}

int MPI_Bsend(const void* b, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c) {
  if (dest != MPI_PROC_NULL) add(c, "Send", count * type_bytes(t));
  return PMPI_Bsend(b, count, t, dest, tag, c);
}

int MPI_Rsend(const void* b, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c) {
  if (dest != MPI_PROC_NULL) add(c, "Send", count * type_bytes(t));
  return PMPI_Rsend(b, count, t, dest, tag, c);
}

int MPI_Sendrecv_replace(void* b, int count, MPI_Datatype t, int dest, int stag, int src, int rtag, MPI_Comm c,
                         MPI_Status* status) {
  MPI_Status local;
  MPI_Status* s = status == MPI_STATUS_IGNORE ? &local : status;
  if (dest != MPI_PROC_NULL) add(c, "Send", count * type_bytes(t));
  int rc = PMPI_Sendrecv_replace(b, count, t, dest, stag, src, rtag, c, s);
  if (src != MPI_PROC_NULL && rc == MPI_SUCCESS) {
    int got = 0;
    PMPI_Get_count(s, t, &got);
    add(c, "Recv", got * type_bytes(t));
  }
  return rc;
}

int MPI_Mrecv(void* b, int count, MPI_Datatype t, MPI_Message* m, MPI_Status* status) {
  MPI_Status local;
  MPI_Status* s = status == MPI_STATUS_IGNORE ? &local : status;
  // the message's communicator is not exposed by MPI: counted on the world group's entry
  const bool real = m && *m != MPI_MESSAGE_NO_PROC;
  int rc = PMPI_Mrecv(b, count, t, m, s);
  if (real && rc == MPI_SUCCESS) {
    int got = 0;
    PMPI_Get_count(s, t, &got);
    add(MPI_COMM_WORLD, "Recv (matched, communicator unknown)", got * type_bytes(t));
  }
  return rc;
}

int MPI_Imrecv(void* b, int count, MPI_Datatype t, MPI_Message* m, MPI_Request* req) {
  if (m && *m != MPI_MESSAGE_NO_PROC) add(MPI_COMM_WORLD, "Recv (matched, communicator unknown)", count * type_bytes(t));
  return PMPI_Imrecv(b, count, t, m, req);
}

// --- non-blocking point-to-point variants
int MPI_Issend(const void* b, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c, MPI_Request* req) {
  if (dest != MPI_PROC_NULL) add(c, "Send", count * type_bytes(t));
  return PMPI_Issend(b, count, t, dest, tag, c, req);
}

int MPI_Ibsend(const void* b, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c, MPI_Request* req) {
  if (dest != MPI_PROC_NULL) add(c, "Send", count * type_bytes(t));
  return PMPI_Ibsend(b, count, t, dest, tag, c, req);
}

int MPI_Irsend(const void* b, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c, MPI_Request* req) {
  if (dest != MPI_PROC_NULL) add(c, "Send", count * type_bytes(t));
  return PMPI_Irsend(b, count, t, dest, tag, c, req);
}

// --- persistent point-to-point: counted when started
#define TWINKLE_PERSISTENT(NAME, KIND, PEER)                                                                  \
  int MPI_##NAME(const void* b, int count, MPI_Datatype t, int PEER, int tag, MPI_Comm c, MPI_Request* req) { \
    int rc = PMPI_##NAME(b, count, t, PEER, tag, c, req);                                                     \
    if (rc == MPI_SUCCESS && PEER != MPI_PROC_NULL) g_persistent[*req] = {c, KIND, count * type_bytes(t)};    \
    return rc;                                                                                                \
  }
TWINKLE_PERSISTENT(Send_init, "Send", dest)
TWINKLE_PERSISTENT(Ssend_init, "Send", dest)
TWINKLE_PERSISTENT(Bsend_init, "Send", dest)
TWINKLE_PERSISTENT(Rsend_init, "Send", dest)
#undef TWINKLE_PERSISTENT

int MPI_Recv_init(void* b, int count, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Request* req) {
  int rc = PMPI_Recv_init(b, count, t, src, tag, c, req);
  if (rc == MPI_SUCCESS && src != MPI_PROC_NULL) g_persistent[*req] = {c, "Recv", count * type_bytes(t)};
  return rc;
}

int MPI_Start(MPI_Request* req) {
  if (req) start(*req);
  return PMPI_Start(req);
}

int MPI_Startall(int n, MPI_Request reqs[]) {
  for (int i = 0; i < n; ++i) start(reqs[i]);
  return PMPI_Startall(n, reqs);
}

int MPI_Request_free(MPI_Request* req) {
  if (req) g_persistent.erase(*req);
  return PMPI_Request_free(req);
}

// --- non-blocking collectives: the blocking kind, counted when started
int MPI_Iallreduce(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request* req) {
  add(c, "Allreduce", count * type_bytes(t));
  return PMPI_Iallreduce(s, r, count, t, op, c, req);
}

int MPI_Ireduce(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int root, MPI_Comm c,
                MPI_Request* req) {
  add(c, "Reduce", count * type_bytes(t));
  return PMPI_Ireduce(s, r, count, t, op, root, c, req);
}

int MPI_Ibcast(void* b, int count, MPI_Datatype t, int root, MPI_Comm c, MPI_Request* req) {
  add(c, "Bcast", count * type_bytes(t));
  return PMPI_Ibcast(b, count, t, root, c, req);
}

int MPI_Iscan(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request* req) {
  add(c, "Scan", count * type_bytes(t));
  return PMPI_Iscan(s, r, count, t, op, c, req);
}

int MPI_Iexscan(const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request* req) {
  add(c, "Exscan", count * type_bytes(t));
  return PMPI_Iexscan(s, r, count, t, op, c, req);
}

int MPI_Iallgather(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, MPI_Comm c,
                   MPI_Request* req) {
  add(c, "Allgather", rc * type_bytes(rt) * comm_size(c));
  return PMPI_Iallgather(s, sc, st, r, rc, rt, c, req);
}

int MPI_Iallgatherv(const void* s, int sc, MPI_Datatype st, void* r, const int rc[], const int d[], MPI_Datatype rt,
                    MPI_Comm c, MPI_Request* req) {
  add(c, "Allgatherv", sum_counts(rc, comm_size(c)) * type_bytes(rt));
  return PMPI_Iallgatherv(s, sc, st, r, rc, d, rt, c, req);
}

int MPI_Ireduce_scatter_block(const void* s, void* r, int rc, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                              MPI_Request* req) {
  add(c, "Reduce_scatter_block", rc * type_bytes(t) * comm_size(c));
  return PMPI_Ireduce_scatter_block(s, r, rc, t, op, c, req);
}

int MPI_Ireduce_scatter(const void* s, void* r, const int rc[], MPI_Datatype t, MPI_Op op, MPI_Comm c,
                        MPI_Request* req) {
  add(c, "Reduce_scatter", sum_counts(rc, comm_size(c)) * type_bytes(t));
  return PMPI_Ireduce_scatter(s, r, rc, t, op, c, req);
}

int MPI_Ialltoall(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, MPI_Comm c,
                  MPI_Request* req) {
  add(c, "Alltoall", sc * type_bytes(st) * comm_size(c));
  return PMPI_Ialltoall(s, sc, st, r, rc, rt, c, req);
}

int MPI_Ialltoallv(const void* s, const int sc[], const int sd[], MPI_Datatype st, void* r, const int rc[],
                   const int rd[], MPI_Datatype rt, MPI_Comm c, MPI_Request* req) {
  add(c, "Alltoallv", sum_counts(sc, comm_size(c)) * type_bytes(st));
  return PMPI_Ialltoallv(s, sc, sd, st, r, rc, rd, rt, c, req);
}

int MPI_Ialltoallw(const void* s, const int sc[], const int sd[], const MPI_Datatype st[], void* r, const int rc[],
                   const int rd[], const MPI_Datatype rt[], MPI_Comm c, MPI_Request* req) {
  long long n = 0;
  for (int i = 0, p = comm_size(c); i < p; ++i) n += sc[i] * type_bytes(st[i]);
  add(c, "Alltoallw", n);
  return PMPI_Ialltoallw(s, sc, sd, st, r, rc, rd, rt, c, req);
}

int MPI_Igather(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, int root, MPI_Comm c,
                MPI_Request* req) {
  add(c, "Gather", sc * type_bytes(st));
  return PMPI_Igather(s, sc, st, r, rc, rt, root, c, req);
}

int MPI_Igatherv(const void* s, int sc, MPI_Datatype st, void* r, const int rc[], const int d[], MPI_Datatype rt,
                 int root, MPI_Comm c, MPI_Request* req) {
  add(c, "Gatherv", sc * type_bytes(st));
  return PMPI_Igatherv(s, sc, st, r, rc, d, rt, root, c, req);
}

int MPI_Iscatter(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, int root, MPI_Comm c,
                 MPI_Request* req) {
  add(c, "Scatter", rc * type_bytes(rt));
  return PMPI_Iscatter(s, sc, st, r, rc, rt, root, c, req);
}

int MPI_Iscatterv(const void* s, const int sc[], const int d[], MPI_Datatype st, void* r, int rc, MPI_Datatype rt,
                  int root, MPI_Comm c, MPI_Request* req) {
  add(c, "Scatterv", rc * type_bytes(rt));
  return PMPI_Iscatterv(s, sc, d, st, r, rc, rt, root, c, req);
}

// --- not attributable to bytes here: their own "Uncounted <call>" kind, which fails a checker
int MPI_Put(const void* o, int oc, MPI_Datatype ot, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Win w) {
  add_win(w, "Uncounted Put");
  return PMPI_Put(o, oc, ot, tr, td, tc, tt, w);
}

int MPI_Get(void* o, int oc, MPI_Datatype ot, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Win w) {
  add_win(w, "Uncounted Get");
  return PMPI_Get(o, oc, ot, tr, td, tc, tt, w);
}

int MPI_Accumulate(const void* o, int oc, MPI_Datatype ot, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Op op,
                   MPI_Win w) {
  add_win(w, "Uncounted Accumulate");
  return PMPI_Accumulate(o, oc, ot, tr, td, tc, tt, op, w);
}

int MPI_Get_accumulate(const void* o, int oc, MPI_Datatype ot, void* ra, int rc, MPI_Datatype rt, int tr, MPI_Aint td,
                       int tc, MPI_Datatype tt, MPI_Op op, MPI_Win w) {
  add_win(w, "Uncounted Get_accumulate");
  return PMPI_Get_accumulate(o, oc, ot, ra, rc, rt, tr, td, tc, tt, op, w);
}

int MPI_Fetch_and_op(const void* o, void* ra, MPI_Datatype t, int tr, MPI_Aint td, MPI_Op op, MPI_Win w) {
  add_win(w, "Uncounted Fetch_and_op");
  return PMPI_Fetch_and_op(o, ra, t, tr, td, op, w);
}

int MPI_Compare_and_swap(const void* o, const void* ca, void* ra, MPI_Datatype t, int tr, MPI_Aint td, MPI_Win w) {
  add_win(w, "Uncounted Compare_and_swap");
  return PMPI_Compare_and_swap(o, ca, ra, t, tr, td, w);
}

int MPI_Rput(const void* o, int oc, MPI_Datatype ot, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Win w,
             MPI_Request* req) {
  add_win(w, "Uncounted Rput");
  return PMPI_Rput(o, oc, ot, tr, td, tc, tt, w, req);
}

int MPI_Rget(void* o, int oc, MPI_Datatype ot, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Win w,
             MPI_Request* req) {
  add_win(w, "Uncounted Rget");
  return PMPI_Rget(o, oc, ot, tr, td, tc, tt, w, req);
}

int MPI_Raccumulate(const void* o, int oc, MPI_Datatype ot, int tr, MPI_Aint td, int tc, MPI_Datatype tt, MPI_Op op,
                    MPI_Win w, MPI_Request* req) {
  add_win(w, "Uncounted Raccumulate");
  return PMPI_Raccumulate(o, oc, ot, tr, td, tc, tt, op, w, req);
}

int MPI_Rget_accumulate(const void* o, int oc, MPI_Datatype ot, void* ra, int rc, MPI_Datatype rt, int tr,
                        MPI_Aint td, int tc, MPI_Datatype tt, MPI_Op op, MPI_Win w, MPI_Request* req) {
  add_win(w, "Uncounted Rget_accumulate");
  return PMPI_Rget_accumulate(o, oc, ot, ra, rc, rt, tr, td, tc, tt, op, w, req);
}

int MPI_Neighbor_allgather(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, MPI_Comm c) {
  add(c, "Uncounted Neighbor_allgather", 0);
  return PMPI_Neighbor_allgather(s, sc, st, r, rc, rt, c);
}

int MPI_Neighbor_allgatherv(const void* s, int sc, MPI_Datatype st, void* r, const int rc[], const int d[],
                            MPI_Datatype rt, MPI_Comm c) {
  add(c, "Uncounted Neighbor_allgatherv", 0);
  return PMPI_Neighbor_allgatherv(s, sc, st, r, rc, d, rt, c);
}

int MPI_Neighbor_alltoall(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, MPI_Comm c) {
  add(c, "Uncounted Neighbor_alltoall", 0);
  return PMPI_Neighbor_alltoall(s, sc, st, r, rc, rt, c);
}

int MPI_Neighbor_alltoallv(const void* s, const int sc[], const int sd[], MPI_Datatype st, void* r, const int rc[],
                           const int rd[], MPI_Datatype rt, MPI_Comm c) {
  add(c, "Uncounted Neighbor_alltoallv", 0);
  return PMPI_Neighbor_alltoallv(s, sc, sd, st, r, rc, rd, rt, c);
}

int MPI_Neighbor_alltoallw(const void* s, const int sc[], const MPI_Aint sd[], const MPI_Datatype st[], void* r,
                           const int rc[], const MPI_Aint rd[], const MPI_Datatype rt[], MPI_Comm c) {
  add(c, "Uncounted Neighbor_alltoallw", 0);
  return PMPI_Neighbor_alltoallw(s, sc, sd, st, r, rc, rd, rt, c);
}

int MPI_Ineighbor_allgather(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, MPI_Comm c,
                            MPI_Request* req) {
  add(c, "Uncounted Ineighbor_allgather", 0);
  return PMPI_Ineighbor_allgather(s, sc, st, r, rc, rt, c, req);
}

int MPI_Ineighbor_allgatherv(const void* s, int sc, MPI_Datatype st, void* r, const int rc[], const int d[],
                             MPI_Datatype rt, MPI_Comm c, MPI_Request* req) {
  add(c, "Uncounted Ineighbor_allgatherv", 0);
  return PMPI_Ineighbor_allgatherv(s, sc, st, r, rc, d, rt, c, req);
}

int MPI_Ineighbor_alltoall(const void* s, int sc, MPI_Datatype st, void* r, int rc, MPI_Datatype rt, MPI_Comm c,
                           MPI_Request* req) {
  add(c, "Uncounted Ineighbor_alltoall", 0);
  return PMPI_Ineighbor_alltoall(s, sc, st, r, rc, rt, c, req);
}

int MPI_Ineighbor_alltoallv(const void* s, const int sc[], const int sd[], MPI_Datatype st, void* r, const int rc[],
                            const int rd[], MPI_Datatype rt, MPI_Comm c, MPI_Request* req) {
  add(c, "Uncounted Ineighbor_alltoallv", 0);
  return PMPI_Ineighbor_alltoallv(s, sc, sd, st, r, rc, rd, rt, c, req);
}

int MPI_Ineighbor_alltoallw(const void* s, const int sc[], const MPI_Aint sd[], const MPI_Datatype st[], void* r,
                            const int rc[], const MPI_Aint rd[], const MPI_Datatype rt[], MPI_Comm c,
                            MPI_Request* req) {
  add(c, "Uncounted Ineighbor_alltoallw", 0);
  return PMPI_Ineighbor_alltoallw(s, sc, sd, st, r, rc, rd, rt, c, req);
}

}  // extern "C"
