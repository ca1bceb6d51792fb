// twinkle-run — torchrun-style launcher over OpenMPI's mpirun.
//
//   twinkle-run --nproc_per_node=N [--nnodes=M --node_rank=K --hostfile=F
//               --master_addr=A --master_port=P] [--dry-run] PROGRAM ARGS...
//
// Options accept both "--x=v" and "--x v" (and '-' for '_': --nproc-per-node). Parsing
// stops at the first argument that is not an option (or after "--"); everything from
// PROGRAM on is passed to the ranks untouched. It execs (execvp) mpirun with:
//   -np N*M                         (multi-node: --hostfile F --map-by ppr:N:node)
//   --oversubscribe                 when N exceeds this node's cores
//   --bind-to none                  so a rank's OpenMP threads may use every core
//   --mca mpi_yield_when_idle 1     waiting ranks yield instead of busy polling
//   --mca orte_abort_on_non_zero_status 1   a rank that fails or dies (even SIGKILL)
//                                   takes the whole job down (OpenMPI's default, made explicit)
//   --allow-run-as-root             when run by root
//   -x OMP_NUM_THREADS=T            T = max(1, cores / N) (1 when oversubscribed) unless
//                                   the user set OMP_NUM_THREADS (then forwarded as is)
//   -x OMP_WAIT_POLICY=passive      (unless set by the user)
//   -x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=68719476736
//                                   glibc keeps freed memory: removes the page-fault cliff of
//                                   large messages (bench/README.md, MALLOC_MMAP_MAX_)
//   -x LOG_LEVEL, -x TWINKLE_*, -x CUDA_VISIBLE_DEVICES, -x ASCEND_RT_VISIBLE_DEVICES
//                                   forwarded when set. Device mapping is done by the runtime
//                                   (twinkle::local_device_id): local rank i
//                                   (OMPI_COMM_WORLD_LOCAL_RANK) uses entry i of the list, or
//                                   device i when the variable is unset.
//   -x TWINKLE_MASTER_ADDR / TWINKLE_MASTER_PORT   when given (informational: MPI does its
//                                   own wire-up; torchrun scripts may pass them unchanged)
// Python programs: a PROGRAM ending in ".py" runs under the interpreter the Python package was
// built for ($TWINKLE_PYTHON, else the build's: the project environment's .venv/bin/python), with the built package
// (build/python) put in front of PYTHONPATH and forwarded (-x PYTHONPATH):
//   twinkle-run --nproc_per_node=8 examples/python/tp.py
// Other options: --dry-run prints the command (one shell-quoted line) instead of running it;
// --mpirun=PATH (or env TWINKLE_MPIRUN) picks the mpirun binary; --mpi-arg=ARG (repeatable)
// appends ARG to mpirun's options. Exit status: mpirun's (127 when it cannot be started,
// 2 for a bad command line).
//
// Multi-node: MPI starts the whole job from one node. Run twinkle-run on node_rank 0 with
// --nnodes=M --hostfile=F (one line per node, "host slots=N"); on other node ranks it
// prints a note and exits 0, so a torchrun-style script run on every node still works.
//
// Without twinkle-run, programs run unchanged under
//   mpirun -np 8 --bind-to none --mca mpi_yield_when_idle 1 [--oversubscribe]
//          -x MALLOC_MMAP_MAX_=0 -x MALLOC_TRIM_THRESHOLD_=68719476736 -x OMP_WAIT_POLICY=passive prog
// (`twinkle-run --dry-run ...` prints the exact line), and under Slurm:
//   srun --mpi=pmix -N 2 --ntasks-per-node=8 --cpu-bind=none
//        --export=ALL,MALLOC_MMAP_MAX_=0,MALLOC_TRIM_THRESHOLD_=68719476736,OMP_WAIT_POLICY=passive prog
// (twinkle::initialize detects PMIX_RANK / PMI_SIZE and calls MPI_Init_thread; local ranks come
// from SLURM_LOCALID).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

struct Options {
  int nproc_per_node = 1, nnodes = 1, node_rank = 0;
  std::string hostfile, master_addr, master_port, mpirun;
  bool dry_run = false;
  std::vector<std::string> mpi_args;
  std::vector<std::string> program;  // PROGRAM ARGS...
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "twinkle-run: " << msg << "\n"
            << "usage: twinkle-run --nproc_per_node=N [--nnodes=M --node_rank=K --hostfile=F --master_addr=A "
               "--master_port=P] [--dry-run] [--mpirun=PATH] [--mpi-arg=ARG]... PROGRAM [ARGS...]\n";
  std::exit(2);
}

void print_help() {
  std::cout << "twinkle-run: launch PROGRAM on N ranks per node through OpenMPI's mpirun (torchrun-style).\n\n"
               "  --nproc_per_node=N   ranks on this node (default 1)\n"
               "  --nnodes=M           nodes (default 1; M > 1 needs --hostfile, run on node_rank 0 only)\n"
               "  --node_rank=K        this node's index (default 0)\n"
               "  --hostfile=F         OpenMPI hostfile for multi-node jobs\n"
               "  --master_addr=A      accepted for torchrun compatibility (exported as TWINKLE_MASTER_ADDR)\n"
               "  --master_port=P      accepted for torchrun compatibility (exported as TWINKLE_MASTER_PORT)\n"
               "  --dry-run            print the mpirun command instead of running it\n"
               "  --mpirun=PATH        mpirun binary (default $TWINKLE_MPIRUN or 'mpirun')\n"
               "  --mpi-arg=ARG        extra mpirun argument (repeatable)\n";
}

int parse_int(const std::string& name, const std::string& v, int min) {
  char* end = nullptr;
  long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || !end || *end != '\0' || x < min || x > 1 << 20)
    usage_error("--" + name + "=" + v + ": expected an integer >= " + std::to_string(min));
  return static_cast<int>(x);
}

Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      print_help();
      std::exit(0);
    }
    if (a.size() > 1 && a[0] == '-' && a[1] != '-')  // "-n 2" would become PROGRAM "-n" and mpirun's own -n
      usage_error("unknown option " + a + " (twinkle-run's options are torchrun's long ones, e.g. "
                  "--nproc_per_node=N; put -- before a PROGRAM whose name starts with '-')");
    if (a.rfind("--", 0) != 0) break;  // PROGRAM
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    for (auto& c : name)
      if (c == '-') c = '_';
    if (name == "dry_run") {
      if (has_value) usage_error("--dry-run takes no value");
      o.dry_run = true;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) usage_error("--" + name + " needs a value");
      value = argv[++i];
    }
    if (name == "nproc_per_node") o.nproc_per_node = parse_int(name, value, 1);
    else if (name == "nnodes") o.nnodes = parse_int(name, value, 1);
    else if (name == "node_rank") o.node_rank = parse_int(name, value, 0);
    else if (name == "hostfile") o.hostfile = value;
    else if (name == "master_addr") o.master_addr = value;
    else if (name == "master_port") o.master_port = value;
    else if (name == "mpirun") o.mpirun = value;
    else if (name == "mpi_arg") o.mpi_args.push_back(value);
    else usage_error("unknown option --" + name);
  }
  for (; i < argc; ++i) o.program.push_back(argv[i]);
  if (o.program.empty()) usage_error("no PROGRAM given");
  if (o.node_rank >= o.nnodes)
    usage_error("--node_rank=" + std::to_string(o.node_rank) + " must be < --nnodes=" + std::to_string(o.nnodes));
  if (o.nnodes > 1 && o.hostfile.empty())
    usage_error("--nnodes=" + std::to_string(o.nnodes) +
                " needs --hostfile=F (OpenMPI starts every node's ranks from node_rank 0)");
  return o;
}

int cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

bool is_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v;
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (o.node_rank != 0) {
    std::cerr << "twinkle-run: node_rank " << o.node_rank << ": with MPI the whole job is started from node_rank 0 "
              << "(mpirun reaches the other nodes through --hostfile); nothing to do here\n";
    return 0;
  }
  const int ncores = cores();
  const bool oversubscribed = o.nproc_per_node > ncores;
  const int total = o.nproc_per_node * o.nnodes;

  std::vector<std::string> cmd;
  cmd.push_back(!o.mpirun.empty() ? o.mpirun : is_set("TWINKLE_MPIRUN") ? std::getenv("TWINKLE_MPIRUN") : "mpirun");
  cmd.insert(cmd.end(), {"-np", std::to_string(total)});
  if (o.nnodes > 1) cmd.insert(cmd.end(), {"--hostfile", o.hostfile, "--map-by", "ppr:" + std::to_string(o.nproc_per_node) + ":node"});
  if (oversubscribed) cmd.push_back("--oversubscribe");
  if (geteuid() == 0) cmd.push_back("--allow-run-as-root");
  cmd.insert(cmd.end(), {"--bind-to", "none", "--mca", "mpi_yield_when_idle", "1", "--mca",
                         "orte_abort_on_non_zero_status", "1"});
  auto set_var = [&](const std::string& kv) { cmd.insert(cmd.end(), {"-x", kv}); };
  auto forward = [&](const std::string& name) { cmd.insert(cmd.end(), {"-x", name}); };
  if (is_set("OMP_NUM_THREADS")) forward("OMP_NUM_THREADS");
  else set_var("OMP_NUM_THREADS=" + std::to_string(oversubscribed ? 1 : std::max(1, ncores / o.nproc_per_node)));
  if (is_set("OMP_WAIT_POLICY")) forward("OMP_WAIT_POLICY");
  else set_var("OMP_WAIT_POLICY=passive");
  set_var("MALLOC_MMAP_MAX_=0");
  set_var("MALLOC_TRIM_THRESHOLD_=68719476736");
  for (const char* v : {"LOG_LEVEL", "CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"})
    if (is_set(v)) forward(v);
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (kv.rfind("TWINKLE_", 0) == 0 && eq != std::string::npos && eq + 1 < kv.size()) {
      std::string name = kv.substr(0, eq);
      if (name != "TWINKLE_MPIRUN" && name != "TWINKLE_MASTER_ADDR" && name != "TWINKLE_MASTER_PORT" &&
          name != "TWINKLE_PYTHON")
        forward(name);
    }
  }
  if (!o.master_addr.empty()) {
    setenv("TWINKLE_MASTER_ADDR", o.master_addr.c_str(), 1);
    forward("TWINKLE_MASTER_ADDR");
  }
  if (!o.master_port.empty()) {
    setenv("TWINKLE_MASTER_PORT", o.master_port.c_str(), 1);
    forward("TWINKLE_MASTER_PORT");
  }
  const std::string& prog = o.program.front();
  const bool python = prog.size() > 3 && prog.compare(prog.size() - 3, 3, ".py") == 0;
  if (python) {
#ifdef TWINKLE_RUN_PYTHONPATH
    std::string pp = TWINKLE_RUN_PYTHONPATH;
    if (is_set("PYTHONPATH")) pp += std::string(":") + std::getenv("PYTHONPATH");
    setenv("PYTHONPATH", pp.c_str(), 1);
#endif
    if (is_set("PYTHONPATH")) forward("PYTHONPATH");
  }
  for (const auto& a : o.mpi_args) cmd.push_back(a);
  if (python) {
#ifdef TWINKLE_RUN_PYTHON
    cmd.push_back(is_set("TWINKLE_PYTHON") ? std::getenv("TWINKLE_PYTHON") : TWINKLE_RUN_PYTHON);
#else
    cmd.push_back(is_set("TWINKLE_PYTHON") ? std::getenv("TWINKLE_PYTHON") : "python3");
#endif
  }
  cmd.insert(cmd.end(), o.program.begin(), o.program.end());

  if (o.dry_run) {
    std::string line;
    for (const auto& a : cmd) line += (line.empty() ? "" : " ") + shell_quote(a);
    std::cout << line << "\n";
    return 0;
  }
  std::vector<char*> args;
  for (auto& a : cmd) args.push_back(a.data());
  args.push_back(nullptr);
  std::fflush(nullptr);
  execvp(args[0], args.data());
  std::cerr << "twinkle-run: cannot start '" << cmd[0] << "': " << std::strerror(errno)
            << " (install openmpi-bin, or point --mpirun / TWINKLE_MPIRUN at mpirun)\n";
  return 127;
}
